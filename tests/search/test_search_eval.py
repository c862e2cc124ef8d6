"""Labelled evaluation: recall@5 and MRR of lexical search over 300 mixed Chinese/English memories."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from tests.search.conftest import Engine

DATA = Path(__file__).resolve().parents[1] / "data"


def test_lexical_recall_at_5_and_mrr(engine: Engine) -> None:
    """SR-1, SR-4: recall@5 ≥ 0.9 for lexical mode; title matches rank first (title weight 5)."""
    imported = engine.cli.ok("import", str(DATA / "search_eval_memories.jsonl"))
    assert imported["created"] == 300
    engine.wait_ready()
    queries = [json.loads(line) for line in (DATA / "search_eval_queries.jsonl").read_text("utf-8").splitlines()]
    assert len(queries) >= 60
    per_category: dict[str, list[int | None]] = defaultdict(list)
    misses = []
    for q in queries:
        titles = engine.search_titles(q["query"], mode="lexical", limit=10)
        rank = next((i for i, t in enumerate(titles, start=1) if t in q["expected"]), None)
        per_category[q["category"]].append(rank)
        if rank is None or rank > 5:
            misses.append((q["query"], titles[:5]))
    ranks = [r for rs in per_category.values() for r in rs]
    recall = sum(1 for r in ranks if r is not None and r <= 5) / len(ranks)
    mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
    print(f"\nlexical eval: {len(ranks)} queries, recall@5 = {recall:.3f}, MRR = {mrr:.3f}")
    for category, rs in sorted(per_category.items()):
        cat_recall = sum(1 for r in rs if r is not None and r <= 5) / len(rs)
        print(f"  {category:<6} n={len(rs):>2} recall@5={cat_recall:.2f}")
    assert recall >= 0.9, misses
    assert mrr >= 0.8
    # Title vs body: the memory titled with the query word outranks mentions in bodies.
    assert all(r == 1 for r in per_category["title"]), per_category["title"]
    # The context-split category must be non-trivial: Jieba really splits those words differently.
    assert len(per_category["split"]) >= 4 and all(r is not None and r <= 5 for r in per_category["split"])
