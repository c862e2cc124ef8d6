"""Canary leak sweep over every read path, the database, its journal and the logs (CD-3, CD-8, ST-1, API-8)."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.helpers import Cli, raw

TOKEN = "CanaryTok3n-91ab27"
MAPPED = "CanaryMapped-5e6f70"
OTP_KEY = b"CanaryOtpKey-fedcba98"  # 21 bytes
OTP_B32 = base64.b32encode(OTP_KEY).decode().rstrip("=")
HOTP_KEY = b"CanaryHotpKey-1234567"
HOTP_B32 = base64.b32encode(HOTP_KEY).decode().rstrip("=")
TITLE = "CanaryTitle-c0ffee"
SECRETS = [TOKEN, MAPPED, OTP_B32, HOTP_B32]
# In the store and logs nothing of these may appear in plaintext, titles included (ST-1).
STORED = [*SECRETS, TITLE, OTP_KEY.decode(), HOTP_KEY.decode()]


def test_no_secret_reaches_any_output_or_plaintext_on_disk(vault: Cli, tmp_path: Path) -> None:
    """CD-3, CD-8, ST-1: canaries in protected cards and secret maps never show in --json output or on disk."""
    totp = vault.ok(
        "protected",
        "new",
        "--title",
        TITLE,
        "--account",
        "ana@example.com",
        "--otp-stdin",
        input=f"otpauth://totp/GH:ana?secret={OTP_B32}&issuer=GH\n",
    )
    hotp = vault.ok(
        "protected", "new", "--title", "Bank", "--otp-stdin", input=f"otpauth://hotp/Bank:me?secret={HOTP_B32}&counter=3\n"
    )
    token = vault.ok("protected", "new", "--title", "Deploy", "--env", "DEPLOY_TOKEN", "--token-stdin", input=TOKEN + "\n")
    note = vault.ok("card", "new", "--type", "knowledge", "--title", "Notes", "--body", f"login with {MAPPED} please")
    vault.ok("secret", "protect", note["id"], "--label", "db", "--value-stdin", input=MAPPED + "\n")
    other = vault.ok("card", "new", "--type", "brain", "--title", "Other", "--meta", "category=rule")
    vault.ok("card", "link", note["id"], totp["id"], "--rel", "uses")
    vault.ok("card", "link", other["id"], token["id"])
    vault.ok("otp", hotp["id"])
    creds = [raw(vault, {"op": "card_read", "id": c["id"]})["protected"]["credential"][5:] for c in (totp, hotp, token)]
    creds.append(raw(vault, {"op": "card_read", "id": note["id"]})["secrets"]["db"][5:])
    vault.sudo()
    commands: list[tuple[str, ...]] = [
        ("status",),
        ("list",),
        ("list", "--tag", "x"),
        ("graph",),
        ("graph", note["id"], "--depth", "3"),
        ("card", "connections", note["id"], "--depth", "2"),
        ("card", "recall", note["id"], other["id"]),
        ("search", "Canary"),
        ("search", "login"),
        ("credential", "list"),
        ("export", "--format", "jsonl", str(tmp_path / "exports" / "jsonl")),
        ("export", "--format", "markdown", str(tmp_path / "exports" / "md")),
    ]
    for card in (totp, hotp, token, note, other):
        commands += [("get", card["id"]), ("card", "show", card["id"]), ("history", card["id"]), ("diff", card["id"])]
    history = raw(vault, {"op": "history", "id": note["id"]})["revisions"]
    commands.append(("diff", note["id"], history[0]["revision"], history[-1]["revision"]))
    for cred in creds:
        commands += [("history", cred), ("diff", cred), ("get", cred), ("credential", "show", cred)]
    outputs = []
    for args in commands:
        proc = vault.run(*args, "--json")
        assert proc.returncode in (0, 1), (args, proc.stderr)  # 2 would be a usage error: a typo in this test
        outputs.append((args, proc.stdout + proc.stderr))
    for args, text in outputs:
        for canary in SECRETS:
            assert canary not in text, f"{canary} leaked through {args}"
    exported = "".join(p.read_text("utf-8") for p in (tmp_path / "exports").rglob("*") if p.is_file())
    assert "{{secret:db}}" in exported
    for canary in SECRETS:
        assert canary not in exported
    vault.stop()
    files = [p for p in vault.home.rglob("*") if p.is_file()]
    assert any(p.name.startswith("store.db") for p in files) and any("log" in str(p) for p in files)
    for path in files:
        data = path.read_bytes()
        for canary in STORED:
            assert canary.encode() not in data, f"{canary} found in {path.name}"
