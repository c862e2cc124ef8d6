"""DT-7: the dashboard's relay passes IDs, kinds and counts only, and a slow tab costs a bounded queue."""

from __future__ import annotations

import asyncio

from desktop.dashboard.live import PAGE_QUEUE, _Page, clean_event

ITEM = {
    "type": "item",
    "change": "changed",
    "id": "ab" * 16,
    "vault": "cd" * 16,
    "kind": "memory",
    "revision": "ef" * 16,
    "conflict": False,
    "seq": 7,
}


def test_dt7_relay_keeps_only_the_allowlisted_fields() -> None:
    assert clean_event(ITEM) == {k: v for k, v in ITEM.items() if k != "seq"}
    # Text smuggled in by a foreign engine never reaches a page.
    hostile = {**ITEM, "title": "secret title", "kind": "<img src=x onerror=alert(1)>", "id": "not hex"}
    kept = {"type": "item", "change": "changed", "vault": "cd" * 16, "revision": "ef" * 16, "conflict": False}
    assert clean_event(hostile) == kept
    assert clean_event({"type": "shell", "cmd": "rm -rf"}) is None
    assert clean_event(["item"]) is None
    assert clean_event({"type": "job", "job": "search-build", "state": "running", "done": 5, "total": True}) == {
        "type": "job",
        "job": "search-build",
        "state": "running",
        "done": 5,
    }
    assert clean_event({"type": "attention", "conflicts": 2, "reasons": ["conflicts", "Quarantine!"]}) == {
        "type": "attention",
        "conflicts": 2,
    }


def test_dt7_a_tab_that_does_not_keep_up_gets_one_resync() -> None:
    async def main() -> None:
        page = _Page()
        for n in range(PAGE_QUEUE * 10):
            page.offer({"type": "counts", "n": n})
            assert page.queue.qsize() <= PAGE_QUEUE  # bounded whatever the tab does
        drained = []
        while not page.queue.empty():
            drained.append(page.queue.get_nowait())
        # The backlog was dropped and replaced by one resync, then the newest events follow it.
        resyncs = [e for e in drained if e and e["type"] == "resync"]
        assert len(resyncs) == 1 and drained[0] is not None and drained[0]["type"] == "resync"
        assert drained[-1] == {"type": "counts", "n": PAGE_QUEUE * 10 - 1}

    asyncio.run(main())
