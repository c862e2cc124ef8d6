"""Default reranker: boosts query-term coverage and exact phrases inside a bounded candidate set (SR-4)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.search.query import ParsedQuery

__all__ = ["Candidate", "rerank", "RERANK_WINDOW"]

RERANK_WINDOW = 50
# Weights of the retrieval score (normalized to the best candidate), term coverage and phrase match.
W_BASE, W_COVERAGE, W_PHRASE, W_TITLE = 0.55, 0.35, 0.10, 0.10


@dataclass
class Candidate:
    key: bytes  # asset ID
    base: float  # retrieval score, higher is better
    text: str  # folded title + metadata + best passage
    title: str = ""  # folded title: an exact title match is a strong signal
    score: float = 0.0


def _squash(text: str) -> str:
    """Whitespace removed, so phrases match across spacing differences (and CJK has none)."""
    return "".join(text.split())


def rerank(query: ParsedQuery, candidates: list[Candidate]) -> list[Candidate]:
    """Reorder the first RERANK_WINDOW candidates; the tail keeps its retrieval order below them."""
    head, tail = candidates[:RERANK_WINDOW], candidates[RERANK_WINDOW:]
    if not head:
        return candidates
    top = max(c.base for c in head) or 1.0
    terms = query.terms
    phrases = [_squash(p) for p in query.phrases]
    if not phrases and len(terms) >= 2:
        phrases = [_squash(query.text)]
    whole_query = _squash(query.text)
    for cand in head:
        squashed = _squash(cand.text)
        coverage = sum(1 for t in terms if t in squashed) / len(terms) if terms else 0.0
        phrase = 1.0 if phrases and any(p and p in squashed for p in phrases) else 0.0
        title = 1.0 if cand.title and _squash(cand.title) == whole_query else 0.0
        cand.score = W_BASE * (cand.base / top) + W_COVERAGE * coverage + W_PHRASE * phrase + W_TITLE * title
    head.sort(key=lambda c: c.score, reverse=True)
    floor = head[-1].score if head else 0.0
    for i, cand in enumerate(tail):
        cand.score = floor - (i + 1) * 1e-6
    return head + tail
