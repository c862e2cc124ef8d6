"""Short highlighted snippets (SR-5): matched terms wrapped in ** within a bounded window."""

from __future__ import annotations

from engine.search.normalize import fold
from engine.search.script import to_simplified

__all__ = ["snippet", "SNIPPET_CHARS"]

SNIPPET_CHARS = 200


def _spans(folded: str, terms: list[str]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for term in terms:
        if not term:
            continue
        pos = folded.find(term)
        while pos >= 0 and len(spans) < 64:
            spans.append((pos, pos + len(term)))
            pos = folded.find(term, pos + len(term))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    folded = to_simplified(fold(text))  # query terms are in Simplified form (SR-8); the output keeps `text`
    # Offsets map 1:1 only when folding kept the length (true for ASCII, CJK, full-width forms and
    # nearly all Traditional → Simplified conversions).
    spans = _spans(folded, terms) if len(folded) == len(text) else []
    start = max(0, spans[0][0] - width // 4) if spans else 0
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
