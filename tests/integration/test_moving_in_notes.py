"""Moving in keeps secure notes (IM-1, CD-7): Bitwarden type 2, 1Password "003" and notes-only
KeePass entries become protected notes through the real CLI and daemon.

A user's secure notes hold recovery codes and licence keys: the note's text is kept as the
card's protected secret (copied with `memories copy`, never a body, never indexed), the
title, folder/tags and text fields stay visible, hidden fields are protected like a login's.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from tests.cards.conftest import state_rows
from tests.helpers import PASSWORD, Cli, raw
from tests.mcp.support import grant, stdio_client, text_of

BW_NOTE = "bw-note-recovery-CANARY-5fd1 备用码 8812-1190"
BW_HIDDEN = "bw-note-hidden-CANARY-a07e"
OP_NOTE = "op-note-licence-CANARY-3c9b"
OP_CONCEALED = "op-note-concealed-CANARY-77d2"
KP_NOTE = "kp-note-private-CANARY-e41f"
CANARIES = (BW_NOTE, BW_HIDDEN, OP_NOTE, OP_CONCEALED, KP_NOTE)


def _bitwarden(tmp_path: Path, note: Any = BW_NOTE) -> Path:
    doc = {
        "encrypted": False,
        "folders": [{"id": "f1", "name": "恢复码"}],
        "items": [
            {"type": 1, "name": "邮箱", "login": {"username": "zhang", "password": "bw-login-pw"}},
            {
                "type": 2,
                "name": "GitHub 恢复码",
                "notes": note,
                "folderId": "f1",
                "secureNote": {"type": 0},
                "fields": [
                    {"name": "账号", "value": "zhang-gh", "type": 0},
                    {"name": "PIN", "value": BW_HIDDEN, "type": 1},
                ],
            },
            {"type": 3, "name": "信用卡", "card": {"number": "4111"}},
        ],
    }
    path = tmp_path / "bw.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), "utf-8")
    return path


def _onepux(tmp_path: Path) -> Path:
    note = {
        "categoryUuid": "003",
        "state": "active",
        "overview": {"title": "软件许可证", "tags": ["工作"]},
        "details": {
            "notesPlain": OP_NOTE,
            "sections": [
                {
                    "title": "许可",
                    "fields": [
                        {"title": "版本", "value": {"string": "Pro 2024"}},
                        {"title": "激活码", "value": {"concealed": OP_CONCEALED}},
                    ],
                }
            ],
        },
    }
    doc = {"accounts": [{"vaults": [{"attrs": {"name": "私人"}, "items": [note]}]}]}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("export.data", json.dumps(doc, ensure_ascii=False))
    path = tmp_path / "op.1pux"
    path.write_bytes(buffer.getvalue())
    return path


def _keepass_xml(tmp_path: Path) -> Path:
    xml = f"""<?xml version="1.0" encoding="utf-8" standalone="yes"?>
<KeePassFile><Meta></Meta><Root><Group><Name>Root</Name>
  <Group><Name>笔记</Name>
    <Entry><String><Key>Title</Key><Value>私人笔记</Value></String>
      <String><Key>Notes</Key><Value>{KP_NOTE}</Value></String>
      <String><Key>UserName</Key><Value></Value></String>
      <String><Key>Password</Key><Value Protected="True"></Value></String></Entry>
    <Entry><String><Key>Title</Key><Value>论坛</Value></String>
      <String><Key>UserName</Key><Value>li</Value></String>
      <String><Key>Notes</Key><Value>普通备注</Value></String></Entry>
  </Group>
