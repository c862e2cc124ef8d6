"""The engine's change feed (SPEC DT-7): what changed, by ID and kind, for windows that stay current.

One bounded ring of small events per engine. A writer (a commit, a lock, a job) appends an
event and wakes the readers; a reader (the dashboard, over the ``events`` op) asks for every
event after the sequence number it last saw and waits up to a bound for the next one.

Back-pressure is the ring's size, not the readers: the engine keeps nothing per reader, so a
slow or stalled window cannot grow the engine's memory. A reader that fell further behind
than the ring reaches (or that saw another engine process: a lock re-executes the engine,
ST-12) is told to ``resync``: read everything again instead of catching up event by event.
Events that only replace each other (a job's progress, one vault's counts) are coalesced:
the newer one takes the older one's place when nothing came between them.

Events name what changed and never what it says: item IDs, vault IDs, kinds, counts, fixed
job names. No title, body, tag, secret or error text ever enters the ring.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["EventBus", "Feed", "NoWaitingSlot", "RING_SIZE", "MAX_WAITERS"]

# Enough for every per-item event of a few ordinary commits; a bulk commit becomes one event.
RING_SIZE = 1024
# Readers waiting at once (each holds one of the engine's worker threads while it waits).
MAX_WAITERS = 4


class NoWaitingSlot(Exception):
    """Every waiting slot is taken: the reader should come back a little later."""


@dataclass(frozen=True)
class Feed:
    """One answer to a reader: the events after its cursor, or ``resync``."""

    stream: str
    seq: int
    events: list[dict[str, Any]]
    resync: bool

    def to_json(self) -> dict[str, Any]:
        return {"stream": self.stream, "seq": self.seq, "events": self.events, "resync": self.resync}


class EventBus:
    """The ring, its sequence numbers and the readers' wake-up."""

    def __init__(self, size: int = RING_SIZE, max_waiters: int = MAX_WAITERS) -> None:
        # A new value per engine process: cursors from an earlier process mean nothing here.
        self.stream = os.urandom(8).hex()
        self._ring: collections.deque[tuple[int, str | None, dict[str, Any]]] = collections.deque(maxlen=size)
        self._seq = 0
        self._lost = 0  # the newest sequence number the ring has dropped
        self._changed = threading.Condition()
        self._waiters = 0
        self._max_waiters = max_waiters
        self._closed = False

    @property
    def seq(self) -> int:
        with self._changed:
            return self._seq

    def publish(self, event: dict[str, Any], *, coalesce: str | None = None) -> None:
        """Append ``event`` (a flat dict of IDs, kinds and counts) and wake every reader.

        With ``coalesce``, an event with the same key that is still the newest is replaced: a
        reader that had not seen it yet sees only the newer one, one that had sees the newer
        one as new."""
        with self._changed:
            if coalesce is not None and self._ring and self._ring[-1][1] == coalesce:
                self._ring.pop()
            self._seq += 1
            if len(self._ring) == self._ring.maxlen:
                self._lost = self._ring[0][0]  # pushed out unread by anyone behind it
            self._ring.append((self._seq, coalesce, {**event, "seq": self._seq}))
            self._changed.notify_all()

    def close(self) -> None:
        """The engine is going away (shutdown, re-execution): wake every reader now."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def read(self, after: int | None, stream: str | None, wait: float) -> Feed:
        """Events after ``after``; waits up to ``wait`` seconds while there are none. Without
        ``after`` (a new reader), the current position: where its first real read starts."""
        with self._changed:
            if after is None:
                return Feed(self.stream, self._seq, [], resync=False)
            if stream is not None and stream != self.stream:
                return self._resync()
            if after > self._seq:
                return self._resync()
            if wait > 0 and after == self._seq and not self._closed:
                if self._waiters >= self._max_waiters:
                    raise NoWaitingSlot
                self._waiters += 1
                try:
                    self._changed.wait_for(lambda: self._seq > after or self._closed, timeout=wait)
                finally:
                    self._waiters -= 1
            if after < self._lost:
                return self._resync()  # what came between was pushed out of the ring
            events = [event for seq, _, event in self._ring if seq > after]
            return Feed(self.stream, self._seq, events, resync=False)

    def _resync(self) -> Feed:
        return Feed(self.stream, self._seq, [], resync=True)
