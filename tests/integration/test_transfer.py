"""import (Markdown, folders, JSONL: batched, idempotent) and elevated export."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import Cli


def _write_notes(root: Path, count: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        sub = root / f"d{i % 3}"
        sub.mkdir(exist_ok=True)
        (sub / f"note{i}.md").write_text(
            f"---\ntitle: Note {i}\ntags: [import, n{i % 2}]\nsource: folder\n---\nBody of note {i}\n", "utf-8"
        )


def test_markdown_folder_import_is_idempotent(vault: Cli, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    _write_notes(notes, 1200)  # more than one batch
    first = vault.ok("import", str(notes))
    assert first == {"created": 1200, "skipped": 0, "total": 1200, "warnings": []}
    again = vault.ok("import", str(notes))
    assert again == {"created": 0, "skipped": 1200, "total": 1200, "warnings": []}
    listed = vault.ok("list", "--tag", "n1", "--limit", "5000")
    assert listed["total"] == 600
    got = vault.ok("get", listed["items"][0]["id"])
    # DT-8: a folder's notes keep where they were (export --format markdown writes them back there).
    number = got["title"].removeprefix("Note ")
    assert got["meta"] == {"source": "folder", "path": f"d{int(number) % 3}/note{number}.md"}
    assert got["body"].startswith("Body of note")


def test_markdown_without_front_matter_uses_heading(vault: Cli, tmp_path: Path) -> None:
    path = tmp_path / "plain.md"
    path.write_text("# My heading\n\ntext\n", "utf-8")
    vault.ok("import", str(path))
    assert vault.ok("list")["items"][0]["title"] == "My heading"


def test_jsonl_unknown_key_names_the_line_and_creates_nothing(vault: Cli, tmp_path: Path) -> None:
    """API-8: bad input gets a typed error naming the line, and changes nothing."""
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"title": f"t{i}", "body": "b"}) for i in range(3)]
    lines.append(json.dumps({"title": "bad", "body": "b", "colour": "red"}))
    path.write_text("\n".join(lines) + "\n", "utf-8")
    error = vault.err("import", str(path))
    assert error["code"] == "invalid_input"
    assert "line 4" in error["message"] and "colour" in error["message"]
    assert vault.ok("list")["total"] == 0


def test_jsonl_wrong_types_rejected(vault: Cli, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    for bad in (
        '{"title": 1, "body": "b"}',
        '{"title": "t", "body": "b", "tags": "x"}',
        '{"title": "t", "body": "b", "meta": {"k": 1}}',
        "[1, 2]",
        "{not json",
    ):
        path.write_text(bad + "\n", "utf-8")
        assert vault.err("import", str(path))["code"] == "invalid_input", bad
    assert vault.ok("list")["total"] == 0


def test_export_round_trip(vault: Cli, tmp_path: Path) -> None:
    vault.put("Flat white", "Ana takes it without sugar", "coffee")
    vault.put("长期记忆", "中文正文\nline 2", "中文")
    vault.sudo()
    out_jsonl = tmp_path / "jsonl"
    out_md = tmp_path / "md"
    assert vault.ok("export", "--format", "jsonl", str(out_jsonl))["exported"] == 2
    assert vault.ok("export", "--format", "markdown", str(out_md))["exported"] == 2
    records = [json.loads(line) for line in (out_jsonl / "memories.jsonl").read_text("utf-8").splitlines()]
    assert {r["title"] for r in records} == {"Flat white", "长期记忆"}
    assert len(list(out_md.glob("*.md"))) == 2
    assert (out_jsonl / "memories.jsonl").stat().st_mode & 0o777 == 0o600
    # Exported files import back into the same vault as duplicates: nothing new.
    assert vault.ok("import", str(out_jsonl / "memories.jsonl"))["created"] == 0
    assert vault.ok("import", str(out_md))["created"] == 0
    # Export never overwrites.
    assert vault.err("export", "--format", "jsonl", str(out_jsonl))["code"] == "io_error"
