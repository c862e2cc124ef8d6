"""`[[wikilinks]]` in a note's body are graph links (DT-8), kept in step with the text.

Through the real CLI and daemon: put, edit, rename, restore and `memories wikilinks`, read
back with `memories graph` and `memories card connections` (the graph the rest uses).
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.cli.transfer_commands import BATCH_ITEMS
from tests.helpers import Cli


def _targets(cli: Cli, note_id: str) -> set[str]:
    """Titles the note links to by wikilink, as `card connections` shows them."""
    found = cli.ok("card", "connections", note_id, "--direction", "out")
    titles = {n["id"]: n["title"] for n in found["neighbours"]}
    return {titles[e["dst"]] for e in found["edges"] if e["rel"] == "wikilink" and e["src"] == note_id}


def test_wikilinks_follow_the_text_through_edits(vault: Cli) -> None:
    """DT-8: a resolved [[Title]] adds a link, an unresolved one is reported, an edit that drops
    the name drops the link, and links made by hand (`card link`) are left alone."""
    alpha = vault.put("Alpha", "the first")
    vault.put("Beta", "the second")
    hub = vault.put("Hub", "see [[alpha#Intro|the first]], [[Beta]], ![[chart.png]] and [[Gamma]]")
    assert hub["wikilinks"] == {"linked": 2, "removed": 0, "unresolved": ["Gamma"], "attachments": ["chart.png"]}
    assert _targets(vault, hub["id"]) == {"Alpha", "Beta"}  # case-insensitive, heading and label dropped

    vault.ok("card", "link", hub["id"], alpha["id"], "--rel", "mentions")
    edited = vault.ok("edit", hub["id"], "--body", "only [[Beta]] now")
    assert edited["wikilinks"]["removed"] == 1
    assert _targets(vault, hub["id"]) == {"Beta"}
    kept = vault.ok("card", "connections", hub["id"], "--direction", "out")["edges"]
    assert {e["rel"] for e in kept if e["dst"] == alpha["id"]} == {"mentions"}

    # A note written before its target exists is linked by `memories wikilinks`.
    early = vault.put("Early", "waits for [[Later]]")
    assert early["wikilinks"]["unresolved"] == ["Later"]
    vault.put("Later", "here now")
    listed = vault.ok("wikilinks")
    assert listed["linked"] == 1 and listed["unresolved"] == []
    assert _targets(vault, early["id"]) == {"Later"}


def test_a_renamed_target_keeps_its_links(vault: Cli) -> None:
    """DT-8 (renames): the link follows the item by ID; the source's old name still counts."""
    target = vault.put("Old name", "target")
    source = vault.put("Source", "points at [[Old name]]")
    vault.ok("edit", target["id"], "--title", "New name")
    assert _targets(vault, source["id"]) == {"New name"}
    # The source's next write keeps the link: "Old name" was the target's title.
    again = vault.ok("edit", source["id"], "--body", "still points at [[Old name]], and more")
    assert "wikilinks" not in again or again["wikilinks"]["unresolved"] == []
    assert _targets(vault, source["id"]) == {"New name"}
    assert vault.ok("wikilinks")["unresolved"] == []
    # Naming the new title works the same; dropping every name drops the link.
    vault.ok("edit", source["id"], "--body", "now [[New name]]")
    assert _targets(vault, source["id"]) == {"New name"}
    vault.ok("edit", source["id"], "--body", "no links")
    assert _targets(vault, source["id"]) == set()


def test_restoring_an_old_revision_restores_its_links(vault: Cli) -> None:
    vault.put("Target", "t")
    note = vault.put("Note", "links [[Target]]")
    first = note["revision"]
    vault.ok("edit", note["id"], "--body", "no link")
    assert _targets(vault, note["id"]) == set()
    vault.ok("history", note["id"], "--restore", first)
    assert _targets(vault, note["id"]) == {"Target"}


def _wikilink_graph(cli: Cli) -> set[tuple[str, str]]:
    """Every wikilink as (source title, target title), from `memories graph`."""
    graph = cli.ok("graph")
    titles = {n["id"]: n["title"] for n in graph["nodes"]}
    return {(titles[e["src"]], titles[e["dst"]]) for e in graph["edges"] if e["rel"] == "wikilink"}


