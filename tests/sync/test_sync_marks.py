"""A sync after a completed sync sends only what changed (issue 14; SY-4, design in docs/sync.md).

Each side keeps a sealed per-peer mark of the last completed sync; the next inventory lists only
IDs since then, with the mark's digest as its base. When the two bases differ, both sides send
their full inventory in a second round. Two real engines over a real listener; the lying peer
(tests/sync/lying_peer.py, honest mode: it never merges what it receives) is the peer whose mark
never matches.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from tests.helpers import Cli
from tests.sync.support import Listener, free_port, make_pair, sync, token_for
from tests.sync.test_sync_malicious_peer import Liar


def _import(cli: Cli, where: Path, prefix: str, count: int) -> None:
    source = where / f"{prefix}.jsonl"
    lines = (json.dumps({"title": f"{prefix} {i}", "body": f"{prefix} body {i}"}) for i in range(count))
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cli.ok("import", str(source))


def test_one_edit_costs_the_same_bytes_in_a_bigger_vault(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-4: the bytes of a sync carrying one edit do not grow with the vault. 300 more notes
    (≥ 300 revision IDs and their audit entries: > 20 KB in a full inventory) change the
    one-edit sync by less than 3 KB in each direction, and the edit arrives."""
    a, b = pair
    note = a.put("edited note", "first")
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync(b, listener.url, token)
        a.ok("edit", note["id"], "--body", "second")
        small = sync(b, listener.url, token)
        assert [v["revisions_added"] for v in small["vaults"]] == [1]
        _import(a, tmp_path, "bulk", 300)
        sync(b, listener.url, token)
        assert b.ok("status")["assets"] == 301
        a.ok("edit", note["id"], "--body", "third")
        big = sync(b, listener.url, token)
        assert [v["revisions_added"] for v in big["vaults"]] == [1]
        assert b.ok("get", note["id"])["body"] == "third"
        assert big["sent_bytes"] < small["sent_bytes"] + 3000, (small, big)
        assert big["received_bytes"] < small["received_bytes"] + 3000, (small, big)


def test_a_peer_without_a_matching_mark_gets_the_full_inventory_again(tmp_path: Path) -> None:
    """SY-4: A's mark for a peer that never merged what A sent (the honest-mode liar) does not
    match the peer's (it has none): the next sync falls back to full inventories, and A sends
    its note again instead of trusting its own mark."""
    a, b = make_pair(tmp_path)
    try:
        b.put("on B", "b")
        b.stop()
        # Over 30 KB of body the liar never stores, even deflated (note bodies are compressed).
        a.put("on A", base64.b64encode(os.urandom(40_000)).decode("ascii"))
        sent = []
        for _ in range(2):
            with Liar(b, "honest") as liar:
                sent.append(sync(a, liar.url, "msync1.any")["sent_bytes"])
        assert sent[0] > 30_000 and sent[1] > 30_000, sent
        assert {row["title"] for row in a.ok("list", "--all")["items"]} == {"on A", "on B"}
    finally:
        a.stop()
        b.stop()
