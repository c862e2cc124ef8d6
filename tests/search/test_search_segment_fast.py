"""The segmenter's fast path for mixed Chinese/English text (issue 32) gives the general path's
strings exactly: token streams stay as stored (SEGMENTER_VERSION unchanged), so no vault
re-segments and search results stay identical.

``Segmenter.segment`` takes the fast path when ``_fast_patterns()``'s rare-character scan finds
nothing; the general path is ``Segmenter.words`` (checked against Jieba in
test_search_segmenter.py) and the bigrams of ``regex``'s CJK_RUN.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.search import note
from engine.search.normalize import fold
from engine.search.script import to_simplified
from engine.search.segment import (
    _JOINED,
    _OUTSIDE_JIEBA_HAN,
    CJK_RUN,
    HANGUL_RUN,
    Segmented,
    Segmenter,
    _bigram_text,
    _fast_patterns,
    _pair_text,
)
from tests.search.test_search_segmenter import DATA, MIXED, _eval_texts

SEGMENTER = Segmenter()
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _general(text: str) -> Segmented:
    """What ``segment`` gave before the fast path: the general path for every text."""
    folded = to_simplified(fold(text))
    return Segmented(" ".join(SEGMENTER.words(folded)), _bigram_text(folded))


def _takes_fast_path(text: str) -> bool:
    return _fast_patterns()[1].search(to_simplified(fold(text))) is None


def test_fast_path_on_the_evaluation_sets_and_the_bench_notes() -> None:
    """SR-1: on every text of the search evaluation sets, the agent evaluation's sessions and
    1,000 bench notes, segment() gives the general path's words and bigrams; the bench notes
    (mixed English/Chinese) all take the fast path."""
    texts = _eval_texts()
    for path in sorted((DATA / "agent-eval").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            texts.extend(v for v in json.loads(line).values() if isinstance(v, str))
    rng = random.Random(32)
    notes = [f"{item['title']} {item['body']}" for item in (note(rng, i) for i in range(1000))]
    for text in texts + notes:
        assert SEGMENTER.segment(text) == _general(text), text
    assert all(_takes_fast_path(text) for text in notes)
    assert not all(_takes_fast_path(text) for text in texts)  # the general path is exercised too


@pytest.mark.parametrize(
    "text",
    [
        "Alice met Bob at 京都 on Monday, and 张三觉得护照更重要。",
        "記憶庫來了 ｈｅｌｌｏ，世界！",  # Traditional and full-width: folded and converted first
        "50% of c++ and c# users, the end. 第3.5节",  # joined ASCII (3.5): the general path
        "100% 完成, c++ 和 c# (at &t) -x _y 8%。",  # tokens mixing letters and joiners, on the fast path
        "wi-fi 密码 pg_dump",
        "메모리 저장소에 记忆库",  # Hangul: the general path
        "𠀀-记忆 㐀㐁库",  # ideographs outside Jieba's class: the general path
        "notes 😀 with emoji 记忆",  # outside the BMP: the general path
        "ひらがな カタカナ 々〇 記憶",  # kana and Han-script symbols: bigram runs of CJK_RUN's class
        "",
        "猫",
        " .,;:!? ",
    ],
)
def test_fast_path_on_chosen_texts(text: str) -> None:
    """SR-1: each case of the general path gives the same strings through segment()."""
    assert SEGMENTER.segment(text) == _general(text)


@settings(max_examples=500, deadline=None)
@given(MIXED)
def test_fast_path_on_generated_mixed_text(text: str) -> None:
    """SR-1: on mixed Chinese/English/punctuation text (with joiners, kana, Hangul, rare ideographs)."""
    assert SEGMENTER.segment(text) == _general(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_fast_path_on_any_text(text: str) -> None:
    """SR-1: on any Unicode text at all."""
    assert SEGMENTER.segment(text) == _general(text)


def test_fast_patterns_have_regex_classes_exactly() -> None:
    """The ``re`` CJK-run class is CJK_RUN's on every BMP character; the rare scan finds exactly
    Hangul, Jieba's outside ideographs, any astral character and a joined joiner."""
    cjk_run, rare = _fast_patterns()
    bmp = "".join(map(chr, range(0x10000)))
    assert [m.span() for m in cjk_run.finditer(bmp)] == [m.span() for m in CJK_RUN.finditer(bmp)]
    for code in [*range(0x10000), 0x10000, 0x1F600, 0x20000, 0x2A6DF, 0x2F800, 0x10FFFF]:
        char = chr(code)
        expected = HANGUL_RUN.search(char) or _OUTSIDE_JIEBA_HAN.search(char) or _ASTRAL.search(char)
        assert (rare.search(char) is None) == (expected is None), hex(code)
    for text in ("wi-fi", "a+1", "3.14", "x_y", "a&b", "50%x", "the end.", "x-", "-x", "--", "中-文", "a-中", "a.-b"):
        assert (rare.search(text) is None) == (_JOINED.search(text) is None), text


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="记忆库加密咖啡𠀀ひカ", min_size=2, max_size=6), min_size=1, max_size=12))
def test_pair_text_is_the_bigram_text_of_runs_of_two_or_more(runs: list[str]) -> None:
    """SR-1: the strided-copy bigram column equals the one built bigram by bigram (astral characters too)."""
    assert _pair_text(runs) == _bigram_text("", runs)


def test_pair_text_of_a_run_longer_than_its_space_buffer() -> None:
    run = "记忆库" * 2000
    assert _pair_text([run, "加密"]) == _bigram_text("", [run, "加密"])
