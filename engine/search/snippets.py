"""Short highlighted snippets (SR-5): the sentence that matched best, matched terms wrapped in **.

A term is highlighted where a word begins with it (SR-7 prefixes: "cabi" marks "**cabi**n"),
never inside a word; a Latin term under three letters only as a whole word, and a single
letter never, so the "s" of "what's" marks no letter s anywhere (AG-8). CJK terms match anywhere (no spaces between words).
The window opens at the sentence holding the most distinct terms, not at the first hit.
"""

from __future__ import annotations

import itertools
import re

from engine.search.normalize import fold
from engine.search.script import to_simplified
from engine.search.segment import has_cjk

__all__ = ["snippet", "SNIPPET_CHARS"]

SNIPPET_CHARS = 200
_SHORT = 3  # Latin terms shorter than this match whole words only
_SENTENCE_END = re.compile(r"[.!?。！？;；]\s+|[。！？]|\n+")


def _pattern(term: str) -> re.Pattern[str] | None:
    if not term:
        return None
    escaped = re.escape(term)
    if has_cjk(term):
        return re.compile(escaped)
    if len(term) == 1 and not term.isdigit():
        return None  # the "s" of "what's", the "t" of "don't": marking them marks noise
    if len(term) < _SHORT:
        return re.compile(rf"(?<!\w){escaped}(?!\w)")
    return re.compile(rf"(?<!\w){escaped}")


def _matches(folded: str, terms: list[str]) -> list[tuple[int, int, int]]:
    """(start, end, term index) of every match, at most 64 per term."""
    found: list[tuple[int, int, int]] = []
    for i, term in enumerate(dict.fromkeys(terms)):
        pattern = _pattern(term)
        if pattern is None:
            continue
        for n, m in enumerate(pattern.finditer(folded)):
            if n >= 64:
                break
            found.append((m.start(), m.end(), i))
    found.sort()
    return found


def _merged(matches: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _ in matches:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _best_sentence(folded: str, matches: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(start of the sentence with the most distinct terms, offset of its first match)."""
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(folded)), len(folded) + 1]
    best: tuple[int, int, int] | None = None  # (-distinct, sentence start, first match)
    j = 0
    for lo, hi in itertools.pairwise(bounds):
        terms: set[int] = set()
        first = -1
        while j < len(matches) and matches[j][0] < hi:
            if matches[j][0] >= lo:
                terms.add(matches[j][2])
                first = matches[j][0] if first < 0 else first
            j += 1
        if terms and (best is None or -len(terms) < best[0]):
            best = (-len(terms), lo, first)
    return (best[1], best[2]) if best is not None else (0, 0)


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    folded = to_simplified(fold(text))  # query terms are in Simplified form (SR-8); the output keeps `text`
    # Offsets map 1:1 only when folding kept the length (true for ASCII, CJK, full-width forms and
    # nearly all Traditional → Simplified conversions).
    matches = _matches(folded, terms) if len(folded) == len(text) else []
    spans = _merged(matches)
    start = 0
    if matches:
        sentence, first = _best_sentence(folded, matches)
        # The sentence's start, unless its first match would fall out of the window.
        start = sentence if first - sentence < width * 3 // 4 else max(0, first - width // 4)
    end = min(len(text), start + width)
    out: list[str] = ["…" if start > 0 else ""]
    cursor = start
    for s, e in spans:
        if s < start or e > end:
            continue
        out.append(text[cursor:s])
        out.append("**" + text[s:e] + "**")
        cursor = e
    out.append(text[cursor:end])
    if end < len(text):
        out.append("…")
    return " ".join("".join(out).split())
