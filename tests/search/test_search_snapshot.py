"""The sealed snapshot of the built search index (issue 32, SR-6, ST-2, ST-10, ST-12).

Once the index of the default vault has moved SNAPSHOT_MIN_CHANGES assets from its last
snapshot, the engine seals an image of it into the store, named by a chained state record;
the next unlock loads it and indexes only what changed since. These tests run the real daemon
on a real store: answers are the same with and without the snapshot (after edits and deletes
made since it was saved), an unlock with a fresh snapshot segments nothing (counted by the
engine, not timed), a snapshot whose bytes were changed on disk is refused and the index
rebuilt, and nothing of it is in clear in the store file.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from engine.service.search_runtime import SNAPSHOT_MIN_CHANGES
from tests.search.conftest import Engine

WORDS = ["harbor", "lantern", "meadow", "copper", "violet", "granite", "saffron", "tundra", "orchid", "quartz"]
CJK = ["长期记忆", "护照", "马拉松", "京都", "咖啡", "灯塔"]
QUERIES = ["harbor", "lantern meadow", "copper", "quartz violet", "长期记忆", "护照", "灯塔 harbor", "saff", "note"]


def _items(count: int, start: int = 0) -> list[dict[str, Any]]:
    items = []
    for i in range(start, start + count):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7))
        items.append(
            {
                "title": f"Note {i}",
                "body": f"{words} {CJK[i % len(CJK)]} 第{i}条笔记 marker{i:05d} and more words about {WORDS[i % 4]}",
                "tags": ["snap", WORDS[i % 3]],
            }
        )
    return items


def _import(engine: Engine, items: list[dict[str, Any]]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(items), 500):
        ids += engine("import_batch", items=items[start : start + 500])["ids"]
    return ids


def _answers(engine: Engine) -> dict[str, dict[str, float]]:
    """Every match of each query (fewer than the limit) by item ID, with its score."""
    out: dict[str, dict[str, float]] = {}
    for query in QUERIES:
        result = engine("search", query=query, mode="lexical", limit=500, wait_ms=120_000)
        assert result["partial"] is False
        assert result["total"] < 500, "a query must match fewer items than the limit to compare all of them"
        out[query] = {r["id"]: round(float(r["score"]), 9) for r in result["results"]}
    return out


def _wait_saved(engine: Engine, saved: int) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        status = engine("rag_status")
        if status["snapshot"]["saved"] >= saved:
            return status
        assert time.monotonic() < deadline, f"no search snapshot saved within 120 s: {status}"
        time.sleep(0.1)


def _base(engine: Engine, item: str) -> str:
    return str(engine("get", id=item)["revision"])


def _relock(engine: Engine) -> dict[str, Any]:
    """Lock (the engine re-executes, ST-12), unlock, wait for the index; the new image's status."""
    engine.cli.ok("lock")
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    return engine.wait_ready()


def test_answers_are_the_same_with_and_without_the_snapshot(engine: Engine) -> None:
    """Issue 32, SR-6: the index loaded from the snapshot, brought up to date with the edits,
    deletes and new notes made after it was saved, answers every query exactly as the index it
    was saved from did with those changes, and as an index rebuilt from the revisions does."""
    count = SNAPSHOT_MIN_CHANGES + 100
    ids = _import(engine, _items(count))
    engine.wait_ready()
    _wait_saved(engine, 1)
    # After the snapshot: an edit, a delete, a note made private and new notes (fewer than
    # SNAPSHOT_MIN_CHANGES, so no new snapshot covers them).
    engine("edit", id=ids[0], base=_base(engine, ids[0]), body="rewritten: quartz quartz harbor 护照 rewritten-marker")
    engine("delete", id=ids[1])
    engine("edit", id=ids[2], base=_base(engine, ids[2]), meta={"private": "true"})
    for item in _items(3, start=count):
        engine("put", **item)
    before = _answers(engine)  # this intent commit also carries the edits' token streams

    status = _relock(engine)
    assert status["snapshot"]["from_snapshot"] == count  # the snapshot as saved, then the changes
    assert status["build"]["documents_segmented"] == 0  # the changes' token streams were stored
    with_snapshot = _answers(engine)
    assert with_snapshot == before
    assert "rewritten-marker" not in str(with_snapshot)
    found = engine("search", query="rewritten", mode="lexical", wait_ms=120_000)["results"]
    assert [r["id"] for r in found] == [ids[0]]
    assert engine("search", query="marker00001", mode="lexical", wait_ms=120_000)["results"] == []  # deleted
    assert engine("search", query="marker00002", mode="lexical", wait_ms=120_000)["results"] == []  # private

    engine("rag_index", rebuild=True, vectors=False, wait_ms=120_000)  # from the revisions, no snapshot
    assert engine.wait_ready()["index"]["complete"] is True
    rebuilt = _answers(engine)
    # A rebuild numbers the rows in another order (newest first), so equal BM25 scores come back
    # in another order and the reranker's share of the score, which looks at the retrieval rank,
    # moves by a few 1e-4: the same items, scores equal to that.
    for query in QUERIES:
        assert set(rebuilt[query]) == set(before[query]), query
        assert all(abs(rebuilt[query][item] - score) < 1e-3 for item, score in before[query].items()), query


