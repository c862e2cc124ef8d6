"""Rough edges a first-time user met (helper K's walk-through): times in `get --json`, and
an error that tells someone who typed a title what an ID is."""

from __future__ import annotations

import json
import os
import subprocess

from tests.helpers import Cli


def test_get_reports_when_the_item_was_created_not_when_its_head_was(vault: Cli) -> None:
    """`get --json` and `list --json` agree: created_ms is the first revision's time and
    updated_ms the head's (get used to report the head's time as created_ms after an edit)."""
    item = vault.put("Flat white", "Ana takes it without sugar", "coffee")
    vault.ok("edit", item["id"], "--add-tag", "drinks")
    revisions = vault.ok("history", item["id"])["revisions"]
    first, head = revisions[0], revisions[-1]
    assert first["created_ms"] != head["created_ms"]  # two CLI processes apart: two moments
    got = vault.ok("get", item["id"])
    assert (got["created_ms"], got["updated_ms"]) == (first["created_ms"], head["created_ms"])
    listed = vault.ok("list")["items"]
    assert [(i["created_ms"], i["updated_ms"]) for i in listed] == [(got["created_ms"], got["updated_ms"])]


def test_a_title_given_as_an_id_is_told_what_an_id_is(vault: Cli) -> None:
    """API-8: a typed error whose sentence says where IDs are shown and that a title is not one."""
    vault.put("Bank", "the branch on Main Street")
    error = vault.err("get", "Bank")
    assert error["code"] == "invalid_input"
    assert "a title is not an ID" in error["message"]
    assert "list and search" in error["message"]


def test_copy_without_a_graphical_session_says_so_instead_of_asking_for_xclip(vault: Cli) -> None:
    """Over SSH or on a console, installing xclip would not help: the sentence names the missing
    session and what works there. CD-10: the password stays out of the output."""
    login = vault.ok("login", "new", "--title", "Bank", "--username", "ana", "--password-stdin", input="hunter2-long-enough")
    vault.sudo()
    vault.env.update({"DISPLAY": "", "WAYLAND_DISPLAY": "", "MEMORIES_CLIPBOARD": ""})
    error = vault.err("login", "copy-password", login["id"])
    assert error["code"] == "clipboard_unavailable"
    assert "No graphical session" in error["message"] and "install" not in error["message"]
    assert "hunter2" not in str(error)


def test_a_search_that_misses_a_login_says_where_logins_are_listed(vault: Cli) -> None:
    """Logins are not searched (their card is protected); an empty answer says where to look."""
    vault.ok("login", "new", "--title", "Bank", "--username", "ana", "--generate")
    proc = vault.run("search", "bank")
    assert proc.returncode == 0
    assert "(no matches; logins and protected cards are not searched: `memories login list WORDS` finds logins)" in proc.stdout
    # …and the command it names finds the login by the word searched for.
    found = vault.run("login", "list", "bank")
    assert found.returncode == 0 and "Bank" in found.stdout and "ana" in found.stdout, found.stdout


def test_a_plan_digest_prefix_gets_a_sentence_not_the_request_schema(vault: Cli) -> None:
    """`job run 1d7d52ce` answered "Expected `str` matching regex '^[0-9a-f]{64}$' - at `$.digest`"."""
    for action in ("run", "show"):
        error = vault.err("job", action, "1d7d52ce16ba")
        assert error["code"] == "invalid_request"
        assert "all 64 hex characters" in error["message"] and "regex" not in error["message"]


def test_a_command_in_an_empty_data_home_says_to_create_a_vault(cli: Cli) -> None:
    """Before: "The engine is not running; `memories unlock` starts it.", and unlock then said
    there was no vault. Now the first answer is the one that helps; nothing is created."""
    error = cli.err("list")
    assert error["code"] == "not_initialized" and "memories init" in error["message"]
    assert not cli.home.exists()


def test_an_argument_that_is_not_utf8_gets_a_sentence(vault: Cli) -> None:
    """API-8: `memories search $'caf\\xe9'` (Latin-1 bytes in a UTF-8 shell) is refused before
    anything is sent, with a sentence saying what is wrong with the text, not about JSON."""
    argv = [os.fsencode(word) for word in vault.command()] + [b"search", b"caf\xe9", b"--json"]
    proc = subprocess.run(argv, env=vault.environ(), capture_output=True, check=False, timeout=60)
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_input" and "not valid Unicode" in error["message"], error
