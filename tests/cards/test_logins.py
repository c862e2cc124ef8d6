"""Login cards and the password generator through the real CLI and daemon (CD-10, CD-11, CD-3, CD-8)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from engine.cards.otp import totp
from tests.cards.conftest import READ_BACK, READ_THEN_CLEAR, clipboard, state_rows, wait_for
from tests.helpers import PASSWORD, Cli, raw, raw_error
from tests.mcp.support import grant, stdio_client, text_of

PASSWORD_CANARY = "login-pw-CANARY-3e1f"
HIDDEN_CANARY = "login-hidden-CANARY-9a0c"
SEED = "JBSWY3DPEHPK3PXP"
URI = f"otpauth://totp/Mail:me?secret={SEED}&issuer=Mail"


def _new(vault: Cli, *extra: str, stdin: str | None = None) -> dict[str, Any]:
    return vault.ok(
        "login", "new", "--title", "邮箱", "--username", "me@example.cn",
        "--url", "https://mail.example.cn", "--url", "https://m.example.cn", *extra, input=stdin,
    )  # fmt: skip


def test_login_new_show_list_never_print_the_password(vault: Cli) -> None:
    """CD-10, CD-3: a login keeps username/URLs as metadata and the password only as a cred: reference."""
    made = _new(vault, "--password-stdin", "--totp-uri-stdin", "--notes", "中文备注", stdin=f"{PASSWORD_CANARY}\n{URI}\n")
    assert made["features"] == ["password", "totp"] and made["credential"].startswith("cred:")
    shown = vault.ok("login", "show", made["id"])
    assert shown["kind"] == "login"
    assert shown["meta"] == {"username": "me@example.cn", "urls": "https://mail.example.cn\nhttps://m.example.cn"}
    assert shown["protected"] == {"credential": made["credential"], "features": ["password", "totp"]}
    assert shown["body"] == "中文备注"
    text = vault.run("login", "show", made["id"]).stdout
    assert made["credential"] in text and "https://m.example.cn" in text
    listed = vault.ok("login", "list")
    assert [(i["title"], i["username"], i["urls"]) for i in listed["items"]] == [
        ("邮箱", "me@example.cn", ["https://mail.example.cn", "https://m.example.cn"])
    ]
    for args in (("get", made["id"]), ("card", "show", made["id"]), ("list",), ("search", "邮箱"), ("history", made["id"])):
        proc = vault.run(*args, "--json")
        assert proc.returncode in (0, 1), (args, proc.stderr)
        assert PASSWORD_CANARY not in proc.stdout + proc.stderr and SEED not in proc.stdout + proc.stderr, args


def test_login_new_bad_input_is_typed_and_changes_nothing(vault: Cli) -> None:
    """CD-10: a bad URL, a HOTP URI or an empty login is a typed error; nothing is written."""
    before = state_rows(vault)
    error = vault.err("login", "new", "--title", "x", "--username", "u", "--url", "javascript:alert(1)")
    assert error["code"] == "invalid_input" and "javascript" not in error["message"].replace("javascript:", "")
    hotp = f"otpauth://hotp/x?secret={SEED}&counter=1"
    assert vault.err("login", "new", "--title", "x", "--totp-uri-stdin", input=hotp + "\n")["code"] == "invalid_otpauth"
    assert raw_error(vault, {"op": "login_new", "title": "nothing"}).code == "invalid_input"
    leaked = raw_error(vault, {"op": "login_new", "title": "t", "password": PASSWORD_CANARY, "totp": "otpauth://totp/x?secret=1"})
    assert leaked.code == "invalid_otpauth" and PASSWORD_CANARY not in leaked.message
    assert state_rows(vault) == before


def test_generated_password_is_stored_not_printed(vault: Cli) -> None:
    """CD-11: --generate creates a password in the credential; the output never shows it."""
    proc = vault.run("login", "new", "--title", "gen", "--username", "bob", "--generate", "--length", "32", "--json")
    assert proc.returncode == 0, proc.stderr
    made = json.loads(proc.stdout)
    assert made["features"] == ["password"]
    raw(vault, {"op": "sudo", "password": PASSWORD})  # elevation belongs to this (the test's) process
    secret = raw(vault, {"op": "credential_copy", "ref": made["credential"]})["secret"]
    assert len(secret) == 32 and secret not in proc.stdout + proc.stderr


def test_copy_password_username_and_otp_through_the_clipboard(vault: Cli, xdisplay: str) -> None:
    """CD-10, CD-8: copy-* need elevation, write the real clipboard, and it clears itself."""
    made = _new(vault, "--password-stdin", "--totp-uri-stdin", stdin=f"{PASSWORD_CANARY}\n{URI}\n")
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    assert vault.err("login", "copy-password", made["id"])["code"] == "elevation_required"
    assert clipboard(xdisplay) == ""
    vault.sudo()
    proc = vault.run("login", "copy-password", made["id"], "--clear-after", READ_THEN_CLEAR, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["copied"] is True
    assert PASSWORD_CANARY not in proc.stdout + proc.stderr
    assert clipboard(xdisplay) == PASSWORD_CANARY
    assert wait_for(lambda: clipboard(xdisplay) == "")
    vault.ok("login", "copy-username", made["id"], "--clear-after", READ_BACK)
    assert clipboard(xdisplay) == "me@example.cn"
    vault.ok("login", "copy-otp", made["id"], "--clear-after", READ_BACK)
    code = clipboard(xdisplay)
    key = base64.b32decode(SEED)
    now = int(time.time())
    assert code in {totp(key, now + d) for d in (-30, 0, 30)}
    # The generic `copy` and `otp` commands reach a login's credential too.
    vault.ok("copy", made["id"], "--clear-after", READ_BACK)
    assert clipboard(xdisplay) == PASSWORD_CANARY
    bare = vault.ok("login", "new", "--title", "no secret", "--username", "u")
    assert vault.err("login", "copy-password", bare["id"])["code"] == "nothing_to_copy"
    assert vault.err("login", "copy-otp", bare["id"])["code"] == "nothing_to_copy"


def test_agents_see_logins_but_never_their_secrets(vault: Cli) -> None:
    """CD-3, CD-10, AG-2: through the official MCP client an agent reads username/URLs, never a password."""
    made = raw(
        vault,
        {
            "op": "login_new",
            "title": "Agent-visible login",
            "username": "agent-sees-me",
            "urls": ["https://visible.example"],
            "password": PASSWORD_CANARY,
            "totp": URI,
            "hidden": {"PIN": HIDDEN_CANARY},
        },
    )
    vault.sudo()
    token = grant(vault, "logins", "allow_all")
    transcripts: list[str] = []

    async def sweep() -> None:
        async with stdio_client(vault, token) as client:
            for name, arguments in (
                ("memory_list", {"limit": 50}),
                ("card_read", {"id": made["id"][:12]}),
                ("memory_read", {"id": made["id"][:12]}),
                ("history", {"id": made["id"][:12]}),
                ("search", {"query": "Agent-visible login"}),
            ):
                transcripts.append(text_of(await client.call_tool(name, arguments)))
            changed = await client.call_tool("card_write", {"id": made["id"][:12], "body": "agent edit"})
            assert changed.is_error

    asyncio.run(sweep())
    everything = "\n".join(transcripts)
    assert "agent-sees-me" in everything and "https://visible.example" in everything
    for canary in (PASSWORD_CANARY, HIDDEN_CANARY, SEED, token):
        assert canary not in everything, canary


def test_login_ops_are_closed_to_agents(vault: Cli) -> None:
    """CD-8: login_secret is for the local, elevated CLI only."""
    made = raw(vault, {"op": "login_new", "title": "t", "username": "u", "password": PASSWORD_CANARY})
    assert raw_error(vault, {"op": "login_secret", "id": made["id"], "what": "password"}).code == "elevation_required"


def test_init_warns_about_a_weak_password_but_does_not_refuse(cli: Cli) -> None:
    """CD-11: `init` with `abc` warns on stderr (zxcvbn score < 3) and still creates the vault."""
    proc = cli.run("init", "--password-stdin", input="abc\n")
    assert proc.returncode == 0, proc.stderr
    assert "weak" in proc.stderr
    assert cli.ok("status")["state"] == "unlocked"


def test_the_weak_password_warning_never_echoes_the_password(cli: Cli) -> None:
    """CD-11: the warning describes the password, it never repeats it."""
    proc = cli.run("init", "--password-stdin", input="letmein2024\n")
    assert proc.returncode == 0 and "weak" in proc.stderr and "letmein2024" not in proc.stderr


def test_init_with_a_strong_password_gives_no_warning(cli: Cli) -> None:
    """CD-11: a strong password is not warned about."""
    proc = cli.run("init", "--password-stdin", input="vapor-lantern-quarry-oboe-7!\n")
    assert proc.returncode == 0 and "weak" not in proc.stderr


def test_password_generate(cli: Cli) -> None:
    """CD-11: characters or words, symbols on or off, with a zxcvbn estimate."""
    chars = cli.ok("password", "generate", "--length", "40")
    assert chars["kind"] == "characters" and len(chars["password"]) == 40 and chars["strength"]["score"] == 4
    plain = cli.ok("password", "generate", "--length", "30", "--no-symbols")
    assert plain["password"].isalnum()
    words = cli.ok("password", "generate", "--words", "6", "--no-symbols")
    assert words["kind"] == "words" and len(words["password"].split("-")) == 6 and words["entropy_bits"] > 77
    assert cli.ok("password", "generate", "--length", "40")["password"] != chars["password"]
    assert cli.run("password", "generate", "--length", "4").returncode == 2
    assert cli.run("password", "generate", "--words", "2").returncode == 2
    text = cli.run("password", "generate")
    assert text.returncode == 0 and len(text.stdout.strip()) == 24 and "zxcvbn" in text.stderr


def test_login_list_finds_logins_by_words_in_title_username_urls_and_tags(vault: Cli) -> None:
    """CD-10: `login list WORDS` is how a password manager's list is searched: every word (any
    case, Chinese as text) in the title, username, a URL or a tag; never in the password, which
    the listing does not hold; --tag narrows to a tag. No match says what was asked."""
    vault.ok("login", "new", "--title", "Forge", "--username", "dev-ana", "--url", "https://git.example.org",
             "--tag", "work", "--password-stdin", input="forge-pw-CANARY\n")  # fmt: skip
    vault.ok("login", "new", "--title", "招商银行", "--username", "ana", "--url", "https://bank.example.cn",
             "--password-stdin", input="bank-pw-CANARY\n")  # fmt: skip
    vault.ok("login", "new", "--title", "Mail", "--username", "ana@example.org", "--tag", "Work", "--generate")

    def titles(*words: str) -> list[str]:
        return sorted(i["title"] for i in vault.ok("login", "list", *words)["items"])

    assert titles("forge") == ["Forge"]
    assert titles("GIT.EXAMPLE") == ["Forge"]  # a URL, in another case
    assert titles("银行") == ["招商银行"]
    assert titles("ana", "bank") == ["招商银行"]  # every word must match
    assert titles("example.org") == ["Forge", "Mail"]
    assert titles("--tag", "work") == ["Forge"]  # a tag is exact
    assert titles("work") == ["Forge", "Mail"]  # a word also matches tags, in any case
    assert titles("CANARY") == [] and titles("forge-pw") == []  # passwords are not searched
    empty = vault.run("login", "list", "nothing-here", "--tag", "work")
    assert empty.returncode == 0 and empty.stdout.strip() == "no logins match 'nothing-here' with tag 'work'"
