"""Canary leak sweep over every read path, the database, its journal and the logs (CD-3, CD-8, ST-1, API-8)."""

from __future__ import annotations

import asyncio
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


FIELD_CANARY = "CanaryField-7d1e42"


def test_protect_covers_every_field_and_no_read_path_shows_the_value(vault: Cli, tmp_path: Path) -> None:
    """CD-7, CD-12 (issue 27 item 4): `secret protect` replaces the value in the title, tags,
    metadata, annotations and body alike and reports each field; afterwards no read path (CLI
    get/search/list/history/diff/export, MCP, the dashboard's IPC reads, the search index)
    shows it, and neither the store nor the logs hold it in clear."""
    from tests.mcp.support import grant, ipc, stdio_client, text_of

    vault.sudo()
    note = vault.ok(
        "card",
        "new",
        "--type",
        "knowledge",
        "--title",
        f"VPN {FIELD_CANARY}",
        "--body",
        f"connect with {FIELD_CANARY} twice: {FIELD_CANARY}",
        "--tag",
        f"key-{FIELD_CANARY}",
        "--tag",
        "vpn",
    )
    memory = vault.put(f"Token {FIELD_CANARY}", "nothing secret in the body", f"t-{FIELD_CANARY}")
    token = grant(vault, "sweep-fields", "allow_all")
    with ipc(vault) as owner:
        owner.request({"op": "annotate", "id": memory["id"], "note": f"rotated {FIELD_CANARY} today"})
        owner.request(
            {"op": "card_write", "id": note["id"], "base": note["revision"], "meta": {"source": f"pasted {FIELD_CANARY}"}}
        )

    protected = vault.ok("secret", "protect", note["id"], "--label", "vpn", "--value-stdin", input=FIELD_CANARY + "\n")
    assert protected["fields"] == {"title": 1, "tags": 1, "meta.source": 1, "body": 2}
    assert protected["replaced"] == 5
    other = vault.ok("secret", "protect", memory["id"], "--label", "tok", "--value-stdin", input=FIELD_CANARY + "\n")
    assert other["fields"] == {"title": 1, "tags": 1, "annotations": 1} and other["replaced"] == 3
    human = vault.run("secret", "protect", memory["id"], "--label", "again", "--value-stdin", input="absent-value\n")
    assert human.returncode == 1 and "title, tags, metadata, annotations or body" in human.stderr

    shown = vault.ok("get", note["id"])
    assert "{{secret:vpn}}" in shown["title"] and "{{secret:vpn}}" in shown["meta"]["source"]

    outputs: list[tuple[object, str]] = []
    for args in [
        ("list",),
        ("search", "CanaryField"),  # a search echoes its query: only part of the value
        ("search", "VPN"),
        ("search", "Token"),
        ("graph",),
        ("export", "--format", "jsonl", str(tmp_path / "exports" / "jsonl")),
        *[(cmd, item["id"]) for item in (note, memory) for cmd in ("get", "history", "diff")],
        ("card", "show", note["id"]),
    ]:
        proc = vault.run(*args, "--json")
        assert proc.returncode in (0, 1), (args, proc.stderr)
        outputs.append((args, proc.stdout + proc.stderr))
    history = raw(vault, {"op": "history", "id": note["id"]})["revisions"]
    assert len(history) == 3 and all(FIELD_CANARY not in str(r) for r in history)
    for rev in history:  # the revisions written before the protection, read one by one
        outputs.append((rev["revision"], str(raw(vault, {"op": "get", "id": note["id"], "rev": rev["revision"]}))))
    # What the dashboard asks the engine for (its IPC reads), and the search index directly.
    for body in (
        {"op": "list", "limit": 50},
        {"op": "search", "query": "CanaryField"},
        {"op": "retrieve", "query": "VPN connect"},
        {"op": "diff", "id": memory["id"]},
    ):
        outputs.append((body["op"], str(raw(vault, body))))

    async def agent() -> None:
        async with stdio_client(vault, token) as client:
            for name, arguments in (
                ("search", {"query": "VPN"}),
                ("search", {"query": "CanaryField"}),
                ("memory_read", {"id": memory["id"]}),
                ("card_read", {"id": note["id"]}),
                ("history", {"id": note["id"]}),
                ("memory_list", {}),
                ("retrieve", {"query": "connect with"}),
            ):
                outputs.append((name, text_of(await client.call_tool(name, arguments))))

    asyncio.run(agent())
    # Deleted, the item's history (all revisions from before the protection) still masks it.
    vault.ok("delete", memory["id"])
    for args in (("history", memory["id"]), ("get", memory["id"])):
        proc = vault.run(*args, "--json")
        outputs.append((args, proc.stdout + proc.stderr))
    assert any("{{secret:vpn}}" in text for _, text in outputs)  # the sweep saw the items
    for where, text in outputs:
        assert FIELD_CANARY not in text, f"the protected value leaked through {where}"
    vault.stop()
    for path in (p for p in vault.home.rglob("*") if p.is_file()):
        assert FIELD_CANARY.encode() not in path.read_bytes(), f"found in {path.name}"
