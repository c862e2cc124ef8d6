"""What a listing and the background work leave in memory (issue 32), through a real in-process
Service on a real store: the title order holds each item's head, not copies of its title and
tags; the search index the background work built leaves the collector's generations; a lock
drops the order and hands everything back. Behaviour only, never a memory figure."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.search_runtime import runtime_of
from engine.service.service import Service
from tests.helpers import PASSWORD

CALLER = Caller("cli:test")


def _service(home: Path, notes: int) -> Service:
    service = Service(Paths(home), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
    items = [{"title": f"Note {i % 7} 记忆", "body": f"body {i}", "tags": ["work", f"t{i % 3}"]} for i in range(notes)]
    service.dispatch({"op": "import_batch", "items": items}, CALLER)
    service.lock_now("test")  # in process: no re-execution; the unlock decodes every row again
    service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
    # The background work (index build, then the postings it schedules, the signature check)
    # holds the state while it runs: wait for every job, and for those they start, to end.
    for _ in range(20):
        jobs = service.background.running()
        if not jobs:
            return service
        assert all(job.wait(120) for job in jobs)
    raise AssertionError("the background work did not end")


def test_the_title_order_holds_heads_and_a_lock_drops_it(tmp_path: Path) -> None:
    service = _service(tmp_path / "home", 60)
    try:
        rows = service.dispatch({"op": "list", "sort": "title", "limit": 1000}, CALLER)["items"]
        assert [r["id"] for r in rows] == [r["id"] for r in sorted(rows, key=lambda r: (r["title"].casefold(), r["id"]))]
        state = service.require_unlocked()
        by_title, tagged = state.index.listing.derived(lambda ids: [])  # current: reads nothing
        assert len(by_title) == 60 and sorted(tagged) == ["t0", "t1", "t2", "work"]
        for asset_id in by_title.items():
            held = by_title._held[asset_id]
            assert held is state.index.newest_head(state.index.assets[asset_id])  # no copy of its fields
        assert all(any(listed is asset_id for asset_id in state.index.assets) for listed in tagged["work"][:5])
        order = weakref.ref(by_title)
        del by_title, tagged, state, held
        service.lock_now("test")
        gc.collect()
        assert order() is None  # dropped with the item index
        assert gc.get_freeze_count() == 0  # everything kept until the lock is handed back
    finally:
        service.lock_now("test")


def test_the_index_the_background_work_built_leaves_the_collector(tmp_path: Path) -> None:
    service = _service(tmp_path / "home", 40)
    try:
        runtime = runtime_of(service)
        index = runtime.cache.peek(service.require_unlocked().default_vault)
        assert index is not None and index.complete
        built = list(index.assets.values())  # made by the build job, after the unlock's own freeze
        assert len(built) == 40 and all(gc.is_tracked(entry) for entry in built)
        in_generations = {id(obj) for obj in gc.get_objects()}
        assert not any(id(entry) in in_generations for entry in built)  # frozen: no collection rescans them
        assert service.dispatch({"op": "search", "query": "body"}, CALLER)["results"]
        service.lock_now("test")
        assert gc.get_freeze_count() == 0
    finally:
        service.lock_now("test")
