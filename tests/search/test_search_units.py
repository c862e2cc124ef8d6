"""Pure parts of search and rag: chunker, query parser, citations, config (malformed input)."""

from __future__ import annotations

import itertools
from typing import Any

import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import MemoriesError
from engine.rag.citations import check_citations
from engine.rag.config import parse_rag_config
from engine.search.chunker import chunk_text
from engine.search.documents import Document, Prepared, prepare
from engine.search.index import VaultIndex
from engine.search.normalize import fold
from engine.search.query import parse_query
from engine.search.segment import Segmenter

SEGMENTER = Segmenter()
GRAPHEME = regex.compile(r"\X", regex.DOTALL)
# Code points that build multi-code-point graphemes: combining marks, ZWJ emoji, flags, Hangul jamo.
PIECES = st.sampled_from(["a", " ", "。", "记", "e\u0301", "👩\u200d💻", "🇨🇳", "\u1100\u1161\u11a8", "\n", "x̧̌"])


@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES, max_size=400), st.integers(4, 60), st.integers(0, 3))
def test_chunks_never_split_a_grapheme(pieces: list[str], size: int, overlap: int) -> None:
    """SR-1: every chunk boundary is a grapheme boundary; chunks overlap and cover the text."""
    text = "".join(pieces)
    chunks = chunk_text(text, size=size, overlap=overlap)
    bounds = {0} | {m.end() for m in GRAPHEME.finditer(text)}
    assert all(c.start in bounds and c.end in bounds for c in chunks)
    assert all(c.text == text[c.start : c.end] for c in chunks)
    if text:
        assert chunks[0].start == 0 and chunks[-1].end == len(text)
        assert all(b.start <= a.end and b.start > a.start for a, b in itertools.pairwise(chunks))


SAFE_INDEX = VaultIndex(b"v", b"p")
SAFE_DOC = Document(b"a" * 16, b"r" * 32, "memory", "title", "body with words", (), (), 1)
SAFE_INDEX.upsert(SAFE_DOC, prepare(SAFE_DOC, SEGMENTER))
FTS_SYNTAX = st.sampled_from(['"', "'", "*", "^", ":", "(", ")", "-", "+", " ", "NEAR", "AND", "OR", "NOT", "{", "}"])
DOC_WORDS = st.sampled_from(["title", "body", "words", "other", "记忆"])
# What FTS5's unicode61 tokenizer takes for separators: all but letters, numbers and private use.
INDEX_SEPARATORS = regex.compile(r"[^\p{L}\p{N}\p{Co}]+")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=8), FTS_SYNTAX, DOC_WORDS), max_size=12).map("".join))
def test_any_query_text_is_safe(text: str) -> None:
    """API-8: FTS5 syntax in a query (quotes, NEAR, *, ^, columns) is data, never an error: the
    document is found exactly when a query term is one of its words, whatever surrounds it
    (found once by Hypothesis: "TITLE%", which Jieba keeps as one term and the index reads as "title")."""
    parsed = parse_query(text, SEGMENTER)
    hits = SAFE_INDEX.search(parsed, mode="lexical")
    assert len(hits) <= 1 and all(h.asset_id == SAFE_DOC.asset_id for h in hits)
    # A term counts by the words the index's tokenizer (FTS5 unicode61) reads in it: Jieba keeps
    # "title%" or "c++" whole, and both sides of the match read them as "title" and "c".
    shares_a_word = any(w in {"title", "body", "with", "words"} for t in parsed.terms for w in INDEX_SEPARATORS.split(t))
    assert bool(hits) == shares_a_word, (text, parsed.terms, parsed.phrases)


def test_fts_operators_are_literal() -> None:
    index = VaultIndex(b"v", b"p")
    for i, body in enumerate(["alpha NEAR beta", "title: gamma*", "plain"]):
        doc = Document(bytes([i]) * 16, bytes([i]) * 32, "memory", f"t{i}", body, (), (), i)
        index.upsert(doc, prepare(doc, SEGMENTER))
    hits = index.search(parse_query('"alpha NEAR" OR title: gamma* )(', SEGMENTER), mode="lexical")
    assert {h.asset_id[0] for h in hits} == {0, 1}


def test_width_folding_both_sides() -> None:
    assert fold("ＨＥＬＬＯ　Ｗｏｒｌｄ") == "hello world"
    index = VaultIndex(b"v", b"p")
    doc = Document(b"a" * 16, b"r" * 32, "memory", "ＧＰＵ note", "ｃｕｄａ driver", (), (), 1)
    index.upsert(doc, prepare(doc, SEGMENTER))
    assert index.search(parse_query("gpu CUDA", SEGMENTER), mode="lexical")
    assert index.search(parse_query("ｇｐｕ", SEGMENTER), mode="lexical")


def test_citations_keep_valid_and_report_invalid() -> None:
    """RAG-3: labels outside the selected sources are removed and reported, once each."""
    checked = check_citations("Yes [S1][S3]. Also [S9] and [S9]. See [S2].", {"S1", "S2", "S3"})
    assert checked.cited == ["S1", "S3", "S2"]
    assert checked.invalid == ["S9"]
    assert "[S9]" not in checked.text and "[S1][S3]" in checked.text


def test_config_rejects_bad_values_without_echo() -> None:
    bad: list[dict[str, Any]] = [
        {"rag": {"embedding": {"url": "ftp://x", "model": "m"}}},
        {"rag": {"embedding": {"url": "http://x", "model": ""}}},
        {"rag": {"generation": {"url": "http://x", "model": "m", "token": "sk-SECRET"}}},
        {"rag": {"generation": {"url": "http://x", "model": "m", "api_key_env": "NOT A NAME"}}},
        {"rag": {"timeout_seconds": -1}},
        {"rag": {"retries": True}},
        {"rag": "nope"},
        {"rag": {"embedding": {"kind": "onnx"}}},
    ]
    for data in bad:
        try:
            parse_rag_config(data)
        except MemoriesError as exc:
            assert exc.code == "invalid_config"
            assert "SECRET" not in exc.message
        else:
            raise AssertionError(f"accepted {data}")
    ok = parse_rag_config({"rag": {"embedding": {"kind": "gemini", "url": "https://g/x", "model": "e"}}})
    assert ok.embedding is not None and ok.embedding.kind == "gemini"


def test_token_records_round_trip_and_version_gate() -> None:
    """SR-6: a stored token stream rebuilds the same document; another segmenter version is ignored."""
    doc = Document(b"a" * 16, b"r" * 32, "memory", "记忆库 title", "我们的记忆库来自于长期积累", ("t",), (("k", "v"),), 5)
    prepared = prepare(doc, SEGMENTER)
    record = prepared.to_record()
    again = Prepared.from_record(record)
    assert again is not None and again.fits(doc)
    assert again.document(doc.asset_id, "memory", 5) == doc
    assert Prepared.from_record({**record, "v": "jieba-0.0/bigram-0"}) is None
    assert Prepared.from_record({**record, "chunks": [[0, 10_000, "x", ""]]}) is None  # out of range
    assert Prepared.from_record({**record, "summary": "nope"}) is None
    for broken in (
        {"chunks": [["0", 3, "x", ""]]},
        {"chunks": [[0, 3, "x"]]},
        {"chunks": [[0, 3, b"x", ""]]},
        {"title": [1, ""]},
        {"title": ["only one"]},
        {"meta": None},
        {"body": b"bytes"},
        {"rev": None},
    ):
        assert Prepared.from_record({**record, **broken}) is None, broken
