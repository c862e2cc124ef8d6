"""Word segmentation for mixed Chinese/English text (rjieba), plus CJK character bigrams (SR-1).

The segmenter is ``rjieba``, the Python binding of jieba-rs: a Rust port of Jieba with
the same dictionary and HMM. It segments about 20× faster than Python Jieba and builds
its dictionary in memory (no cache file anywhere, so nothing for another user to plant;
issue 12 and issue 20). Python Jieba stays the reference: tests/search/test_search_segmenter.py
compares both on the evaluation sets and on generated mixed text.

jieba-rs differs from Jieba in three documented places, and ``Segmenter.words`` undoes
the first two so that tokens stay Jieba's:

* it keeps ASCII words joined by ``-``, ``_`` or ``.`` together ("wi-fi", "pg_dump"), and
  its HMM skip pattern lets any character stand for the dot of "3.14" ("a+1"); Jieba cuts
  both into letters-and-digits runs (a decimal part and a % kept), which ``_rejoin`` redoes;
* it treats CJK Extension A–F and compatibility ideographs as Han, Jieba only
  U+4E00–U+9FD5: such characters are cut out first, each one a token, as Jieba does;
* its HMM emission table is rounded to six decimals, so where Jieba's Viterbi has two
  labellings within about 1e-6 of each other the other one may win (rare: 1 in tens of
  thousands of random Han strings, none on the evaluation sets). Both are then equally
  likely segmentations; the bigram columns below find the text either way.

Mixed Chinese/English text without any of those cases takes a fast path in ``segment``
(issue 32): one scan for the rare characters, one cut, one filter, and the CJK runs found by
an ``re`` pattern with the same characters as CJK_RUN; the strings are the general path's
(tests/search/test_search_segment_fast.py checks both on the same texts).

Segmentation depends on context: "记忆库来" may become 记忆/库来 and then miss a
query for 记忆库. Every CJK run is therefore also indexed as overlapping
character bigrams in separate columns; a CJK query word matches either its
segmenter token or the phrase of its bigrams. English never produces bigrams, so
English precision is unaffected.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from operator import add

import regex

from engine.search.normalize import fold, is_cjk
from engine.search.script import SCRIPT_VERSION, to_simplified

__all__ = [
    "Segmenter",
    "Segmented",
    "SEGMENTER_VERSION",
    "RJIEBA_VERSION",
    "cjk_bigrams",
    "STOPWORDS",
    "CJK_RUN",
    "HANGUL_RUN",
]

# The rjieba release the tokens are known to match (tests check it is the installed one).
# Bump both when rjieba changes: stored token streams of an older version are re-segmented
# lazily (SR-6). Importing rjieba builds its dictionary (~0.3 s), so the version is not read
# from the module at import time.
RJIEBA_VERSION = "0.2.2"
SEGMENTER_VERSION = f"rjieba-{RJIEBA_VERSION}/bigram-1/hangul-1/{SCRIPT_VERSION}"
CJK_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+")
# Korean separates words with spaces; Jieba, which knows no Hangul, cut every syllable apart,
# so a query matched any note sharing one syllable with it. A Hangul run is one word; its
# bigrams (cjk_bigrams) still find a word inside a longer one (저장소 in 저장소에).
HANGUL_RUN = regex.compile(r"\p{Hangul}+")
# Ideographs jieba-rs segments as Han but Jieba does not (Jieba's class is U+4E00–U+9FD5):
# Jieba makes each one a token of its own, without context.
# (re, not regex: the same explicit ranges, scanned about twice as fast; issue 32.)
_OUTSIDE_JIEBA_HAN = re.compile(
    "[\u3400-\u4dbf\u9fd6-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ebef\U0002f800-\U0002fa1f]"
)
# Jieba's HMM skip pattern (jieba/finalseg): how it cuts ASCII that is not a dictionary word.
_JIEBA_SKIP = re.compile(r"([a-zA-Z0-9]+(?:\.\d+)?%?)")  # re, like Jieba
_JOINERS = frozenset("-_.+#&%")
# jieba-rs only joins across a joiner between two ASCII letters or digits ("wi-fi", "a+1"):
# text without one has nothing for _rejoin to cut (one C scan per text, not a Python step
# per token; "the end." has no such joiner).
# Looked for from the joiner (rare) rather than from every letter (issue 32: 7x faster).
_JOINER_CLASS = re.escape("-_.+#&%")
_JOINED = re.compile(f"[{_JOINER_CLASS}](?<=[a-zA-Z0-9].)(?=[a-zA-Z0-9])")
# A letter or digit: \w without the underscore, exactly the characters str.isalnum accepts.
_ALNUM = re.compile(r"[^\W_]")
# What sends a text down the general path of ``Segmenter.segment`` (issue 32): Hangul,
# ideographs outside Jieba's class, ASCII joined by a joiner (the three cases ``words``
# handles apart) or any character outside the Basic Multilingual Plane (the fast CJK-run
# pattern knows the BMP only). Without any of them, ``words`` comes down to
# ``_words_only(cut(text))`` and CJK_RUN finds the runs ``_fast_patterns()`` does. Both are
# ``re`` patterns built on first use from ``regex``'s own classes: its script classes scan
# about twice as slowly as ``re``'s ranges, and three separate searches cost a sixth of the cut.
_ASTRAL_OR_OUTSIDE_JIEBA_HAN = "\u3400-\u4dbf\u9fd6-\u9fff\uf900-\ufaff\U00010000-\U0010ffff"
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_init_lock = threading.Lock()
_fast: tuple[re.Pattern[str], re.Pattern[str]] | None = None

STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "do",
        "does",
        "did",
        "for",
        "from",
        "has",
        "have",
        "had",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
        "about",
        "into",
        "than",
        "then",
        "there",
        "these",
        "those",
        "can",
        "could",
        "would",
        "should",
        "的",
        "了",
        "是",
        "在",
        "和",
        "与",
        "也",
        "都",
        "就",
        "而",
        "及",
        "或",
        "一个",
        "我",
        "你",
        "他",
        "她",
        "它",
        "我们",
        "你们",
        "他们",
        "吗",
        "呢",
        "吧",
        "啊",
        "什么",
        "怎么",
        "如何",
        "哪",
        "哪里",
        "这",
        "那",
        "这个",
        "那个",
        "有",
        "没有",
        "把",
        "被",
        "对",
        "从",
        "为",
        "为什么",
        "呀",
        "么",
    )
)


def _bmp_class(pattern: regex.Pattern[str]) -> str:
    """The characters of the BMP that ``pattern`` (one character class and ``+``) matches, as
    ``re`` class ranges: derived from ``regex``'s own Unicode data, so the two agree exactly."""
    every = "".join(map(chr, range(0x10000)))
    return "".join(
        re.escape(every[m.start()]) + ("-" + re.escape(every[m.end() - 1]) if m.end() - m.start() > 1 else "")
        for m in pattern.finditer(every)
    )


