"""`list --sort title` and `list --tag` through the real CLI and daemon (issue 32: the title order
and tag sets are held compactly, engine/vault/title_order.py): the same answers as sorting what
the rows show, for ties, unicode titles, items edited, added and deleted after the order was
built, and after a lock (which drops the order) and an unlock (which builds it again)."""

from __future__ import annotations

from typing import Any

from tests.helpers import Cli

TITLES = {
    "alpha-lower": ("alpha", ["work"]),
    "alpha-upper": ("ALPHA", ["work", "家"]),
    "alpha-mixed": ("Alpha", []),
    "strasse-sharp": ("Straße", ["家"]),  # case-folds to "strasse": a tie with the next
    "strasse-plain": ("STRASSE", ["work"]),
    "eclair": ("Éclair", ["work"]),
    "chinese": ("中文笔记", ["家", "work"]),
    "zeta": ("zeta", ["work", "work"]),  # a repeated tag counts once
    "digits": ("0 first", []),
}


def _rows(vault: Cli, *args: str) -> list[dict[str, Any]]:
    result = vault.ok("list", "--all", *args)
    assert result["total"] == len(result["items"])
    return list(result["items"])


def _expected(rows: list[dict[str, Any]], tag: str | None = None) -> list[str]:
    """What a title sort must answer: the rows by case-folded title, ties by ID."""
    chosen = [r for r in rows if tag is None or tag in r["tags"]]
    return [r["id"] for r in sorted(chosen, key=lambda r: (r["title"].casefold(), r["id"]))]


def _check(vault: Cli) -> list[dict[str, Any]]:
    everything = _rows(vault)  # by change time: not the title order
    assert [r["id"] for r in _rows(vault, "--sort", "title")] == _expected(everything)
    for tag in ("work", "家"):
        assert [r["id"] for r in _rows(vault, "--tag", tag, "--sort", "title")] == _expected(everything, tag)
        by_time = [r["id"] for r in _rows(vault, "--tag", tag)]
        assert by_time == [r["id"] for r in everything if tag in r["tags"]]
    assert _rows(vault, "--tag", "no-such-tag") == []
    return everything


def test_title_sort_and_tags_follow_edits_deletes_and_a_lock(vault: Cli) -> None:
    ids = {}
    for name, (title, tags) in TITLES.items():
        ids[name] = vault.put(title, f"body of {name}", *tags)["id"]
    first = _check(vault)  # builds the order and the tag sets
    assert len(first) == len(TITLES)
    titles = [r["title"] for r in _rows(vault, "--sort", "title")]
    assert titles[0] == "0 first" and titles[-1] == "中文笔记"
    assert {t.casefold() for t in titles[1:4]} == {"alpha"}

    # After the order was built: a title moves, tags change, an item goes, another comes.
    vault.ok("edit", ids["zeta"], "--title", "aardvark")
    vault.ok("edit", ids["eclair"], "--remove-tag", "work", "--add-tag", "家")
    vault.ok("edit", ids["alpha-mixed"], "--title", "alpha")  # still a tie, now with equal titles
    vault.ok("delete", ids["strasse-sharp"])
    vault.put("straße", "added later", "work")
    rows = _check(vault)
    by_id = {r["id"]: r for r in rows}
    assert ids["strasse-sharp"] not in by_id
    assert [r["title"] for r in _rows(vault, "--sort", "title")][1] == "aardvark"
    assert by_id[ids["eclair"]]["tags"] == ["家"]
    assert ids["eclair"] not in [r["id"] for r in _rows(vault, "--tag", "work")]

    # Paging through the title order gives its ranks in turn.
    whole = [r["id"] for r in _rows(vault, "--sort", "title")]
    pages = [vault.ok("list", "--sort", "title", "--offset", str(at), "--limit", "3")["items"] for at in range(0, len(whole), 3)]
    assert [r["id"] for page in pages for r in page] == whole

    # A lock drops the order (the engine re-executes); the unlock's first title sort builds it
    # again from the store, and answers as the order kept current did.
    vault.lock()
    assert vault.run("list", "--sort", "title", "--json").returncode != 0
    vault.unlock()
    assert _check(vault) == rows
    assert [r["id"] for r in _rows(vault, "--sort", "title")] == whole
