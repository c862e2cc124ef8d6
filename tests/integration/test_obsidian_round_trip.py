"""An Obsidian / basic-memory folder through `memories import` and `export --format markdown` (DT-8).

The fixture (tests/data/obsidian-vault) is hand-made the way Obsidian and basic-memory
write notes: nested folders, front matter as a block list, an inline list with a quoted
comma and a `#tag`, a single-quoted value, a Chinese title, `[[Folder/Title]]`,
`[[Title#Heading|shown]]`, `[[Title|shown]]`, an embedded attachment, links inside code
that are not links, a link to a note that does not exist, and an `.obsidian` settings folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.helpers import Cli

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "obsidian-vault"
NOTES = {
    "Welcome.md",
    "Projects/Alpha.md",
    "Projects/Archive/Beta.md",
    "日记/长期记忆.md",
    "notes/coffee-brewing.md",
}
# Source title → target title, as the fixture's wikilinks say (code and attachments excluded).
LINKS = {
    ("Welcome", "Alpha"),
    ("Welcome", "长期记忆"),
    ("Welcome", "Beta"),
    ("Alpha", "Beta"),
    ("Beta", "Welcome"),
    ("长期记忆", "Welcome"),
    ("长期记忆", "Coffee Brewing"),
    ("Coffee Brewing", "Alpha"),
}


def _notes(cli: Cli) -> dict[str, dict[str, Any]]:
    """Every note by title, as `get` shows it."""
    listed = cli.ok("list", "--limit", "100")["items"]
    return {item["title"]: cli.ok("get", item["id"]) for item in listed}


def _wikilink_edges(cli: Cli) -> set[tuple[str, str]]:
    graph = cli.ok("graph")
    titles = {node["id"]: node["title"] for node in graph["nodes"]}
    return {(titles[e["src"]], titles[e["dst"]]) for e in graph["edges"] if e["rel"] == "wikilink"}


def _import(cli: Cli, folder: Path) -> dict[str, Any]:
    return cli.ok("import", str(folder))


def test_obsidian_folder_imports_with_paths_front_matter_and_links(vault: Cli) -> None:
    """DT-8: folders kept as paths, front matter as tags and metadata, wikilinks as graph links."""
    result = _import(vault, FIXTURE)
    assert result["created"] == 5 and result["total"] == 5
    assert result["wikilinks"] == {"linked": 8, "unresolved": 1}
    codes = {w["code"]: w["message"] for w in result["warnings"]}
    assert "[[Missing note]]" in codes["unresolved_wikilinks"]
    assert "diagram.png" in codes["attachments_not_imported"]

    notes = _notes(vault)
    assert set(notes) == {"Welcome", "Alpha", "Beta", "长期记忆", "Coffee Brewing"}
    # A top-level `Title.md` is where export writes that title anyway: no path is recorded for it.
    assert "path" not in notes["Welcome"]["meta"]
    assert {n["meta"]["path"] for t, n in notes.items() if t != "Welcome"} == NOTES - {"Welcome.md"}
    alpha = notes["Alpha"]
    assert alpha["tags"] == ["project", "work"]
    assert alpha["meta"] == {
        "path": "Projects/Alpha.md",
        "aliases": '["Project A", "A, the first"]',
        "created": "2024-03-01",
        "status": "active",
    }
    assert notes["Beta"]["tags"] == ["archive", "old"]
    assert notes["长期记忆"]["tags"] == ["中文"] and notes["长期记忆"]["meta"]["mood"] == "平静"
    assert notes["Coffee Brewing"]["meta"]["permalink"] == "notes/coffee-brewing"
    assert "[[Alpha#Goals|the goals]]" in notes["Welcome"]["body"]
    assert _wikilink_edges(vault) == LINKS

    listed = vault.ok("wikilinks")
    assert [row["names"] for row in listed["unresolved"]] == [["Missing note"]]
    assert listed["unresolved"][0]["title"] == "Welcome"
    assert listed["attachments"] == ["diagram.png"] and listed["linked"] == 0


def test_import_export_reimport_keeps_text_tags_and_links(vault: Cli, tmp_path: Path) -> None:
    """DT-8: import → export --format markdown → import again keeps text, tags and links."""
    _import(vault, FIXTURE)
    before = _notes(vault)
    vault.sudo()
    out = tmp_path / "exported"
    assert vault.ok("export", "--format", "markdown", str(out))["exported"] == 5
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written == NOTES  # the same relative paths
    alpha = (out / "Projects" / "Alpha.md").read_text("utf-8")
    assert 'aliases: ["Project A", "A, the first"]' in alpha and "[[Beta|the old plan]]" in alpha
    assert (out / "Welcome.md").stat().st_mode & 0o777 == 0o600

    # Into the same vault: every note is already there (title, body, tags and metadata equal).
    again = _import(vault, out)
    assert again["created"] == 0 and again["skipped"] == 5

    # Into a fresh vault: the same notes and the same links.
    fresh = Cli(home=tmp_path / "fresh-home")
    try:
        fresh.init()
        _import(fresh, out)
        after = _notes(fresh)
        assert set(after) == set(before)
        for title, note in before.items():
            assert (after[title]["body"], after[title]["tags"], after[title]["meta"]) == (
                note["body"],
                note["tags"],
                note["meta"],
            )
        assert _wikilink_edges(fresh) == LINKS
    finally:
        fresh.stop()


def test_notes_made_in_memories_export_by_title(vault: Cli, tmp_path: Path) -> None:
    """A note without a recorded path is written as `Title.md` (what `[[Title]]` names); a second
    note with the same title gets its short ID; a path that would leave the folder is not used."""
    vault.put("Plan: Q3/Q4", "see [[Other]]")
    vault.put("Other", "first")
    second = vault.put("Other", "second")
    vault.ok("put", "--title", "Escape", "--body", "x", "--meta", "path=../../outside.md")
    vault.sudo()
    out = tmp_path / "md"
    vault.ok("export", "--format", "markdown", str(out))
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert "Plan- Q3-Q4.md" in names and "Escape.md" in names
    assert sorted(n for n in names if n.startswith("Other")) == sorted(["Other.md", f"Other ({second['short_id']}).md"])
    assert not (tmp_path / "outside.md").exists()


def test_a_moved_fixture_copy_with_a_broken_front_matter_imports_nothing(vault: Cli, tmp_path: Path) -> None:
    """API-8: one malformed front matter (a YAML block scalar) names the file and imports nothing."""
    copy = tmp_path / "vault"
    shutil.copytree(FIXTURE, copy)
    (copy / "Projects" / "Broken.md").write_text("---\nsummary: |\n  two lines\n---\nbody\n", "utf-8")
    error = vault.err("import", str(copy))
    assert error["code"] == "invalid_input" and "Broken.md" in error["message"] and "line 2" in error["message"]
    assert vault.ok("list")["total"] == 0
