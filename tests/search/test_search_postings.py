"""Differential test (issue 20): the word postings rank a bare-word query exactly as FTS5 does.

``FtsIndex.query_words`` answers queries of OR-ed single words and SR-7 prefixes from
engine/search/postings.py instead of FTS5's bm25 over every match. The reference is FTS5
itself on the same table: the same rows, in the same order (ties by ascending row ID), with
bit-identical scores, at every limit, after deletions and edits, on generated vaults of
English and Chinese and on Hypothesis-generated rows with text FTS5's tokenizer splits and folds.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.search.fts import ABSORB_AT_QUERY, MAX_PREFIX_WORDS, FtsIndex, FtsRow
from engine.search.index import FILTERED_CANDIDATES, VaultIndex
from engine.search.query import ParsedQuery, parse_query
from tests.search.test_search_prefix_equivalence import QUERIES, SEGMENTER, _vault

LIMITS = (1, 10, 100, FILTERED_CANDIDATES)


def _fts5(fts: FtsIndex, parsed: ParsedQuery, limit: int) -> list[tuple[int, float]]:
    """What search asked FTS5 before the postings: the query's match expression, bm25 in SQL."""
    prefix = parsed.lone_prefix
    return fts.query(parsed.match_expression(prefix_is_word=prefix is not None and fts.only_word_with_prefix(prefix)), limit)


def _postings(fts: FtsIndex, parsed: ParsedQuery, limit: int) -> list[tuple[int, float]] | None:
    words = parsed.bare_words()
    assert words is not None
    return fts.query_words(words, limit, lone=parsed.lone_prefix is not None)


@pytest.fixture(scope="module")
def index() -> VaultIndex:
    return _vault()


def test_bare_word_queries_rank_as_fts5_in_a_mixed_vault(index: VaultIndex) -> None:
    """SR-4, SR-7: every bare-word query of the English/Chinese vault (whole words, unfinished
    words, words typed to their end, several words, case variants, absent words) gets FTS5's rows,
    order and scores from the postings; queries with CJK or a quoted phrase stay with FTS5."""
    answered = 0
    for text in QUERIES:
        parsed = parse_query(text, SEGMENTER)
        if parsed.bare_words() is None:
            continue
        for limit in LIMITS:
            ours = _postings(index.fts, parsed, limit)
            assert ours is not None, text
            assert ours == _fts5(index.fts, parsed, limit), (text, limit)
        answered += 1
    assert answered >= 60  # the English queries, not a vacuous loop
    for text in ("记忆", '"sour dough"', "记忆 sourdough", "保险库"):
        assert parse_query(text, SEGMENTER).bare_words() is None, text


def test_search_uses_the_postings_and_returns_what_fts5_ranks(index: VaultIndex) -> None:
    """The search pipeline's lexical candidates for a bare-word query are FTS5's, row for row."""
    parsed = parse_query("sourdough cab", SEGMENTER)
    from_postings = _postings(index.fts, parsed, 100)
    assert from_postings is not None  # answered by the postings, not by the FTS5 fallback
    assert index._lexical_rows(parsed, 100) == from_postings == _fts5(index.fts, parsed, 100)
    assert index.search(parsed, mode="lexical", limit=10)


def _word_rows(rng: random.Random, rows: int, start: int = 1) -> list[FtsRow]:
    words = ["alpha", "alpine", "alps", "beta", "gamma", "delta", "Delta", "ÉPÉE", "épée", "naïve", "x-ray", "v1.2"]
    out = []
    for rowid in range(start, start + rows):
        body = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        title = " ".join(rng.choice(words) for _ in range(rng.randint(0, 3)))
        meta = rng.choice(["", "alpha", "tag beta", "gamma gamma"])
        out.append(FtsRow(rowid, title, body, meta, rng.choice(["", "记忆 忆库"]), "", ""))
    return out


def test_deleted_rows_leave_the_ranking_and_compaction_keeps_it_exact() -> None:
    """Deleted and replaced rows drop out of scores, counts and averages as in FTS5, also once
    half of the postings are dead and a compaction has dropped them."""
    rng = random.Random(5)
    fts = FtsIndex()
    fts.add(_word_rows(rng, 12_000))
    queries = [ParsedQuery("alp", terms=["alp"], prefix="alp"), ParsedQuery("beta delta", terms=["beta", "delta"])]
    queries.append(ParsedQuery("naïve x", terms=["naïve", "épée"]))
    held_before = fts._postings._postings
    fts.delete(range(1, 9_001, 1))  # three rows in four: well past the compaction point
    fts.add(_word_rows(rng, 500, start=20_000))
    assert fts._postings._dead_postings == 0 and fts._postings._postings < held_before  # compacted
    fts.delete([20_001, 20_002, 9_500])
    for parsed in queries:
        for limit in LIMITS:
            assert _postings(fts, parsed, limit) == _fts5(fts, parsed, limit), (parsed.text, limit)
    fts.close()


