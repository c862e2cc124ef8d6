"""Differential test (issue 20): a lone word that no longer indexed word extends is searched
without its SR-7 prefix clause, and every query ranks exactly as with the full expression.

The reference is the expression the index used before (``ParsedQuery.match_expression()``,
prefix always kept), run against the same FTS5 table as the expression search uses now.
"""

from __future__ import annotations

import random

import pytest

from engine.search.documents import Document, prepare
from engine.search.index import FILTERED_CANDIDATES, VaultIndex
from engine.search.query import parse_query
from engine.search.segment import Segmenter

SEGMENTER = Segmenter()
# Prefix families (cab/cabin/cabinet, sour/sourdough/sourdoughs) next to words no other word extends.
ENGLISH = [
    "cab",
    "cabin",
    "cabinet",
    "sour",
    "sourdough",
    "sourdoughs",
    "zeppelin",
    "garden",
    "gardening",
    "piano",
    "passport",
    "router",
    "marathon",
    "kyoto",
    "review",
    "reviewer",
    "café",
    "naïve",
]
CHINESE = ["我的记忆库存放在加密的保险库里", "我的護照放在抽屜裡", "理髮店週六營業", "记忆", "护照", "保险库", "咖啡馆"]


def _vault(notes: int = 600) -> VaultIndex:
    rng = random.Random(20)
    index = VaultIndex(b"v" * 16, b"p")
    items = []
    for i in range(notes):
        words = [rng.choice(ENGLISH) for _ in range(rng.randint(3, 40))]
        if i % 3 == 0:
            words.insert(rng.randint(0, len(words)), rng.choice(CHINESE))
        title = " ".join(rng.choice(ENGLISH + CHINESE) for _ in range(rng.randint(1, 3)))
        tags = tuple(rng.sample(ENGLISH[:8], rng.randint(0, 2)))
        doc = Document(i.to_bytes(16, "big"), i.to_bytes(32, "big"), "memory", title, " ".join(words), tags, (), i)
        items.append((doc, prepare(doc, SEGMENTER)))
    index.upsert_many(items)
    return index


QUERIES = [
    *ENGLISH,
    *(w[:n] for w in ENGLISH for n in range(3, len(w))),  # unfinished words
    *(w + " " for w in ENGLISH),  # finished words: never a prefix
    "cab sourdough",
    "zeppelin piano",
    '"sour dough"',
    "Sourdough",
    "SOURDOUGH",
    *CHINESE,
    "记忆 sourdough",
    "sourdough 记忆",
    "zeppelins",
    "absent",
]


@pytest.fixture(scope="module")
def index() -> VaultIndex:
    return _vault()


@pytest.mark.parametrize("text", QUERIES)
def test_rows_and_order_match_the_full_expression(index: VaultIndex, text: str) -> None:
    """SR-4, SR-7: dropping the redundant prefix clause keeps the rows, their order and their
    scores up to the exact factor 2 (so the reranker, which divides by the best score, and the
    shown scores are unchanged), in a vault of English and Chinese (Simplified and Traditional)."""
    parsed = parse_query(text, SEGMENTER)
    full = parsed.match_expression()
    used = index.match_expression(parsed)
    before = index.fts.query(full, FILTERED_CANDIDATES)
    now = index.fts.query(used, FILTERED_CANDIDATES)
    assert [rowid for rowid, _ in now] == [rowid for rowid, _ in before], (text, used)
    factor = 2.0 if used != full else 1.0
    assert [score * factor for _, score in now] == [score for _, score in before], (text, used)


def test_the_prefix_is_dropped_only_for_a_lone_word_nothing_extends(index: VaultIndex) -> None:
    """SR-7: `zeppelin` and `kyoto` (no longer word) lose the prefix clause; `cab`, `sour`, `review`
    (extended by cabin, sourdough, reviewer), unindexed words and multi-word queries keep it."""

    def has_prefix(text: str) -> bool:
        return "*" in index.match_expression(parse_query(text, SEGMENTER))

    assert not has_prefix("zeppelin") and not has_prefix("kyoto") and not has_prefix("sourdoughs")
    assert has_prefix("cab") and has_prefix("sour") and has_prefix("sourdough") and has_prefix("review")
    assert has_prefix("zeppeli") and has_prefix("zeppelins") and has_prefix("absent")
    assert has_prefix("piano zeppelin")  # two words: the sum of clauses would not be proportional