</Group></Root></KeePassFile>"""
    path = tmp_path / "kp.xml"
    path.write_text(xml, "utf-8")
    return path


def _cards(vault: Cli) -> dict[str, dict[str, Any]]:
    return {item["title"]: item for item in vault.ok("login", "list")["items"]}


def _copied(vault: Cli, card_id: str) -> str:
    raw(vault, {"op": "sudo", "password": PASSWORD})
    return str(raw(vault, {"op": "credential_copy", "ref": card_id})["secret"])


def test_bitwarden_secure_note_becomes_a_protected_note(vault: Cli, tmp_path: Path) -> None:
    """IM-1, CD-7: a Bitwarden secure note is imported, not skipped: title, folder tag and text
    fields visible, its text and hidden fields protected; dry-run lists it; re-import adds nothing."""
    path = _bitwarden(tmp_path)
    dry = vault.run("import", "bitwarden", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "GitHub 恢复码  (protected note)" in dry.stdout
    assert "a card, not a login" in dry.stderr and "secure note" not in dry.stderr
    dry_json = vault.ok("import", "bitwarden", str(path), "--dry-run")
    assert dry_json["would_create"] == 2 and not any("GitHub" in s for s in dry_json["skipped"])
    assert _cards(vault) == {}
    done = vault.ok("import", "bitwarden", str(path))
    assert done["created"] == 2
    note = _cards(vault)["GitHub 恢复码"]
    assert note["tags"] == ["恢复码"] and note["features"] == ["fields", "note"]
    card = vault.ok("card", "show", note["id"])
    assert card["body"] == "" and card["meta"]["x_账号"] == "zhang-gh" and "x_PIN" not in card["meta"]
    assert _copied(vault, note["id"]) == BW_NOTE
    again = vault.ok("import", "bitwarden", str(path))
    assert (again["created"], again["already_present"]) == (0, 2)
    assert len(_cards(vault)) == 2


def test_1password_secure_note_and_keepass_notes_only_entry(vault: Cli, tmp_path: Path) -> None:
    """IM-1, CD-7: 1Password's Secure Note category (003) and a KeePass entry with only notes
    become protected notes; a KeePass login keeps its notes as its body."""
    done = vault.ok("import", "1password", str(_onepux(tmp_path)))
    assert done["created"] == 1 and done["skipped"] == []
    licence = _cards(vault)["软件许可证"]
    assert set(licence["tags"]) == {"私人", "工作"} and licence["features"] == ["fields", "note"]
    card = vault.ok("card", "show", licence["id"])
    assert card["meta"]["x_许可_版本"] == "Pro 2024" and card["body"] == ""
    assert _copied(vault, licence["id"]) == OP_NOTE
    kp = vault.ok("import", "keepassxc", str(_keepass_xml(tmp_path)))
    assert kp["created"] == 2
    cards = _cards(vault)
    assert cards["私人笔记"]["features"] == ["note"] and cards["私人笔记"]["tags"] == ["笔记"]
    assert _copied(vault, cards["私人笔记"]["id"]) == KP_NOTE
    assert vault.ok("card", "show", cards["论坛"]["id"])["body"] == "普通备注"
    assert vault.ok("import", "keepassxc", str(_keepass_xml(tmp_path)))["created"] == 0


def test_malformed_secure_note_names_the_item_and_imports_nothing(vault: Cli, tmp_path: Path) -> None:
    """IM-1: a secure note whose text is not text, or too long, is a typed error naming the item."""
    before = state_rows(vault)
    error = vault.err("import", "bitwarden", str(_bitwarden(tmp_path, note=["not", "text"])))
    assert error["code"] == "invalid_input" and error["message"].startswith("item 2"), error
    assert "Nothing was imported" in error["message"]
    error = vault.err("import", "bitwarden", str(_bitwarden(tmp_path, note="x" * (64 * 1024 + 1))))
    assert error["code"] == "invalid_input" and error["message"].startswith("item 2 ('GitHub 恢复码')"), error
    assert "secure note" in error["message"] and "xxxx" not in error["message"]
    assert state_rows(vault) == before


def test_secure_note_text_never_leaves_the_vault(vault: Cli, tmp_path: Path) -> None:
    """IM-1, CD-3, CD-7: the note texts never appear in dry-run output, list, search, card reads,
    MCP reads, logs or any file of the data home."""
    sources = [
        ("bitwarden", _bitwarden(tmp_path)),
        ("1password", _onepux(tmp_path)),
        ("keepassxc", _keepass_xml(tmp_path)),
    ]
    outputs: list[str] = []
    for source, path in sources:
        for extra in (("--dry-run",), ("--dry-run", "--json"), (), ()):
            proc = vault.run("import", source, str(path), *extra)
            assert proc.returncode == 0, proc.stderr
            outputs.append(proc.stdout + proc.stderr)
    cards = _cards(vault)
    notes = [cards[t]["id"] for t in ("GitHub 恢复码", "软件许可证", "私人笔记")]
    for args in [("list",), ("login", "list"), ("search", "CANARY"), ("search", "recovery"), ("search", "恢复码")]:
        outputs.append(vault.run(*args, "--json").stdout)
    for card_id in notes:
        for args in (("get", card_id), ("card", "show", card_id), ("login", "show", card_id), ("history", card_id)):
            proc = vault.run(*args, "--json")
            assert proc.returncode == 0, (args, proc.stderr)
            outputs.append(proc.stdout + proc.stderr)
    assert any("GitHub 恢复码" in text for text in outputs)  # the sweep reads the notes' cards
    vault.sudo()
    token = grant(vault, "notes", "allow_all")

    async def sweep() -> None:
        async with stdio_client(vault, token) as client:
            outputs.append(text_of(await client.call_tool("memory_list", {"limit": 50})))
            outputs.append(text_of(await client.call_tool("search", {"query": "CANARY"})))
            outputs.append(text_of(await client.call_tool("search", {"query": "恢复码"})))
            for card_id in notes:
                outputs.append(text_of(await client.call_tool("card_read", {"id": card_id[:12]})))
                outputs.append(text_of(await client.call_tool("memory_read", {"id": card_id[:12]})))

    asyncio.run(sweep())
    everything = "\n".join(outputs)
    for canary in CANARIES:
        assert canary not in everything, canary
    vault.stop()
    files = [p for p in vault.home.rglob("*") if p.is_file()]
    assert any(p.name.startswith("store.db") for p in files) and any(p.suffix == ".log" or "log" in p.parts for p in files)
    for path in files:
        data = path.read_bytes()
        for canary in CANARIES:
            assert canary.encode() not in data, f"{canary} found in {path.name}"
