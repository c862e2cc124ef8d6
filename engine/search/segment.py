"""Jieba segmentation for mixed Chinese/English text, plus CJK character bigrams (SR-1).

Jieba's cut depends on context: "记忆库来" may become 记忆/库来 and then miss a
query for 记忆库. Every CJK run is therefore also indexed as overlapping
character bigrams in separate columns; a CJK query word matches either its
Jieba token or the phrase of its bigrams. English never produces bigrams, so
English precision is unaffected.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import jieba
import regex

from engine.search.dictcache import default_cache_dir, load_dictionary
from engine.search.normalize import fold, is_cjk
from engine.search.script import SCRIPT_VERSION, to_simplified

__all__ = ["Segmenter", "Segmented", "SEGMENTER_VERSION", "cjk_bigrams", "STOPWORDS", "CJK_RUN", "HANGUL_RUN"]

# Bump when tokenization changes: stored token streams of an older version are re-segmented lazily (SR-6).
SEGMENTER_VERSION = f"jieba-{jieba.__version__}/bigram-1/hangul-1/{SCRIPT_VERSION}"
CJK_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+")
# Korean separates words with spaces; Jieba, which knows no Hangul, cut every syllable apart,
# so a query matched any note sharing one syllable with it. A Hangul run is one word; its
# bigrams (cjk_bigrams) still find a word inside a longer one (저장소 in 저장소에).
HANGUL_RUN = regex.compile(r"\p{Hangul}+")
_init_lock = threading.Lock()

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


def cjk_bigrams(folded: str) -> list[str]:
    """Overlapping bigrams of each CJK run; a lone CJK character stands for itself."""
    out: list[str] = []
    for run in CJK_RUN.findall(folded):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _is_word(token: str) -> bool:
    return any(c.isalnum() for c in token)


@dataclass(frozen=True)
class Segmented:
    words: str  # space-joined Jieba tokens (FTS5's unicode61 tokenizer splits on the spaces)
    bigrams: str


class Segmenter:
    """Wraps Jieba's default tokenizer; initialized once, lazily, off the request path when possible.

    Its dictionary comes from a private per-user cache (engine/search/dictcache.py), never
    from Jieba's own cache in the shared temporary directory. ``cache_dir`` defaults to
    ``$MEMORIES_CACHE_DIR`` or the platform's user cache directory.
    """

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._ready = False
        self._cache_dir = cache_dir

    @property
    def ready(self) -> bool:
        return self._ready

    def warm(self) -> None:
        if self._ready:
            return
        with _init_lock:
            if not self._ready:
                jieba.setLogLevel(logging.WARNING)  # its "Building prefix dict" chatter is not our log
                if not jieba.dt.initialized:
                    load_dictionary(jieba.dt, self._cache_dir or default_cache_dir())
                self._ready = True

    def words(self, folded: str) -> list[str]:
        self.warm()
        if HANGUL_RUN.search(folded) is None:
            return [t for t in jieba.lcut(folded, HMM=True) if _is_word(t)]
        out: list[str] = []
        start = 0
        for match in HANGUL_RUN.finditer(folded):
            out.extend(t for t in jieba.lcut(folded[start : match.start()], HMM=True) if _is_word(t))
            out.append(match.group())
            start = match.end()
        out.extend(t for t in jieba.lcut(folded[start:], HMM=True) if _is_word(t))
        return out

    def segment(self, text: str) -> Segmented:
        folded = to_simplified(fold(text))  # SR-8: one script for index and query
        return Segmented(" ".join(self.words(folded)), " ".join(cjk_bigrams(folded)))


def has_cjk(text: str) -> bool:
    return any(is_cjk(c) for c in text)
