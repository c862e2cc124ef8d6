"""Text folding shared by the index and the query side (lowercase + width folding)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["fold", "fold_fast", "is_cjk", "is_cjk_text"]

# Full-width ASCII (U+FF01–FF5E) and the ideographic space → ASCII.
# Triggered by full-width letters/digits only: CJK text is full of full-width punctuation (，),
# which matters to no query term.
_FULL_WIDTH = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")
_WIDTH = {0xFF01 + i: 0x21 + i for i in range(0x5E)} | {0x3000: 0x20}
# All of full-width ASCII (punctuation too: Chinese text is full of ，and ：) and the
# ideographic space, each to its one-character compatibility decomposition.
_ANY_WIDE = re.compile("[\uff01-\uff5e\u3000]")
_NARROW = {chr(wide): chr(narrow) for wide, narrow in _WIDTH.items()}
# The full-width punctuation of nearly every Chinese note: replaced with str.replace, one C scan
# each, before the regex that narrows any full-width form (a Python call per match; issue 32).
_COMMON_WIDE = tuple((wide, _NARROW[wide]) for wide in "，：；（）！？")


def _narrow(match: re.Match[str]) -> str:
    return _NARROW[match.group()]


def fold(text: str) -> str:
    """NFKC folds full-width ASCII (ｈｅｌｌｏ → hello) and compatibility forms; then lowercase.

    Both documents and queries go through this, so either side may use either width.
    """
    if text.isascii():  # NFKC leaves ASCII unchanged; skip it on the hot path
        return text.lower()
    # NFKC of a whole note costs more than segmenting it (issue 32), and what it changes in
    # mixed notes is nearly always full-width punctuation. Replacing each full-width
    # character by its decomposition first changes nothing NFKC would give (NFKC composes
    # the compatibility decomposition, which is the same either way), so when the result is
    # already in NFKC (a quick check in C) it is NFKC's result; otherwise NFKC runs as before.
    # Narrowing some of them first and the rest after holds for the same reason.
    if unicodedata.is_normalized("NFKC", text):
        return text.lower()
    narrowed = text
    for wide, narrow in _COMMON_WIDE:
        if wide in narrowed:
            narrowed = narrowed.replace(wide, narrow)
    if unicodedata.is_normalized("NFKC", narrowed):
        return narrowed.lower()
    narrowed = _ANY_WIDE.sub(_narrow, narrowed)
    if unicodedata.is_normalized("NFKC", narrowed):
        return narrowed.lower()
    return unicodedata.normalize("NFKC", text).lower()


def is_cjk(ch: str) -> bool:
    """Han ideographs (incl. extension A and compatibility), kana and hangul syllables."""
    code = ord(ch)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0xF900 <= code <= 0xFAFF
        or 0x20000 <= code <= 0x2FA1F
        or 0x3040 <= code <= 0x30FF
        or 0xAC00 <= code <= 0xD7AF
    )


def is_cjk_text(text: str) -> bool:
    return bool(text) and all(is_cjk(c) for c in text)


def fold_fast(text: str) -> str:
    """Width folding + lowercase without NFKC: for per-query reranking of candidate passages.

    It agrees with ``fold`` on everything but rarer compatibility forms (ligatures,
    circled digits, decomposed accents), which only affects the coverage bonus.
    """
    if _FULL_WIDTH.search(text):  # a C-level scan; translate() is slow per character
        text = text.translate(_WIDTH)
    return text.lower()
