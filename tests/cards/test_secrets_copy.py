"""Secret maps, protect_secret and clipboard copy through the real CLI and daemon (CD-7, CD-8)."""

from __future__ import annotations

from tests.cards.conftest import READ_BACK, READ_THEN_CLEAR, clearers, clipboard, set_clipboard, wait_for
from tests.helpers import Cli, raw, raw_error

VALUE = "pg-Pa55word-7c1e"


def protected_note(cli: Cli) -> dict[str, str]:
    body = f"user app\npassword {VALUE}\nagain {VALUE}"
    card = raw(cli, {"op": "card_write", "type": "knowledge", "title": "DB", "body": body})
    result = cli.ok("secret", "protect", card["id"], "--label", "db_password", "--value-stdin", input=VALUE + "\n")
    assert result["replaced"] == 2
    return {"id": card["id"], "credential": result["credential"]}


def test_protect_secret_moves_the_value_into_a_credential(vault: Cli) -> None:
    """CD-7: exact matches become {{secret:LABEL}}; the map holds an opaque reference; history keeps both revisions."""
    note = protected_note(vault)
    shown = vault.ok("card", "show", note["id"])
    assert shown["body"] == "user app\npassword {{secret:db_password}}\nagain {{secret:db_password}}"
    assert shown["secrets"] == {"db_password": note["credential"]}
    history = vault.ok("history", note["id"])["revisions"]
    assert len(history) == 2
    # The first signed revision is not rewritten, yet no diff shows the value.
    diff = vault.ok("diff", note["id"], history[0]["revision"], history[1]["revision"])
    assert VALUE not in diff["diff"]
    assert VALUE not in str(raw(vault, {"op": "diff", "id": note["id"], "rev_a": history[0]["revision"]}))


def test_protect_secret_refuses_bad_input_and_changes_nothing(vault: Cli) -> None:
    """CD-7, API-8: absent value, bad label, reused label, protected card target."""
    note = protected_note(vault)
    head = raw(vault, {"op": "get", "id": note["id"]})["revision"]
    err = vault.err("secret", "protect", note["id"], "--label", "other", "--value-stdin", input="not-in-body\n")
    assert err["code"] == "invalid_input" and "not-in-body" not in err["message"]
    cases = [
        ({"label": "bad label!", "value": "user app"}, "invalid_input"),
        ({"label": "db_password", "value": "user app"}, "invalid_input"),
        ({"label": "x", "value": "abc"}, "invalid_input"),
    ]
    for fields, code in cases:
        assert raw_error(vault, {"op": "protect_secret", "id": note["id"], **fields}).code == code
    prot = raw(vault, {"op": "protected_card", "title": "P", "token": "tok-12345"})
    on_protected = {"op": "protect_secret", "id": prot["id"], "label": "y", "value": "tok-12345"}
    assert raw_error(vault, on_protected).code == "invalid_input"
    assert raw(vault, {"op": "get", "id": note["id"]})["revision"] == head


def test_generic_writes_keep_the_secret_map(vault: Cli) -> None:
    """CD-7: a generic edit keeps the map; card_write may restate it but never create or redirect entries."""
    note = protected_note(vault)
    other = raw(vault, {"op": "protected_card", "title": "P", "token": "tok-12345"})
    other_cred = raw(vault, {"op": "card_read", "id": other["id"]})["protected"]["credential"]
    vault.ok("edit", note["id"], "--body", "rewritten, still uses {{secret:db_password}}")
    assert vault.ok("card", "show", note["id"])["secrets"] == {"db_password": note["credential"]}
    same = {"op": "card_write", "id": note["id"], "title": "DB 2", "secrets": {"db_password": note["credential"]}}
    raw(vault, same)
    for secrets in ({}, {"db_password": other_cred}, {"db_password": note["credential"], "new": other_cred}):
        err = raw_error(vault, {"op": "card_write", "id": note["id"], "title": "DB 3", "secrets": secrets})
        assert err.code == "secret_map_mismatch"
    create = {"op": "card_write", "type": "brain", "title": "n", "secrets": {"a": other_cred}}
    assert raw_error(vault, create).code == "secret_map_mismatch"
    assert raw_error(vault, {"op": "put", "title": "n", "secrets": {}}).code == "unknown_field"
    assert raw(vault, {"op": "card_read", "id": note["id"]})["title"] == "DB 2"


def test_copy_needs_elevation_and_a_clipboard(vault: Cli) -> None:
    """CD-8: without sudo the engine refuses before any secret crosses IPC; no clipboard is a typed error."""
    protected_note(vault)
    assert raw_error(vault, {"op": "credential_copy", "ref": "db_password"}).code == "elevation_required"
    vault.sudo()
    vault.env.update({"DISPLAY": "", "WAYLAND_DISPLAY": "", "MEMORIES_CLIPBOARD": ""})
    proc = vault.run("copy", "db_password", "--json")
    assert proc.returncode == 1 and '"clipboard_unavailable"' in proc.stdout and VALUE not in proc.stdout


def test_copy_writes_the_clipboard_and_clears_it(vault: Cli, xdisplay: str) -> None:
    """CD-8: under Xvfb with xclip: copied only after the write, cleared after the timeout."""
    note = protected_note(vault)
    vault.env["DISPLAY"] = xdisplay
    vault.env["MEMORIES_CLIPBOARD"] = "xclip"
    assert vault.err("copy", "db_password")["code"] == "elevation_required"
    assert clipboard(xdisplay) == ""
    vault.sudo()
    result = vault.ok("copy", "db_password", "--clear-after", READ_THEN_CLEAR)
    assert result == {"copied": True}
    assert clipboard(xdisplay) == VALUE
    assert wait_for(lambda: clipboard(xdisplay) == "")
    # Qualified label, protected card (token) and the credential reference itself.
    prot = raw(vault, {"op": "protected_card", "title": "P", "token": "tok-copy-5678"})
    for ref, expected in ((f"{note['id'][:8]}:db_password", VALUE), (prot["id"], "tok-copy-5678"), (note["credential"], VALUE)):
        vault.ok("copy", ref, "--clear-after", READ_BACK)
        assert clipboard(xdisplay) == expected
    assert VALUE not in vault.run("copy", "db_password", "--clear-after", "1", "--json").stdout


def test_copy_timeout_from_config_and_a_newer_clipboard_is_left_alone(vault: Cli, xdisplay: str) -> None:
    """CD-8: `[clipboard] clear_seconds` sets the timeout; the clearer clears only the value it copied."""
    protected_note(vault)
    (vault.home / "config.toml").write_text("[clipboard]\nclear_seconds = 5\n")  # read back first, on a loaded machine too
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xsel"})
    vault.sudo()
    assert vault.ok("copy", "db_password") == {"copied": True}
    assert clipboard(xdisplay) == VALUE
    # Well under the 30 s default: only the configured 5 s clears it in time.
    assert wait_for(lambda: clipboard(xdisplay) == "", deadline_s=20)
    vault.ok("copy", "db_password")
    set_clipboard(xdisplay, "something the user copied")
    assert wait_for(lambda: not clearer_running(xdisplay))
    assert clipboard(xdisplay) == "something the user copied"


def clearer_running(display: str) -> bool:
    """Is a clipboard-clearing child for this test's X display still waiting?"""
    return bool(clearers(display))
