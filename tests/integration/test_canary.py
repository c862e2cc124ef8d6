"""ST-1: no title, body, tag or meta value ever reaches the database, its journal/WAL or logs."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from tests.helpers import Cli


def _files_to_scan(home: Path) -> list[Path]:
    found = [p for p in home.rglob("*") if p.is_file()]
    names = {p.name for p in found}
    assert "store.db" in names
    assert any(p.suffix == ".log" for p in found), "the engine log must exist to be scanned"
    return found


def test_canaries_never_on_disk(vault: Cli, tmp_path: Path) -> None:
    """ST-1: canaries through every write path; after lock + stop, no canary bytes anywhere."""
    canaries = {
        name: f"CANARY{name.upper()}{secrets.token_hex(8)}"
        for name in ("title", "body", "tag", "meta", "edit", "mdtitle", "mdbody", "mdtag", "jsonl", "resolve", "cjk")
    }
    canaries["cjk"] = "金丝雀" + canaries["cjk"]
    put = vault.ok(
        "put",
        "--title",
        canaries["title"],
        "--body",
        canaries["body"],
        "--tag",
        canaries["tag"],
        "--meta",
        f"source={canaries['meta']}",
    )
    vault.ok("edit", put["id"], "--body", canaries["edit"])
    stale = vault.ok("edit", put["id"], "--body", "fork " + canaries["cjk"], "--base", put["revision"])
    assert stale["conflict"]
    vault.ok("edit", put["id"], "--resolve", "--body", canaries["resolve"])
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text(
        f"---\ntitle: {canaries['mdtitle']}\ntags: [{canaries['mdtag']}]\n---\n{canaries['mdbody']}\n", "utf-8"
    )
    vault.ok("import", str(notes))
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(json.dumps({"title": "j", "body": canaries["jsonl"]}) + "\n", "utf-8")
    vault.ok("import", str(jsonl))
    doomed = vault.put("to delete", "x " + canaries["body"])
    vault.ok("delete", doomed["id"])
    # Reads (they commit intents) and a failed password attempt also must not leak.
    vault.ok("get", put["id"])
    vault.ok("diff", put["id"])
    vault.ok("history", put["id"])
    vault.run("unlock", "--password-stdin", input=canaries["title"] + "\n")
    vault.ok("lock")
    vault.stop()

    for path in _files_to_scan(vault.home):
        data = path.read_bytes()
        for name, canary in canaries.items():
            assert canary.encode() not in data, f"{name} canary found in {path.name}"
            assert canary.encode("utf-16-le") not in data
