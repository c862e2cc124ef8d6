"""Bulk commits are indexed by a background catch-up job (issue 20, SR-2, SR-6).

An import batch answers once its sealed content is durable; the search runtime indexes the
batch off the request path and searches say "partial" until it has caught up. These tests
run the real daemon and check outcomes that hold whatever the timing: every note becomes
findable, changes made while the job runs win, a lock in the middle loses nothing, and the
token streams the job wrote spare the next unlock any segmentation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.service.search_runtime import CATCH_UP_MIN
from tests.search.conftest import Engine
from tests.sync.support import Listener, free_port, make_pair, sync, token_for

COUNT = 3 * CATCH_UP_MIN + 7  # one import batch well above the catch-up threshold


def _word(i: int) -> str:
    # Letters only, so the segmenter keeps each one a single word.
    return "mark" + "".join("abcdefghij"[int(d)] for d in f"{i:04d}")


def _items(count: int) -> list[dict[str, Any]]:
    return [{"title": f"Bulk {i}", "body": f"批量导入的笔记 {i}: {_word(i)} 长期记忆"} for i in range(count)]


def _found(engine: Engine, query: str) -> list[str]:
    return engine.search_titles(query, mode="lexical")  # waits for the catch-up; asserts not partial


def test_a_bulk_import_becomes_searchable_and_its_tokens_are_kept(engine: Engine) -> None:
    """SR-2, SR-6: every note of a bulk import is found once the search waits for the index, and the
    token streams the catch-up wrote let the next unlock rebuild without segmenting anything."""
    result = engine("import_batch", items=_items(COUNT))
    assert result["created"] == COUNT
    for i in (0, COUNT // 2, COUNT - 1):
        assert _found(engine, _word(i)) == [f"Bulk {i}"]
    status = engine.wait_ready()
    assert status["index"]["assets"] == COUNT
    assert status["build"]["segmented"] >= COUNT  # the catch-up segmented the batch

    engine.cli.ok("lock")
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    rebuilt = engine.wait_ready()
    assert rebuilt["index"]["assets"] == COUNT
    # ST-12: the lock re-executed the engine, so these counters count since the unlock.
    assert rebuilt["build"]["reused_tokens"] >= COUNT
    assert rebuilt["build"]["segmented"] == 0  # nothing segmented again
    assert _found(engine, _word(COUNT - 1)) == [f"Bulk {COUNT - 1}"]


def test_bare_words_are_ranked_from_the_postings_once_they_catch_up(engine: Engine) -> None:
    """Issue 20: the rows a catch-up indexed join the word postings a moment after it (status
    counts those waiting, FTS5 ranks meanwhile); then bare-word searches, now answered from the
    postings, find what they found before, an unfinished word (SR-7 prefix) included."""
    engine("import_batch", items=_items(COUNT))
    engine.wait_ready()
    before = [_found(engine, _word(i)) for i in (0, COUNT - 1)]
    deadline = time.monotonic() + 60
    while engine("rag_status")["index"]["postings_waiting"]:
        assert time.monotonic() < deadline, "the word postings did not catch up within 60 s"
        time.sleep(0.1)
    assert [_found(engine, _word(i)) for i in (0, COUNT - 1)] == before == [["Bulk 0"], [f"Bulk {COUNT - 1}"]]
    # A prefix of ten words (markaaaa … markaaaj) from the postings; one of 199 (more than
    # MAX_PREFIX_WORDS) from FTS5.
    assert sorted(engine.search_titles("markaaa", mode="lexical", limit=20)) == sorted(f"Bulk {i}" for i in range(10))
    assert len(engine.search_titles("marka", mode="lexical", limit=50)) == 50


def test_changes_made_while_the_catch_up_runs_win(engine: Engine) -> None:
    """SR-2, SR-3: a note deleted and a note edited right after the bulk import (before or after the
    job reached them) end as the index's truth: the deleted one is gone, the edit is what is found."""
    ids = engine("import_batch", items=_items(COUNT))["ids"]
    engine("delete", id=ids[-1])
    base = engine("get", id=ids[-2])["revision"]
    engine("edit", id=ids[-2], base=base, body="改过的笔记 rewrittenword")
    assert _found(engine, _word(COUNT - 1)) == []
    assert _found(engine, _word(COUNT - 2)) == []
    assert _found(engine, "rewrittenword") == [f"Bulk {COUNT - 2}"]
    assert _found(engine, _word(COUNT - 3)) == [f"Bulk {COUNT - 3}"]
    assert engine.wait_ready()["index"]["assets"] == COUNT - 1


