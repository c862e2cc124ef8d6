"""Graph benchmark (issue 4). One command: `.venv/bin/python bench/graph.py [--nodes 10000 --edges 50000]`.

Builds a vault with N nodes and E random directed links through the real Service ops
(import_batch, card_link_many) in a temporary data home, then reports p50 latencies of
- `graph` from one node at depth 2 (neighbourhood walk over the adjacency index),
- `connections` depth 1, `recall_connected` 2 hops,
- `graph` without a root (the whole-vault projection),
- the adjacency-index rebuild inside unlock,
and the ratio depth-2-from-one-node ÷ whole-vault projection (expected ≪ 1: a node's
neighbourhood never scans the vault).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MEMORIES_KDF_TARGET_MS", "10")

import engine.service.handlers  # noqa: E402,F401
from engine.config import EngineConfig, Paths  # noqa: E402
from engine.service.caller import Caller  # noqa: E402
from engine.service.handlers.cards import link_index  # noqa: E402
from engine.service.service import Service  # noqa: E402

CALLER = Caller(namespace="cli:bench", surface="ipc")


def p50(fn: Any, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def build(svc: Service, nodes: int, edges: int, rng: random.Random) -> list[str]:
    ids: list[str] = []
    for start in range(0, nodes, 500):
        items = [{"title": f"node {i}", "body": f"body of node {i}"} for i in range(start, min(nodes, start + 500))]
        ids += svc.dispatch({"op": "import_batch", "items": items}, CALLER)["ids"]
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < edges:
        a, b = rng.randrange(nodes), rng.randrange(nodes)
        if a != b:
            pairs.add((a, b))
    ordered = sorted(pairs)
    for start in range(0, len(ordered), 5000):
        links = [
            {"src": ids[a], "dst": ids[b], "rel": "rel", "confidence": round(rng.uniform(0.1, 1.0), 3)}
            for a, b in ordered[start : start + 5000]
        ]
        svc.dispatch({"op": "card_link_many", "links": links}, CALLER)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--edges", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(4)
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(Paths(Path(tmp) / "home"), EngineConfig())
        svc.dispatch({"op": "init", "password": "bench password"}, CALLER)
        t0 = time.perf_counter()
        ids = build(svc, args.nodes, args.edges, rng)
        print(f"built {args.nodes} nodes, {args.edges} edges in {time.perf_counter() - t0:.1f} s")
        assert len(link_index(svc)) == args.edges
        picks = [rng.choice(ids) for _ in range(args.runs)]
        it = iter(picks * 4)
        svc.dispatch({"op": "graph"}, CALLER)  # warm the summary caches once, like a long-running daemon
        depth2 = p50(lambda: svc.dispatch({"op": "graph", "id": next(it), "depth": 2}, CALLER), args.runs)
        conn = p50(lambda: svc.dispatch({"op": "connections", "id": next(it)}, CALLER), args.runs)
        recall = p50(lambda: svc.dispatch({"op": "recall_connected", "ids": [next(it)], "hops": 2}, CALLER), args.runs)
        sample = svc.dispatch({"op": "graph", "id": picks[0], "depth": 2}, CALLER)
        full = p50(lambda: svc.dispatch({"op": "graph"}, CALLER), 5)
        whole = svc.dispatch({"op": "graph"}, CALLER)
        svc.dispatch({"op": "lock"}, CALLER)
        t0 = time.perf_counter()
        svc.dispatch({"op": "unlock", "password": "bench password"}, CALLER)
        unlock = time.perf_counter() - t0
        index = link_index(svc)
        t0 = time.perf_counter()
        index.clear()
        assert svc.state is not None
        index.apply_all(r for _, r in svc.state.extra_records.get("card_link", []))
        rebuild = time.perf_counter() - t0
    example = f"e.g. {len(sample['nodes'])} nodes, {len(sample['edges'])} edges"
    print(f"graph depth 2 from one node   p50 {depth2 * 1000:8.2f} ms  ({example})")
    print(f"connections depth 1           p50 {conn * 1000:8.2f} ms")
    print(f"recall_connected 2 hops       p50 {recall * 1000:8.2f} ms")
    print(f"graph whole vault             p50 {full * 1000:8.2f} ms  ({len(whole['nodes'])} nodes, {len(whole['edges'])} edges)")
    print(f"ratio depth-2 / whole vault       {depth2 / full:.4f}  (expected << 1)")
    print(f"unlock (KDF + verify + index)     {unlock * 1000:8.1f} ms; adjacency rebuild alone {rebuild * 1000:.1f} ms")


if __name__ == "__main__":
    main()
