"""Segmentation and query parsing (SR-1, SR-4): Korean, numbers, single CJK characters,
stopwords, and properties of the segmenter on any mixed-script text. Pure parts run on the
real in-memory FTS5 index; one test runs the same cases through the daemon."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.search.documents import Document, prepare
from engine.search.index import VaultIndex
from engine.search.normalize import fold, is_cjk
from engine.search.query import MAX_TERMS, parse_query
from engine.search.segment import CJK_RUN, STOPWORDS, Segmenter, cjk_bigrams
from tests.search.conftest import Engine

SEGMENTER = Segmenter()

NOTES = {
    # Korean: 저장소 (storage) and 소리 (sound) share only the syllable 소.
    "저장소": "메모리 저장소에 보관합니다",
    "소리": "좋은 소리가 납니다",
    # Numbers, including full-width digits.
    "Plan": "2024年的计划",
    "Python": "python 3.11 release notes",
    "Python next": "python 3.12 release notes",
    "Room": "Ｒｏｏｍ ４０４ is upstairs",
    # A single CJK character that Jieba keeps as its own word.
    "Cat": "我的猫很可爱",
    "Dog": "我的狗很听话",
    # Stopwords.
    "The tide": "the sea and the moon",
    "Memory palace": "a memory technique",
}

CASES: list[tuple[str, list[str]]] = [
    ("저장소", ["저장소"]),  # a whole word inside 저장소에 (found through its bigrams)
    ("소리", ["소리"]),  # not 저장소, which shares the syllable 소
    ("세계", []),
    ("2024", ["Plan"]),
    ("2025", []),
    ("3.11", ["Python"]),
    ("404", ["Room"]),
    ("４０４", ["Room"]),
    ("猫", ["Cat"]),
    ("the memory", ["Memory palace"]),  # "the" is a stopword: The tide does not match
    ("我们的记忆", []),  # 我们 and 的 are stopwords; nothing is about 记忆
]


def _index() -> VaultIndex:
    index = VaultIndex(b"v", b"p")
    for i, (title, body) in enumerate(NOTES.items()):
        doc = Document(bytes([i]) * 16, bytes([i]) * 32, "memory", title, body, (), (), i)
        index.upsert(doc, prepare(doc, SEGMENTER))
    return index


def _titles(index: VaultIndex, query: str) -> list[str]:
    return sorted(index.assets[h.asset_id].doc.title for h in index.search(parse_query(query, SEGMENTER), mode="lexical"))


def test_korean_words_stay_whole() -> None:
    """SR-1: a Hangul run is one word (Jieba alone cut every syllable apart); bigrams cover words inside it."""
    segmented = SEGMENTER.segment("메모리 저장소에 보관")
    assert segmented.words.split() == ["메모리", "저장소에", "보관"]
    assert segmented.bigrams.split() == ["메모", "모리", "저장", "장소", "소에", "보관"]
    assert SEGMENTER.words("abc저장소def 记忆库") == ["abc", "저장소", "def", "记忆", "库"]


def test_numbers_are_words() -> None:
    """SR-1: numbers are indexed as words (full-width digits folded); they never become bigrams."""
    segmented = SEGMENTER.segment("2024年的计划 version 3.11 ４２")
    assert segmented.words.split() == ["2024", "年", "的", "计划", "version", "3.11", "42"]
    assert segmented.bigrams.split() == ["年的", "的计", "计划"]


def test_single_cjk_character() -> None:
    """SR-1: a lone CJK character stands for itself among the bigrams, and is a query term."""
    assert cjk_bigrams("我") == ["我"]
    assert cjk_bigrams("a我b你们c记忆库") == ["我", "你们", "记忆", "忆库"]
    assert SEGMENTER.segment("猫").words == "猫" and SEGMENTER.segment("猫").bigrams == "猫"
    assert parse_query("猫", SEGMENTER).terms == ["猫"]


def test_stopwords_are_dropped_unless_nothing_else_is_left() -> None:
    """SR-4: stopwords are not query terms; a query of stopwords only still searches for its words."""
    assert parse_query("the memory of it", SEGMENTER).terms == ["memory"]
    assert parse_query("我们的记忆", SEGMENTER).terms == ["记忆"]
    assert parse_query("What is it", SEGMENTER).terms == ["what", "is", "it"]
    assert parse_query('"the memory"', SEGMENTER).phrases == ["the memory"]


def test_lexical_cases_on_the_index() -> None:
    """SR-1, SR-4: Korean, numbers, a single CJK character and stopwords find exactly their notes."""
    index = _index()
    for query, expected in CASES:
        assert _titles(index, query) == sorted(expected), query


def test_lexical_cases_through_the_daemon(engine: Engine) -> None:
    """SR-1, SR-4: the same cases through the real engine (write-time segmentation, IPC, search op)."""
    for title, body in NOTES.items():
        engine("put", title=title, body=body)
    for query, expected in CASES:
        assert sorted(engine.search_titles(query, mode="lexical")) == sorted(expected), query


MIXED = st.lists(
    st.sampled_from(
        list("abcXYZ019 .,-_'\"\n\t")
        + list("我们的记忆库来自于长期积累猫狗")
        + list("메모리저장소세계")
        + list("ひらがなカタカナ")
        + list("ＡＢｃ１２　，。")
        + ["e\u0301", "ﬁ", "①", "the ", "是"]
    ),
    max_size=40,
).map("".join)


def _alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


@settings(max_examples=300, deadline=None)
@given(MIXED)
def test_segmentation_properties(text: str) -> None:
    """SR-1: words are non-empty pieces of the folded text, in order, together holding every letter
    and digit of it; bigrams are the CJK runs' overlapping pairs; the result is deterministic."""
    folded = fold(text)
    segmented = SEGMENTER.segment(text)
    assert segmented == SEGMENTER.segment(text)
    words = segmented.words.split(" ") if segmented.words else []
    assert all(w and not any(c.isspace() for c in w) and any(c.isalnum() for c in w) for w in words)
    position = 0
    for word in words:  # each word occurs in the folded text after the previous one
        found = folded.find(word, position)
        assert found >= 0, (word, folded)
        position = found + len(word)
    assert _alnum("".join(words)) == _alnum(folded)
    bigrams = segmented.bigrams.split(" ") if segmented.bigrams else []
    runs = CJK_RUN.findall(folded)
    assert len(bigrams) == sum(max(len(r) - 1, 1) for r in runs)
    assert all(1 <= len(b) <= 2 and all(is_cjk(c) for c in b) and b in folded for b in bigrams)


@settings(max_examples=300, deadline=None)
@given(MIXED)
def test_query_parsing_properties(text: str) -> None:
    """SR-4: query terms are distinct non-empty words of the folded query, stopwords only when
    nothing else is left, at most MAX_TERMS; parsing is deterministic."""
    parsed = parse_query(text, SEGMENTER)
    again = parse_query(text, SEGMENTER)
    assert (parsed.terms, parsed.phrases, parsed.cjk_runs) == (again.terms, again.phrases, again.cjk_runs)
    assert len(parsed.terms) == len(set(parsed.terms)) <= MAX_TERMS
    assert all(t and t in parsed.text and any(c.isalnum() for c in t) for t in parsed.terms)
    if any(t not in STOPWORDS for t in parsed.terms):
        assert not any(t in STOPWORDS for t in parsed.terms)
    expression = parsed.match_expression()
    assert all('"' + t.replace('"', '""') + '"' in expression for t in parsed.terms)
    if parsed.empty:
        assert expression == ""
