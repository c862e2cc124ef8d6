"""IM-2: every field that went in can be read back by name through the real CLI and daemon.

A KeePass XML export (hand-written to KeePass 2's published XML shape) carries a protected
PIN, a second TOTP and a protected attribute whose name holds a colon; each is listed by
`login show`, reached by `copy ID:NAME` (real clipboard under Xvfb) and by `run --env`
(``card:ID#NAME`` and ``ID:NAME``). `get` prints a login's URLs one per line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.cards.conftest import READ_BACK, clipboard, xdisplay

__all__ = ["xdisplay"]  # the fixture, used by name
from tests.helpers import Cli

PIN = "readback-pin-4729"
SECOND = "otpauth://totp/Second?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
ANSWER = "readback-answer-55"
PASSWORD = "readback-password-81"
VISIBLE = "visible-value"


def _xml() -> bytes:
    def s(key: str, value: str, protected: bool = False) -> str:
        attr = ' Protected="True"' if protected else ""
        return f"<String><Key>{key}</Key><Value{attr}>{value}</Value></String>"

    entry = "".join(
        [
            s("Title", "Bank"),
            s("UserName", "zhang"),
            s("Password", PASSWORD, True),
            s("URL", "https://bank.example"),
            s("KP2A_URL_1", "https://m.bank.example"),
            s("otp", "otpauth://totp/Bank?secret=JBSWY3DPEHPK3PXP", True),
            s("PIN", PIN, True),
            s("Backup TOTP", SECOND, True),
            s("Security: answer", ANSWER, True),
            s("Branch", VISIBLE),
        ]
    )
    return (
        '<?xml version="1.0" encoding="utf-8" standalone="yes"?><KeePassFile><Meta><Generator>KeePassXC</Generator>'
        f"</Meta><Root><Group><UUID>AAAAAAAAAAAAAAAAAAAAAA==</UUID><Name>Root</Name><Entry>{entry}</Entry></Group>"
        "</Root></KeePassFile>"
    ).encode()


def _imported(vault: Cli, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "bank.xml"
    path.write_bytes(_xml())
    assert vault.ok("import", "keepassxc", str(path))["created"] == 1
    return dict(vault.ok("login", "list")["items"][0])


def _py_env(name: str) -> list[str]:
    return ["--", sys.executable, "-c", f"import os; print(os.environ[{name!r}])"]


def test_im2_every_protected_field_is_listed_copied_and_run(vault: Cli, tmp_path: Path, xdisplay: str) -> None:
    """IM-2: `login show` lists each protected field by name; `copy ID:NAME` and `run --env` read each value."""
    login = _imported(vault, tmp_path)
    short = vault.ok("login", "show", login["id"])["short_id"]
    shown = vault.run("login", "show", login["id"])
    assert shown.returncode == 0
    assert "protected fields: Backup TOTP, PIN, Security: answer" in shown.stdout
    for value in (PIN, ANSWER, PASSWORD):
        assert value not in shown.stdout
    vault.env.update({"DISPLAY": xdisplay, "MEMORIES_CLIPBOARD": "xclip"})
    vault.sudo()
    expected = {"PIN": PIN, "Backup TOTP": SECOND, "Security: answer": ANSWER, "pin": PIN}
    for name, value in expected.items():
        assert vault.ok("copy", f"{short}:{name}", "--clear-after", READ_BACK) == {"copied": True}
        assert clipboard(xdisplay) == value, name
    missing = vault.err("copy", f"{short}:nope")
    assert missing["code"] == "not_found" and "'PIN'" in missing["message"] and PIN not in missing["message"]
    # run: card:ID#NAME and ID:NAME both reach the field.
    proc = vault.run("run", "--no-masking", "--env", f"P=card:{login['id']}#PIN", *_py_env("P"))
    assert proc.returncode == 0 and proc.stdout == PIN + "\n", proc.stderr
    proc = vault.run("run", "--no-masking", "--env", f"A={short}:Security: answer", *_py_env("A"))
    assert proc.returncode == 0 and proc.stdout == ANSWER + "\n", proc.stderr
    # The password and the visible field come back too: nothing that went in is lost.
    assert vault.ok("copy", short, "--clear-after", READ_BACK) == {"copied": True}
    assert clipboard(xdisplay) == PASSWORD
    assert vault.ok("login", "show", login["id"])["meta"]["x_branch"] == VISIBLE


def test_im2_credential_show_takes_the_logins_credential_reference(vault: Cli, tmp_path: Path) -> None:
    """IM-2: `credential show cred:XXXX` (as `login list` shows it) and the login's own ID both answer."""
    login = _imported(vault, tmp_path)
    by_ref = vault.ok("credential", "show", login["credential"])
    by_login = vault.ok("credential", "show", login["id"])
    assert by_ref == by_login and by_ref["public"]["fields"] == ["Backup TOTP", "PIN", "Security: answer"]
    assert PIN not in str(by_ref)


def test_im2_get_prints_urls_one_per_line(vault: Cli, tmp_path: Path) -> None:
    """IM-2: `get` on a login shows each URL on its own line, never a literal backslash-n."""
    login = _imported(vault, tmp_path)
    proc = vault.run("get", login["id"])
    assert proc.returncode == 0
    assert "urls: https://bank.example\nurls: https://m.bank.example\n" in proc.stdout
    assert "\\n" not in proc.stdout