def test_an_index_builds_rows_join_the_postings_when_it_catches_up() -> None:
    """A build's batches (defer_postings) are ranked by FTS5 until the build catches the postings
    up outside the service lock; a few waiting rows are taken in by the query itself; a row
    deleted while it waits never joins them; a commit's own rows join at once."""
    rng = random.Random(9)
    fts = FtsIndex()
    parsed = ParsedQuery("beta alp", terms=["beta", "alp"], prefix="alp")
    fts.add(_word_rows(rng, 1_000), defer_postings=True)
    assert _postings(fts, parsed, 100) is None  # 1,000 rows wait: more than a query takes in
    fts.add(_word_rows(rng, 3, start=5_000))  # a commit during the build: in the postings now
    fts.delete([7, 8, 5_001])
    fts.catch_up_postings()
    assert _postings(fts, parsed, 100) == _fts5(fts, parsed, 100)
    fts.add(_word_rows(rng, ABSORB_AT_QUERY, start=6_000), defer_postings=True)
    fts.delete([6_000])
    assert _postings(fts, parsed, FILTERED_CANDIDATES) == _fts5(fts, parsed, FILTERED_CANDIDATES)
    fts.close()
    fts.catch_up_postings()  # after the lock closed the index: nothing to do, no error


def test_fts5_answers_what_the_postings_cannot() -> None:
    """A word FTS5's tokenizer splits (a phrase of two tokens) and a prefix of more words than
    the vocabulary walk is worth are left to FTS5 (None), and search still answers them."""
    fts = FtsIndex()
    many = " ".join(f"pre{i:03d}" for i in range(MAX_PREFIX_WORDS + 1))
    fts.add([FtsRow(1, "x-ray", many, "", "", "", ""), FtsRow(2, "ray", "pre000", "", "", "", "")])
    assert fts.query_words([("x-ray", False)], 10, lone=False) is None
    assert fts.query_words([("pre", True)], 10, lone=True) is None
    assert fts.query_words([("pre00", True)], 10, lone=True) == fts.query('("pre00" OR "pre00" *)', 10)
    fts.close()


_ALPHABET = ["ab", "abc", "abd", "Abc", "ABC", "b", "bé", "BÉ", "c-d", "ß", "ǅa", "e\u0301", "x_y", "1.5", "k"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(
        st.tuples(
            st.lists(st.sampled_from(_ALPHABET), max_size=4),
            st.lists(st.sampled_from(_ALPHABET), max_size=25),
            st.lists(st.sampled_from(_ALPHABET), max_size=3),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
    deletes=st.lists(st.integers(min_value=1, max_value=40), max_size=10),
    terms=st.lists(st.sampled_from(["ab", "abc", "b", "bé", "ß", "k", "1", "ǆa", "zz"]), min_size=1, max_size=3, unique=True),
    prefix=st.booleans(),
    limit=st.sampled_from([1, 3, 100]),
)
def test_generated_rows_rank_as_fts5(
    docs: list[tuple[list[str], list[str], list[str], bool]],
    deletes: list[int],
    terms: list[str],
    prefix: bool,
    limit: int,
) -> None:
    """Hypothesis: rows whose text FTS5's unicode61 tokenizer folds (Abc, BÉ, ǅa) and splits
    (c-d, 1.5) and whose bigram columns add only length; deletions; one to three words,
    the last one maybe a prefix: the postings answer FTS5's answer exactly."""
    fts = FtsIndex()
    rows = [
        FtsRow(i, " ".join(t), " ".join(b), " ".join(m), "记忆 忆库" if cjk else "", "记忆" if cjk else "", "")
        for i, (t, b, m, cjk) in enumerate(docs, start=1)
    ]
    fts.add(rows)
    fts.delete(sorted(set(deletes)))
    parsed = ParsedQuery(" ".join(terms), terms=list(terms), prefix=terms[-1] if prefix and len(terms[-1]) >= 1 else None)
    ours = _postings(fts, parsed, limit)
    if ours is not None:  # None only for a word the tokenizer splits: checked above
        assert ours == _fts5(fts, parsed, limit)
    fts.close()
