"""Chunk vectors in memory: normalized float32, cosine by dot product, bounded bytes (SR-2, SR-4).

Vectors are keyed by the chunk's content key, so an edit re-embeds only the
chunks whose text changed, and a changed model invalidates everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.lazy_import import LazyModule

__all__ = ["VectorStore", "normalize", "MIN_SIMILARITY"]

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    np = LazyModule("numpy")

# The vector-evidence floor (issue 12): a passage whose cosine similarity to the query is
# below this is no evidence at all, so vector and hybrid search never return it on that
# basis (without a floor, "nearest" ranks every passage and hybrid returned every note).
# Unrelated texts score about 0-0.15 with common embedding models; models with a high
# baseline similarity pass more through, but never fewer relevant passages.
MIN_SIMILARITY = 0.2


def normalize(values: list[float] | npt.NDArray[Any]) -> Vector:
    vec = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(vec))
    if not np.isfinite(norm) or norm == 0.0:
        raise ValueError("a zero or non-finite vector cannot be normalized")
    return vec / norm


class VectorStore:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.model = ""
        self.dims = 0
        self._vectors: dict[bytes, Vector] = {}
        self._matrix: tuple[list[bytes], Vector] | None = None

    def __len__(self) -> int:
        return len(self._vectors)

    @property
    def nbytes(self) -> int:
        return len(self._vectors) * self.dims * 4

    def reset_if_model_changed(self, model: str) -> None:
        if model != self.model:
            self.model = model
            self.dims = 0
            self._vectors.clear()
            self._matrix = None

    def has(self, key: bytes) -> bool:
        return key in self._vectors

    def put(self, key: bytes, values: list[float] | npt.NDArray[Any]) -> bool:
        """Store one vector; False when the byte bound is reached (the caller reports truncation)."""
        vec = normalize(values)
        if self.dims == 0:
            self.dims = int(vec.shape[0])
        if vec.shape[0] != self.dims:
            raise ValueError("the embedding model returned vectors of a different size")
        if key not in self._vectors and (len(self._vectors) + 1) * self.dims * 4 > self.max_bytes:
            return False
        self._vectors[key] = vec
        self._matrix = None
        return True

    def discard(self, key: bytes) -> None:
        """Drop the vector of a chunk that left the index."""
        if self._vectors.pop(key, None) is not None:
            self._matrix = None

    def nearest(
        self, query: Vector, allowed: set[bytes] | None, limit: int, min_score: float = MIN_SIMILARITY
    ) -> list[tuple[bytes, float]]:
        """Up to ``limit`` (key, cosine) pairs, best first, none scoring below ``min_score``."""
        if not self._vectors or query.shape[0] != self.dims:
            return []
        if self._matrix is None:
            keys = list(self._vectors)
            self._matrix = (keys, np.stack([self._vectors[k] for k in keys]))
        keys, matrix = self._matrix
        scores = matrix @ query
        order = np.argsort(-scores)
        out: list[tuple[bytes, float]] = []
        for i in order:
            if scores[int(i)] < min_score:
                break  # best first: everything after is below the floor too
            key = keys[int(i)]
            if allowed is None or key in allowed:
                out.append((key, float(scores[int(i)])))
                if len(out) >= limit:
                    break
        return out

    def clear(self) -> None:
        self._vectors.clear()
        self._matrix = None
