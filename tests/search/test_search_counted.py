"""DT-7: a counted search gives the same page and the same total as building every hit.

``VaultIndex.search_counted`` builds candidates and hits only up to the page's end and counts
the rest (bench/search.py measures the saving); this pins that the answer does not change:
for every page size, kind filter and keep filter, its hits are the first ``limit`` of the full
list and its count is the full list's length.
"""

from __future__ import annotations

import random

import pytest

from engine.search.documents import Document, prepare
from engine.search.index import VaultIndex
from engine.search.query import parse_query
from engine.search.rerank import RERANK_WINDOW
from tests.search.test_search_prefix_equivalence import CHINESE, ENGLISH, SEGMENTER

DEPTH = 5000


@pytest.fixture(scope="module")
def index() -> VaultIndex:
    rng = random.Random(31)
    vault = VaultIndex(b"v" * 16, b"p")
    items = []
    for i in range(700):
        words = [rng.choice(ENGLISH) for _ in range(rng.randint(3, 60))]
        if i % 4 == 0:
            words.insert(rng.randint(0, len(words)), rng.choice(CHINESE))
        kind = "knowledge" if i % 5 == 0 else "memory"
        title = " ".join(rng.choice(ENGLISH) for _ in range(rng.randint(1, 3)))
        doc = Document(i.to_bytes(16, "big"), i.to_bytes(32, "big"), kind, title, " ".join(words), (), (), i)
        items.append((doc, prepare(doc, SEGMENTER)))
    vault.upsert_many(items)
    return vault


@pytest.mark.parametrize("query", ["garden", ENGLISH[0], f"{ENGLISH[1]} {ENGLISH[2]}", f'"{ENGLISH[3]} {ENGLISH[4]}"', "记忆"])
@pytest.mark.parametrize("limit", [1, 7, RERANK_WINDOW - 1, RERANK_WINDOW + 13, 400])
def test_dt7_counted_search_equals_building_every_hit(index: VaultIndex, query: str, limit: int) -> None:
    parsed = parse_query(query, SEGMENTER)
    for kinds, keep in ((None, None), (frozenset({"memory"}), None), (None, lambda a: a[-1] % 3 != 0)):
        every = index.search(parsed, mode="lexical", limit=DEPTH, kinds=kinds, keep=keep, lexical_depth=DEPTH)
        hits, total = index.search_counted(parsed, mode="lexical", limit=limit, kinds=kinds, keep=keep, lexical_depth=DEPTH)
        assert total == len(every)
        assert [(h.asset_id, h.rowid, h.score) for h in hits] == [(h.asset_id, h.rowid, h.score) for h in every[:limit]]
    assert total > 0
