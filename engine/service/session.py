"""Session state: lock generation, idle auto-lock, elevation, password throttling (ST-10, API-3)."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.errors import MemoriesError

__all__ = ["Session"]


@dataclass
class Session:
    idle_seconds: float
    sudo_seconds: float
    max_failures_per_minute: int
    generation: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    _elevated: dict[str, float] = field(default_factory=dict)
    _failures: deque[float] = field(default_factory=deque)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def idle_expired(self) -> bool:
        return time.monotonic() - self.last_activity >= self.idle_seconds

    def bump_generation(self) -> None:
        """Locking: in-flight work started under the old generation is dropped before delivery."""
        self.generation += 1
        self._elevated.clear()

    # -- elevation ----------------------------------------------------------------
    def elevate(self, namespace: str) -> float:
        expires = time.monotonic() + self.sudo_seconds
        self._elevated[namespace] = expires
        return self.sudo_seconds

    def is_elevated(self, namespace: str) -> bool:
        expires = self._elevated.get(namespace)
        if expires is None:
            return False
        if time.monotonic() >= expires:
            del self._elevated[namespace]
            return False
        return True

    # -- password throttling ------------------------------------------------------
    def check_password_budget(self) -> None:
        now = time.monotonic()
        while self._failures and now - self._failures[0] > 60:
            self._failures.popleft()
        if len(self._failures) >= self.max_failures_per_minute:
            raise MemoriesError("rate_limited")

    def record_password_failure(self) -> None:
        self._failures.append(time.monotonic())