def test_a_lock_during_the_catch_up_loses_nothing(engine: Engine) -> None:
    """ST-10, SR-2: locking right after a bulk import stops the job and wipes the index; the next
    unlock indexes every note (from stored token streams or by segmenting what was not reached)."""
    engine("import_batch", items=_items(COUNT))
    engine.cli.ok("lock")
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    status = engine.wait_ready()
    assert status["index"]["assets"] == COUNT
    for i in (0, COUNT - 1):
        assert _found(engine, _word(i)) == [f"Bulk {i}"]


def test_a_second_bulk_commit_joins_the_running_catch_up(engine: Engine) -> None:
    """SR-2: two bulk imports in a row (the second may arrive while the first is being indexed)
    end with both complete in the index, each note once."""
    first = _items(COUNT)
    second = [{"title": f"Second {i}", "body": f"第二批 {_word(10_000 - i - 1)}"} for i in range(COUNT)]
    engine("import_batch", items=first)
    engine("import_batch", items=second)
    assert _found(engine, _word(10_000 - COUNT)) == [f"Second {COUNT - 1}"]
    assert _found(engine, _word(COUNT - 1)) == [f"Bulk {COUNT - 1}"]
    assert engine.wait_ready()["index"]["assets"] == 2 * COUNT


def test_bulk_deletions_arriving_by_sync_leave_the_index(tmp_path: Path) -> None:
    """SR-2, SR-3, SY-4: B receives a bulk import from A in one sync (indexed by the catch-up), then
    the deletion of all but one of those notes in the next: B's index drops every deleted note."""
    a, b = make_pair(tmp_path)
    on_a = Engine(a)
    try:
        ids = on_a("import_batch", items=_items(COUNT))["ids"]
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            sync(b, listener.url, token)
            on_b = Engine(b)
            try:
                assert _found(on_b, _word(COUNT - 1)) == [f"Bulk {COUNT - 1}"]
                assert on_b.wait_ready()["index"]["assets"] == COUNT
                for asset in ids[1:]:
                    on_a("delete", id=asset)
                sync(b, listener.url, token)
                assert _found(on_b, _word(COUNT - 1)) == []
                assert _found(on_b, "长期记忆") == ["Bulk 0"]
                assert on_b.wait_ready()["index"]["assets"] == 1
            finally:
                on_b.close()
    finally:
        on_a.close()
        a.stop()
        b.stop()


def test_an_import_that_says_more_follow_is_indexed_once_its_last_batch_is_in(engine: Engine) -> None:
    """SR-2, issue 32: batches of one import that say ``more`` follow are indexed after the last
    one, here one too small for a catch-up of its own (searches meanwhile answer, and say
    "partial" until then); then every note of every batch is found, each once."""
    first = _items(COUNT)
    second = [{"title": f"Later {i}", "body": f"后来的 {_word(9_000 + i)}"} for i in range(COUNT)]
    last = [{"title": "Last", "body": f"最后 {_word(8_000)}"}]
    engine("import_batch", items=first, more=True)
    meanwhile = engine("search", query=_word(0), mode="lexical", wait_ms=0)
    assert meanwhile["partial"] is True or [r["title"] for r in meanwhile["results"]] == ["Bulk 0"]
    engine("import_batch", items=second, more=True)
    engine("import_batch", items=last)
    assert _found(engine, _word(0)) == ["Bulk 0"]
    assert _found(engine, _word(9_000 + COUNT - 1)) == [f"Later {COUNT - 1}"]
    assert _found(engine, _word(8_000)) == ["Last"]
    assert engine.wait_ready()["index"]["assets"] == 2 * COUNT + 1


def test_an_import_whose_last_batch_never_comes_is_indexed_all_the_same(engine: Engine) -> None:
    """SR-2, issue 32: a batch that said more follow, after which nothing came (the importing
    process died), is indexed anyway: a search that waits finds it, complete."""
    engine("import_batch", items=_items(COUNT), more=True)
    assert _found(engine, _word(COUNT - 1)) == [f"Bulk {COUNT - 1}"]
    assert engine.wait_ready()["index"]["assets"] == COUNT
