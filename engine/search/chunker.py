"""Overlapping, Unicode-safe chunks: a cut never splits a code point or a grapheme cluster (SR-1)."""

from __future__ import annotations

from dataclasses import dataclass

import regex

__all__ = ["Chunk", "chunk_text", "CHUNK_CHARS", "OVERLAP_CHARS", "CHUNKER_VERSION"]

CHUNK_CHARS = 1200
OVERLAP_CHARS = 200
CHUNKER_VERSION = 1
# Where a chunk may end early to land on a natural break (sentence end, newline, space).
_BREAK_CHARS = frozenset("\n。！？!?.;；,，、 \t")
_GRAPHEME = regex.compile(r"\X", regex.DOTALL)


@dataclass(frozen=True)
class Chunk:
    start: int  # code-point offsets into the source text
    end: int
    text: str


def _grapheme_bounds(text: str) -> list[int]:
    bounds = [m.end() for m in _GRAPHEME.finditer(text)]
    return [0, *bounds]


def chunk_text(text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``size`` code points (one oversized grapheme excepted).

    Short texts (the common case for memories) become one chunk without any
    grapheme analysis, which keeps index builds cheap.
    """
    if size < 2 or not 0 <= overlap < size:
        raise ValueError("chunk size must exceed the overlap")
    if len(text) <= size:
        return [Chunk(0, len(text), text)] if text else []
    bounds = _grapheme_bounds(text)
    chunks: list[Chunk] = []
    lo = 0  # index into bounds
    last = len(bounds) - 1
    while True:
        start = bounds[lo]
        hi = lo
        # Furthest grapheme boundary within `size` code points (at least one grapheme).
        while hi < last and bounds[hi + 1] - start <= size:
            hi += 1
        if hi == lo:
            hi = lo + 1
        if hi < last:
            hi = _prefer_break(text, bounds, lo, hi, size)
        end = bounds[hi]
        chunks.append(Chunk(start, end, text[start:end]))
        if hi >= last:
            return chunks
        # Next chunk starts `overlap` code points back, on a grapheme boundary, and always advances.
        nxt = hi
        while nxt - 1 > lo and end - bounds[nxt - 1] <= overlap:
            nxt -= 1
        lo = max(nxt, lo + 1)


def _prefer_break(text: str, bounds: list[int], lo: int, hi: int, size: int) -> int:
    """Move the end back to a break character if one lies in the last fifth of the window."""
    floor = bounds[lo] + size * 4 // 5
    probe = hi
    while probe > lo + 1 and bounds[probe] > floor:
        if text[bounds[probe] - 1] in _BREAK_CHARS:
            return probe
        probe -= 1
    return hi
