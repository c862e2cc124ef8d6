"""The latest answer wins (AG-9): which earlier turn a later turn corrects.

A turn corrects an earlier one when its conversation says so ("actually …", "… moved to …",
"改为 …", "还是改回 …") and it is about the same thing: of the earlier turns of its thread, the
one sharing the most salient words with it (numbers, identifiers, content words, Chinese
two-character words), with at least ``MIN_SHARED`` of them. The correction is recorded on the
later turn (``corrects``) when it is stored; search and ``recall_turn`` then rank it above
what it corrects and show the earlier turn as superseded. A rule of thumb, not a model: it
errs on the side of no link (a turn without a marker never supersedes anything).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

__all__ = ["is_correction", "salient", "corrected", "MAX_KEYS", "MIN_SHARED", "LOOKBACK"]

MAX_KEYS: Final = 48  # salient words kept per turn (in its summary)
MIN_SHARED: Final = 2
LOOKBACK: Final = 400  # earlier turns of the thread considered

_MARKERS = re.compile(
    r"\b(actually|correction|instead of|no longer|moved to|changed to|switch(?:ed)? (?:back )?to|rather than|"
    r"scratch that|not any more|anymore|keep \w+ as|turns out|update:|revert(?:ed)?(?: back)? to|go back to)\b"
    r"|改为|改成|改回|换成|改用|搬到|其实|更正|纠正|还是用|还是改|不再|而是",
    re.IGNORECASE,
)
_LATIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*[A-Za-z0-9_]|\d[\d.:]*\d|\d")
_HAN = re.compile(r"[\u4e00-\u9fff]+")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "that",
        "this",
        "with",
        "from",
        "into",
        "please",
        "can",
        "you",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "not",
        "but",
        "our",
        "its",
        "it's",
        "what",
        "which",
        "when",
        "where",
        "why",
        "how",
        "does",
        "did",
        "will",
        "would",
        "should",
        "could",
        "then",
        "than",
        "there",
        "their",
        "them",
        "they",
        "also",
        "just",
        "only",
        "again",
        "now",
        "all",
        "any",
        "some",
        "use",
        "used",
        "using",
        "make",
        "made",
        "set",
        "let",
        "get",
        "got",
        "see",
        "yes",
        "okay",
        "thanks",
        "done",
        "updated",
        "update",
        "actually",
        "instead",
        "keep",
        "moved",
        "changed",
        "after",
        "before",
        "about",
    ]
)


def is_correction(text: str) -> bool:
    return _MARKERS.search(text) is not None


def salient(text: str) -> list[str]:
    """Up to MAX_KEYS distinct salient words of ``text``, in order of first occurrence."""
    out: dict[str, None] = {}
    # Only the first MAX_KEYS distinct words count, Latin ones before Han bigrams: stop scanning
    # once they are found (a long turn's text is not walked to its end).
    for m in _LATIN.finditer(text):
        word = m.group(0).lower().strip(".-/")
        if (len(word) >= 3 or word.isdigit()) and word not in _STOP:
            out.setdefault(word, None)
            if len(out) >= MAX_KEYS:
                return list(out)
    for run in _HAN.findall(text):
        for i in range(len(run) - 1):
            out.setdefault(run[i : i + 2], None)
            if len(out) >= MAX_KEYS:
                return list(out)
    return list(out)


def corrected(keys: Iterable[str], earlier: Iterable[tuple[str, list[str]]]) -> str | None:
    """The earlier turn (uid) that a correcting turn with ``keys`` is about, or None.

    ``earlier``: (turn_uid, salient keys) oldest first; the most shared keys wins, the later on a tie.
    """
    mine = set(keys)
    best: tuple[int, str] | None = None
    for uid, theirs in earlier:
        shared = len(mine.intersection(theirs))
        if shared >= MIN_SHARED and (best is None or shared >= best[0]):
            best = (shared, uid)
    return best[1] if best is not None else None