def test_an_import_in_batches_links_like_one_write_at_a_time(vault: Cli, tmp_path: Path) -> None:
    """DT-8 across import batches (issue 32: the title map is kept current, not rebuilt per batch):
    names of notes in the same batch, in an earlier batch, in a later batch and already in the
    vault all resolve; after a rename and a deletion the map answers as a fresh one would."""
    vault.put("Before", "in the vault before the import")
    count = BATCH_ITEMS + 120  # two batches
    notes = tmp_path / "notes.jsonl"
    with open(notes, "w", encoding="utf-8") as out:
        for i in range(count):
            links = [f"N{i - 1}"] if i else [f"N{count - 1}", "Before"]  # earlier / later batch, the vault
            body = "see " + " ".join(f"[[{name}]]" for name in links) + (" and [[Nowhere]]" if i == 7 else "")
            out.write(json.dumps({"title": f"N{i}", "body": body}) + "\n")
    result = vault.ok("import", str(notes))
    assert result["created"] == count
    assert result["wikilinks"]["unresolved"] == 1  # [[Nowhere]]
    expected = {(f"N{i}", f"N{i - 1}") for i in range(1, count)} | {("N0", f"N{count - 1}"), ("N0", "Before")}
    assert _wikilink_graph(vault) == expected

    ids = {n["title"]: n["id"] for n in vault.ok("graph")["nodes"]}
    vault.ok("edit", ids["N10"], "--title", "Renamed")
    vault.ok("delete", ids["N20"])
    renamed = vault.put("Points at the rename", "[[Renamed]] and [[n10]] and [[N20]] and [[N30]]")
    assert renamed["wikilinks"]["unresolved"] == ["N20", "n10"]  # old title and deleted note: no item
    assert _targets(vault, renamed["id"]) == {"Renamed", "N30"}


def test_the_end_of_an_import_links_as_reading_every_note_again(vault: Cli, tmp_path: Path) -> None:
    """DT-8, issue 32: at the end of an import, a note whose names still resolve as they did is
    not read again, yet the outcome is what reading it gives. A name that now resolves to a
    newer item of that title moves its link there; one that resolves to nothing stays reported;
    and `memories wikilinks` after a lock (nothing remembered) answers the same."""
    older = vault.put("Dup", "the older one")
    count = BATCH_ITEMS + 60  # two batches
    notes = tmp_path / "notes.jsonl"
    with open(notes, "w", encoding="utf-8") as out:
        for i in range(count):
            if i == 0:
                title, body = "A", "[[Dup]] and [[Later]]"  # Dup is the older one now; Later comes after
            elif i == 1:
                title, body = "B", "only [[Nowhere]] here"
            elif i == count - 2:
                title, body = "Later", "named before it came"
            elif i == count - 1:
                title, body = "Dup", "the newer one"
            else:
                title, body = f"N{i}", f"see [[N{i + 1}]]" if i % 5 and i + 1 < count - 2 else "plain"
            out.write(json.dumps({"title": title, "body": body}) + "\n")
    result = vault.ok("import", str(notes))
    assert result["created"] == count
    assert result["wikilinks"]["unresolved"] == 1  # [[Nowhere]]
    ids = {n["title"]: n["id"] for n in vault.ok("list", "--all")["items"] if n["title"] != "Dup"}
    links = vault.ok("card", "connections", ids["A"], "--direction", "out")
    wikilinked = {e["dst"] for e in links["edges"] if e["rel"] == "wikilink"}
    assert older["id"] not in wikilinked  # the newest "Dup" wins (SPEC DT-8), as for a fresh write
    assert _targets(vault, ids["A"]) == {"Dup", "Later"}

    def listed() -> list[tuple[str, list[str]]]:
        return [(row["title"], row["names"]) for row in vault.ok("wikilinks")["unresolved"]]

    assert listed() == [("B", ["Nowhere"])]
    before = _wikilink_graph(vault)
    vault.lock()
    vault.unlock()
    assert listed() == [("B", ["Nowhere"])]
    assert _wikilink_graph(vault) == before
    # A note changed since it was linked is read again: its new names count.
    vault.ok("edit", ids["B"], "--body", "now [[A]] and [[Elsewhere]]")
    assert listed() == [("B", ["Elsewhere"])]
    assert _targets(vault, ids["B"]) == {"A"}
