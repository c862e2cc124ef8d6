"""Idempotent agent writes (issue 27, item 9): a retried MCP write is answered, not repeated.

An MCP client that gives up on a ``memory_write`` (its timeout, the user pressing stop) sends
``notifications/cancelled``; by then the engine may already have saved the memory, and the
client's retry saves it a second time. MCP has no idempotency key of its own, so the key is
derived: the grant plus the whole inner request (op, title, body, tags, id, base …). The same
grant sending the same write within :data:`WINDOW_MS` gets the first write's answer again,
marked ``"replayed": true``, instead of a second item (or, for an update, a second conflicting
revision from the same base). A retry that arrives while the first write still runs waits for
it. Writing the same content again after the window, or after the first item was deleted, is
an ordinary new write.

Keys are HMACs under a per-process random key, kept in memory only (bounded, and dropped on
lock like every cache): the table never holds the content, nor a plain hash of it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import msgspec

__all__ = ["Replays", "REPLAYED_OPS", "WINDOW_MS", "CAPACITY"]

# The agent ops whose repetition would add something (a second item, revision or note).
# Links are sets (adding one twice changes nothing) and deletes are idempotent already.
REPLAYED_OPS: Final = frozenset({"put", "edit", "card_write", "annotate", "conclusion_write"})
# Longer than any client's retry loop (the SDK's default request timeout is 60 s).
WINDOW_MS: Final = 10 * 60 * 1000
# The most recent writes remembered (a retry comes right after its original).
CAPACITY: Final = 512


class _Running:
    def __init__(self) -> None:
        self.done = threading.Event()


class Replays:
    """Per-daemon table of recent agent writes: key → (time, answer)."""

    def __init__(self, *, window_ms: int = WINDOW_MS, capacity: int = CAPACITY) -> None:
        self._secret = os.urandom(32)
        self._window_ms = window_ms
        self._capacity = capacity
        self._lock = threading.Lock()
        self._answers: OrderedDict[bytes, tuple[int, dict[str, Any]]] = OrderedDict()
        self._running: dict[bytes, _Running] = {}

    def key(self, grant_id: bytes, inner: dict[str, Any]) -> bytes:
        canonical = msgspec.json.encode(inner, order="sorted")
        return hmac.new(self._secret, grant_id + b"\x00" + canonical, hashlib.sha256).digest()

    def run(
        self, key: bytes, write: Callable[[], dict[str, Any]], still_valid: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """``write()``'s answer, or the answer of the same write made within the window."""
        while True:
            with self._lock:
                self._expire()
                found = self._answers.get(key)
                running = self._running.get(key)
                if found is None and running is None:
                    mine = self._running[key] = _Running()
                    break
            if found is not None:
                # Checked outside our lock: the check takes the service lock, and the service
                # calls clear() while holding it (on lock).
                if still_valid(found[1]):
                    return {**found[1], "replayed": True}
                with self._lock:
                    if self._answers.get(key) is found:
                        del self._answers[key]
                continue
            assert running is not None
            running.done.wait()  # the same write is in flight: wait for its answer, then look again
        try:
            answer = write()
        except BaseException:
            with self._lock:
                del self._running[key]
            mine.done.set()
            raise
        with self._lock:
            del self._running[key]
            self._answers[key] = (_now_ms(), answer)
            self._answers.move_to_end(key)
            while len(self._answers) > self._capacity:
                self._answers.popitem(last=False)
        mine.done.set()
        return answer

    def _expire(self) -> None:
        cutoff = _now_ms() - self._window_ms
        while self._answers:
            first = next(iter(self._answers.values()))
            if first[0] >= cutoff:
                break
            self._answers.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._answers.clear()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)
