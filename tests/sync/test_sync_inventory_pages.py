"""A first sync whose inventory needs several pages (issue 32; SY-4, SY-1), between real daemons.

Sync protocol 1 sent the whole inventory in one message, and a message is at most one frame
(``Limits.frame_bytes``): the first sync of a 100k-note vault was ``sync_invalid``. Protocol 2
sends it in pages of at most ``Limits.page_bytes`` (engine/sync/pages.py). A vault large enough
to need many pages at the default page size takes minutes to build, so these daemons run with
``MEMORIES_SYNC_PAGE_BYTES`` at its floor (1 KiB, ``Limits.MIN_PAGE_BYTES``): each 32-byte ID
costs 34 bytes of MessagePack, so a vault of ``NOTES`` notes needs at least ``NOTES * 34 / 1024``
pages, and the session's report counts them. Malformed pages from a lying peer are in
tests/sync/test_sync_malicious_peer.py.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sync.transport import Limits
from tests.helpers import Cli
from tests.sync.support import Listener, free_port, make_pair, sync, token_for
from tests.sync.test_relay import _relay_sync, _start_relay

NOTES = 240
PAGE_BYTES = Limits.MIN_PAGE_BYTES
# The revision IDs alone: at least this many pages each way a vault's inventory is sent.
MIN_PAGES = NOTES * 34 // PAGE_BYTES


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    a, b = make_pair(tmp_path, env={"MEMORIES_SYNC_PAGE_BYTES": str(PAGE_BYTES)})
    yield a, b
    a.stop()
    b.stop()


def _import(cli: Cli, tmp_path: Path, name: str, count: int) -> None:
    source = tmp_path / f"{name}.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for i in range(count):
            body = f"{name} body {i} " + secrets.token_hex(8)
            out.write(json.dumps({"title": f"{name} note {i:04d}", "body": body, "tags": [f"t{i % 3}"]}) + "\n")
    cli.ok("import", str(source))


def _items(cli: Cli) -> dict[str, str]:
    return {row["id"]: row["title"] for row in cli.ok("list", "--all")["items"]}


def _converged(a: Cli, b: Cli) -> None:
    on_a, on_b = _items(a), _items(b)
    assert len(on_a) == len(on_b) and on_a == on_b
    for item_id in random.Random(32).sample(sorted(on_a), 5):
        assert a.ok("get", item_id)["body"] == b.ok("get", item_id)["body"]


def test_a_first_sync_whose_inventories_need_many_pages_converges(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-4, SY-1: A holds NOTES notes and B other NOTES/2; B's first sync with A's listener speaks
    protocol 3 (2's pages, with compressed bundle chunks that both sides inflate), each side's
    inventory arrives in at least MIN_PAGES pages, and both end with every item of both (same
    IDs, titles and sampled bodies). The next sync sends a delta: one page."""
    a, b = pair
    _import(a, tmp_path, "alpha", NOTES)
    _import(b, tmp_path, "beta", NOTES // 2)
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        first = sync(b, listener.url, token, timeout=600)
        assert first["protocol"] == 4  # 3: bundle chunks compressed; 4: compressed note bodies (issue 32)
        assert first["inventory_pages_received"] >= MIN_PAGES, first
        assert first["inventory_pages_sent"] >= MIN_PAGES // 2, first
        assert [v["revisions_added"] for v in first["vaults"]] == [NOTES]
        assert [v["revisions_added"] for v in first["peer_vaults"]] == [NOTES // 2]
        _converged(a, b)
        assert len(_items(a)) == NOTES + NOTES // 2
        edited = b.put("after the first sync", "one more")
        again = sync(b, listener.url, token, timeout=600)
    assert again["inventory_pages_received"] == again["inventory_pages_sent"] == 1, again
    assert a.ok("get", edited["id"])["body"] == "one more"
    _converged(a, b)


def test_a_paged_first_sync_through_a_relay_converges(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-4, API-5: the same paged inventories through a real `memories relay serve`, which
    forwards the sealed pages as any frame; both devices converge."""
    a, b = pair
    _import(a, tmp_path, "alpha", NOTES)
    relay, url = _start_relay(free_port())
    try:
        room = secrets.token_urlsafe(24)
        first, second = _relay_sync(a, url, room), _relay_sync(b, url, room)
        outs = [proc.communicate(timeout=600) for proc in (first, second)]
    finally:
        relay.terminate()
        relay.communicate(timeout=30)
    for proc, (out, err) in zip((first, second), outs, strict=True):
        assert proc.returncode == 0, f"relay sync failed: {out} {err}"
    results = [json.loads(out) for out, _ in outs]
    assert all(r["via"] == "relay" and r["protocol"] == 4 for r in results), results
    assert max(r["inventory_pages_received"] for r in results) >= MIN_PAGES, results
    _converged(a, b)
    assert len(_items(b)) == NOTES
