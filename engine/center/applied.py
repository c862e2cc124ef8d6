"""What a daemon in tickets mode remembers about Center tickets (CT-1, CT-4), as sealed records.

* ``center_ticket_applied`` — one per ticket applied here (its id, kind, generation and the
  Center's fingerprint): a second ``center ticket apply`` of the same id is ``ticket_replayed``.
* ``center_generation`` — the newest credential generation this device has seen from a Center
  (from a ticket it applied or the Center's own answers): a ticket or ticket-made grant of an
  older generation is ``stale_generation`` (a promoted standby started a new one).

The records are extra records of the local store (sealed with the master key), committed in
the same transaction as the grant they go with. Pure logic over records: no socket here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from engine.errors import MemoriesError

__all__ = [
    "APPLIED_KIND",
    "GENERATION_KIND",
    "STATUS_TTL_SECONDS",
    "applied_ids",
    "newest_generations",
    "require_fresh",
    "require_current_generation",
    "StatusCache",
    "generation_record",
]

APPLIED_KIND: Final = "center_ticket_applied"
GENERATION_KIND: Final = "center_generation"
# docs/center.md allows a daemon to reuse the Center's answer for up to 5 s. We reuse only the
# final answers (revoked, expired: they never change back), and ask again for "valid" on every
# call, so a revocation is refused on the grant's very next call (CT-1), at the price of one
# small HTTP request per agent call on a kept-alive connection.
STATUS_TTL_SECONDS: Final = 5.0
FINAL_STATUSES: Final = frozenset({"revoked", "expired"})

Records = dict[str, list[tuple[int, dict[str, Any]]]]


def applied_ids(records: Records) -> set[str]:
    return {str(record["id"]) for _seq, record in records.get(APPLIED_KIND, [])}


def newest_generations(records: Records) -> dict[str, int]:
    """Center fingerprint → the newest generation seen (from applied tickets and answers)."""
    newest: dict[str, int] = {}
    for kind in (APPLIED_KIND, GENERATION_KIND):
        for _seq, record in records.get(kind, []):
            center, generation = str(record["center"]), int(record["generation"])
            newest[center] = max(newest.get(center, 0), generation)
    return newest


def require_fresh(records: Records, ticket_id: str) -> None:
    if ticket_id in applied_ids(records):
        raise MemoriesError("ticket_replayed")


def require_current_generation(newest: dict[str, int], center: str, generation: int) -> None:
    if generation < newest.get(center, 0):
        raise MemoriesError(
            "stale_generation",
            "This ticket is from an older credential generation of the Center than this device has seen; it was refused.",
        )


def generation_record(center: str, generation: int) -> dict[str, Any]:
    return {"t": GENERATION_KIND, "center": center, "generation": generation, "seen_ms": int(time.time() * 1000)}


@dataclass(frozen=True)
class _Cached:
    status: str
    generation: int
    at: float


class StatusCache:
    """The Center's final answers per ticket id (revoked, expired), kept for the process's life.

    "valid" is never reused (the Center is asked on each call), nor is a failure to reach the
    Center: an unreachable Center is asked again on the next call, and the call is refused.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[str, _Cached] = {}

    def get(self, ticket_id: str) -> tuple[str, int] | None:
        with self._lock:
            cached = self._answers.get(ticket_id)
            if cached is None:
                return None
            return cached.status, cached.generation

    def put(self, ticket_id: str, status: str, generation: int) -> None:
        if status not in FINAL_STATUSES:
            return
        with self._lock:
            self._answers[ticket_id] = _Cached(status, generation, self._clock())

    def forget(self, ticket_ids: Iterable[str] | None = None) -> None:
        with self._lock:
            if ticket_ids is None:
                self._answers.clear()
            else:
                for ticket_id in ticket_ids:
                    self._answers.pop(ticket_id, None)
