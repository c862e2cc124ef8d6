"""Per-grant rate limits of the Center (CT-2): a token bucket per grant name.

A bucket holds up to ``burst`` requests and refills at ``rate`` per second; a request that
finds it empty is refused with ``rate_limited`` and the seconds after which one token is
back (the ``Retry-After`` header). In memory only: a restart starts every bucket full.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from engine.errors import MemoriesError

__all__ = ["RateLimiter"]


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate and burst must be positive")
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> None:
        """Spend one request of ``key``'s budget, or raise ``rate_limited`` with ``retry_after``."""
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens < 1.0:
                wait = max(1, math.ceil((1.0 - bucket.tokens) / self.rate))
                raise MemoriesError(
                    "rate_limited", f"This grant sent too many requests; try again in {wait} s.", retry_after=wait
                )
            bucket.tokens -= 1.0

    def forget(self, key: str) -> None:
        with self._lock:
            self._buckets.pop(key, None)