def _fast_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(the CJK runs of the BMP, the rare characters above), built once (about 30 ms)."""
    global _fast
    if _fast is None:
        with _init_lock:
            if _fast is None:
                cjk_run = re.compile(f"[{_bmp_class(CJK_RUN)}]+")
                # One class scanned once; a joiner in it counts only between two ASCII letters or
                # digits (_JOINED), any other character of it at once (twice as fast as an alternation).
                rare = re.compile(
                    f"[{_bmp_class(HANGUL_RUN)}{_ASTRAL_OR_OUTSIDE_JIEBA_HAN}{_JOINER_CLASS}]"
                    f"(?:(?<=[{_JOINER_CLASS}])(?<=[a-zA-Z0-9].)(?=[a-zA-Z0-9])|(?<![{_JOINER_CLASS}]))"
                )
                _fast = (cjk_run, rare)
    return _fast


def cjk_bigrams(folded: str) -> list[str]:
    """Overlapping bigrams of each CJK run; a lone CJK character stands for itself."""
    out: list[str] = []
    for run in CJK_RUN.findall(folded):
        if len(run) == 1:
            out.append(run)
        else:  # each character joined to the next, in C (no Python step per bigram; issue 32)
            out.extend(map(add, run, run[1:]))
    return out


def _bigram_text(folded: str, runs: list[str] | None = None) -> str:
    """``" ".join(cjk_bigrams(folded))`` built run by run in C (issue 32: twice as fast).

    ``runs``: the CJK runs of ``folded`` when the caller already has them (the fast path)."""
    if runs is None:
        runs = CJK_RUN.findall(folded)
    return " ".join([" ".join(map(add, run, run[1:])) if len(run) > 1 else run for run in runs])


# UTF-32 spaces to copy from, and what pairs across two runs leave in ``_pair_text``'s output.
_SPACES = memoryview((" " * 4096).encode("utf-32-le")).cast("I")
_ACROSS_RUNS = re.compile("[^ ]   [^ ] ")


def _pair_text(runs: list[str]) -> str:
    """``_bigram_text`` of runs that are all two characters or longer, in a few C calls whatever
    their number (issue 32: a third faster than a string per bigram built by Python).

    Every adjacent pair of ``" ".join(runs)`` is written with a space after it by three strided
    copies of UTF-32 code units (the first characters, the second ones, the spaces); the pairs
    holding the space between two runs come out as "c   d " and are cut out. The copies move
    whole code units, so the platform's byte order does not matter.
    """
    joined = " ".join(runs)
    count = len(joined) - 1
    if count < 1:
        return joined
    units = memoryview(joined.encode("utf-32-le")).cast("I")
    out = bytearray(12 * count)
    view = memoryview(out).cast("I")
    view[0::3] = units[:-1]
    view[1::3] = units[1:]
    view[2::3] = _SPACES[:count] if count <= len(_SPACES) else memoryview((" " * count).encode("utf-32-le")).cast("I")
    return _ACROSS_RUNS.sub("", out.decode("utf-32-le"))[:-1]


def _fast_bigrams(runs: list[str]) -> str:
    """The bigram column of the fast path from its CJK runs (a lone character among them: run by run)."""
    return _pair_text(runs) if runs and min(map(len, runs)) > 1 else _bigram_text("", runs)


def _words_only(tokens: list[str]) -> list[str]:
    """The tokens holding a letter or digit (spaces and punctuation dropped)."""
    return [t for t in tokens if t.isalnum() or (t != " " and _ALNUM.search(t) is not None)]


def _fast_words(folded: str, tokens: list[str]) -> str:
    """``" ".join(_words_only(tokens))`` for the tokens of a text on the fast path of ``segment``.

    There a token holding a letter or digit and something else can only be a word ending in
    "%" (50%) or a dictionary word with "+" or "#" (c++, c#): without those characters a token
    is a word exactly when it is all letters and digits, a test in C per token.
    """
    if "%" in folded or "+" in folded or "#" in folded:
        return " ".join(_words_only(tokens))
    return " ".join(filter(str.isalnum, tokens))


@dataclass(frozen=True)
class Segmented:
    words: str  # space-joined segmenter tokens (FTS5's unicode61 tokenizer splits on the spaces)
    bigrams: str


class Segmenter:
    """rjieba's default tokenizer, loaded once per process on first use (or by ``warm``).

    Loading builds the dictionary in memory (about 0.3 s of one core); nothing is read
    from or written to disk.
    """

    def __init__(self) -> None:
        self._cut: Callable[[str, bool], list[str]] | None = None
        self._has_word: Callable[[str], bool] | None = None

    @property
    def ready(self) -> bool:
        return self._cut is not None

    def warm(self) -> None:
        if self._cut is not None:
            return
        with _init_lock:
            if self._cut is None:
                import rjieba  # builds the dictionary: kept off import time and the CLI

                self._has_word = rjieba.has_word
                self._cut = rjieba.cut
        _fast_patterns()

    def _rejoin(self, tokens: list[str], out: list[str]) -> None:
        """Cut joined ASCII the way Jieba does ("wi-fi" → wi, -, fi); dictionary words (c++) stay."""
        assert self._has_word is not None
        for token in tokens:
            if len(token) > 1 and token.isascii() and not _JOINERS.isdisjoint(token) and not self._has_word(token):
                out.extend(part for part in _JIEBA_SKIP.split(token) if part)
            else:
                out.append(token)

    def _jieba_tokens(self, text: str, out: list[str]) -> None:
        """All tokens (spaces and punctuation included) as Jieba's precise mode with HMM gives them."""
        self.warm()
        assert self._cut is not None
        if _OUTSIDE_JIEBA_HAN.search(text) is None:
            if _JOINED.search(text) is None:
                out.extend(self._cut(text, True))
            else:
                self._rejoin(self._cut(text, True), out)
            return
        start = 0
        for match in _OUTSIDE_JIEBA_HAN.finditer(text):
            if match.start() > start:
                self._rejoin(self._cut(text[start : match.start()], True), out)
            out.append(match.group())
            start = match.end()
        if start < len(text):
            self._rejoin(self._cut(text[start:], True), out)

    def words(self, folded: str) -> list[str]:
        tokens: list[str] = []
        if HANGUL_RUN.search(folded) is None:
            self._jieba_tokens(folded, tokens)
            return _words_only(tokens)
        start = 0
        for match in HANGUL_RUN.finditer(folded):
            self._jieba_tokens(folded[start : match.start()], tokens)
            tokens.append(match.group())
            start = match.end()
        self._jieba_tokens(folded[start:], tokens)
        return _words_only(tokens)

    def segment(self, text: str) -> Segmented:
        folded = to_simplified(fold(text))  # SR-8: one script for index and query
        cjk_run, rare = _fast_patterns()
        if rare.search(folded) is None:
            # Mixed Chinese/English text (issue 32): one cut, one filter, the runs found by ``re``;
            # the same strings as the general path below (tests/search/test_search_segment_fast.py).
            self.warm()
            assert self._cut is not None
            return Segmented(_fast_words(folded, self._cut(folded, True)), _fast_bigrams(cjk_run.findall(folded)))
        # The general path still finds the runs with ``re`` when no astral character needs ``regex``.
        runs = cjk_run.findall(folded) if folded.isascii() or _ASTRAL.search(folded) is None else None
        return Segmented(" ".join(self.words(folded)), _bigram_text(folded, runs))


def has_cjk(text: str) -> bool:
    return any(is_cjk(c) for c in text)
