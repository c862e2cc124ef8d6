"""Reciprocal-rank fusion of ranked lists (SR-4)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["rrf"]

K = TypeVar("K", bound=Hashable)
RRF_K = 60


def rrf(rankings: Sequence[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Score = Σ 1/(k + rank); ranks start at 1. Ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: item[1], reverse=True)