def test_an_unlock_with_a_fresh_snapshot_segments_nothing(engine: Engine) -> None:
    """Issue 32, SR-6: a 3,000-note vault whose snapshot is current is searchable after an
    unlock without segmenting a document or opening a stored token stream."""
    count = 3000
    _import(engine, _items(count))
    engine.wait_ready()
    saved = _wait_saved(engine, 1)
    assert saved["snapshot"]["bytes"] > 0

    status = _relock(engine)
    assert status["snapshot"]["from_snapshot"] == count
    assert status["snapshot"]["refused"] == 0
    assert status["build"]["documents_segmented"] == 0
    assert status["build"]["token_rows_opened"] == 0
    assert status["index"]["assets"] == count
    assert engine.search_titles("marker02999") == ["Note 2999"]
    assert engine.search_titles("marker00000") == ["Note 0"]


def test_a_tampered_snapshot_is_refused_and_the_index_rebuilt(engine: Engine) -> None:
    """Issue 32, ST-1: snapshot bytes changed on disk do not match the chained record that names
    them: the unlock refuses them, rebuilds the index from the revisions and their token streams,
    and saves a new snapshot, which the next unlock loads."""
    count = SNAPSHOT_MIN_CHANGES + 50
    _import(engine, _items(count))
    engine.wait_ready()
    _wait_saved(engine, 1)
    engine.cli.ok("lock")
    store = Path(engine.cli.home) / "store.db"
    conn = sqlite3.connect(store, isolation_level=None)
    try:
        seq, blob = conn.execute("SELECT seq, blob FROM snapshot ORDER BY seq LIMIT 1").fetchone()
        changed = bytearray(blob)
        changed[len(changed) // 2] ^= 0x01
        conn.execute("UPDATE snapshot SET blob = ? WHERE seq = ?", (bytes(changed), seq))
    finally:
        conn.close()
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    status = engine.wait_ready()
    assert status["snapshot"]["refused"] == 1
    assert status["snapshot"]["from_snapshot"] == 0
    assert status["index"]["assets"] == count
    assert status["build"]["documents_segmented"] == 0  # rebuilt from the stored token streams
    assert engine.search_titles(f"marker{count - 1:05d}") == [f"Note {count - 1}"]
    _wait_saved(engine, 1)  # the rebuilt index is sealed again

    again = _relock(engine)
    assert again["snapshot"]["refused"] == 0
    assert again["snapshot"]["from_snapshot"] == count


def test_the_snapshot_is_sealed_on_disk(engine: Engine) -> None:
    """ST-1, ST-2: the snapshot's rows hold no indexed word, title or tag in clear (nor does
    anything else in the store's files)."""
    items = _items(SNAPSHOT_MIN_CHANGES + 10)
    items[5]["body"] += " snapcanaryzq 独角兽密语"
    _import(engine, items)
    engine.wait_ready()
    _wait_saved(engine, 1)
    home = Path(engine.cli.home)
    conn = sqlite3.connect(home / "store.db")
    try:
        rows = conn.execute("SELECT blob FROM snapshot").fetchall()
    finally:
        conn.close()
    assert rows
    for needle in ("snapcanaryzq", "独角兽密语", "Note 5", "harbor"):
        encoded = needle.encode()
        assert not any(encoded in bytes(blob) for (blob,) in rows)
        for path in home.rglob("store.db*"):
            assert encoded not in path.read_bytes(), path.name


def test_a_lock_drops_the_loaded_snapshot_st12(engine: Engine) -> None:
    """ST-10, ST-12: an index loaded from the snapshot holds indexed text in the engine's memory
    (found there while unlocked), and after `lock` no process of this data home holds it."""
    from tests.helpers import require
    from tests.integration.test_lock_clears_memory import _can_read_memory, _processes_of, _scan

    pid = engine("daemon_info")["pid"]
    require(_can_read_memory(pid), "reading another process's memory needs root (CAP_SYS_PTRACE)")
    canary = "snapshotlockcanary" + "q" * 8
    items = _items(SNAPSHOT_MIN_CHANGES + 10)
    items[7]["body"] += f" {canary}"
    _import(engine, items)
    engine.wait_ready()
    _wait_saved(engine, 1)
    status = _relock(engine)  # a new image, which loads the snapshot at this unlock
    assert status["snapshot"]["from_snapshot"] == len(items)
    # Before any query names it: only the loaded index (chunk texts, FTS5 image) can hold it.
    pids = _processes_of(Path(engine.cli.home))
    assert _scan(pids, {"canary": canary}), "the scan must find the loaded index's text while unlocked"
    assert engine.search_titles(canary) == ["Note 7"]
    engine.cli.ok("lock")
    # The lock answers before the engine re-executes: the kept connection is served by the new
    # image only (as tests/integration/test_lock_clears_memory.py waits for it).
    assert engine("daemon_info")["locked"] is True
    assert _scan(_processes_of(Path(engine.cli.home)), {"canary": canary}) == {}
