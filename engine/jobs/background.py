"""One home for the engine's long-running background work (issue 16): start, cancel on lock, progress.

Every piece of work the engine does off the request path — the signature re-check after an
unlock, the search index build, the deferred commit of search token streams, warming the
segmenter — starts here, on a named daemon thread, with a ``JobContext`` that carries the
cancel signal and takes progress reports. The owner (one per Service) cancels every
lock-bound job when the vault locks, and ``snapshot()`` reports names, states and counts
for ``memories status`` — never content, IDs or errors' text (only a failure's type).

Cancellation is cooperative: work checks ``context.cancelled`` between batches and returns.
Nothing here knows the service or the vault (LY-1: engine/jobs is a domain package).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from engine.errors import MemoriesError

__all__ = ["BackgroundWork", "JobContext", "JobHandle", "JobState", "HISTORY"]

log = logging.getLogger("memories.jobs")
T = TypeVar("T")
JobState = Literal["waiting", "running", "done", "failed", "cancelled"]
# Finished jobs kept for the snapshot, so a status read after a job ended still says how it ended.
HISTORY = 16


class JobHandle:
    """One started piece of work: its state, its progress and its cancel signal."""

    def __init__(self, name: str, *, cancel_on_lock: bool) -> None:
        self.name = name
        self.cancel_on_lock = cancel_on_lock
        self.cancelled = threading.Event()
        self.finished = threading.Event()
        self.state: JobState = "waiting"
        self.done = 0
        self.total: int | None = None
        self.failure: str | None = None  # the exception's type or error code, never its text
        self.started = time.time()
        self._began = time.monotonic()
        self._ended: float | None = None

    def cancel(self) -> None:
        """Ask the work to stop; it returns at its next check and ends as ``cancelled``."""
        self.cancelled.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the work has ended (done, failed or cancelled)."""
        return self.finished.wait(timeout)

    def running(self) -> bool:
        return not self.finished.is_set()

    def snapshot(self) -> dict[str, Any]:
        ended = self._ended if self._ended is not None else time.monotonic()
        return {
            "name": self.name,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "started": round(self.started, 3),  # also tells two runs of one job apart
            "seconds": round(ended - self._began, 3),
            **({"failure": self.failure} if self.failure else {}),  # a code or type, never a message
        }

    def _finish(self, state: JobState) -> None:
        self.state = state
        self._ended = time.monotonic()
        self.finished.set()


class JobContext:
    """What a piece of work sees of its job: the cancel signal and a progress sink."""

    def __init__(self, handle: JobHandle, changed: Callable[[JobHandle], None] = lambda handle: None) -> None:
        self._handle = handle
        self._changed = changed
        self.cancelled = handle.cancelled

    def progress(self, done: int, total: int | None = None) -> None:
        self._handle.done = done
        if total is not None:
            self._handle.total = total
        self._changed(self._handle)


class BackgroundWork:
    """The background jobs of one engine: one way to start them, cancel them on lock and list them."""

    def __init__(self, history: int = HISTORY) -> None:
        self._guard = threading.Lock()
        self._running: list[JobHandle] = []
        self._ended: collections.deque[JobHandle] = collections.deque(maxlen=history)
        # Told when a job starts running, reports progress and ends (the change feed, DT-7);
        # must return at once and never raise.
        self.listeners: list[Callable[[JobHandle], None]] = []

    def _changed(self, handle: JobHandle) -> None:
        for listener in self.listeners:
            try:
                listener(handle)
            except Exception as exc:  # a listener must not stop the work it listens to
                log.error("job listener failed type=%s", type(exc).__name__)

    def start(
        self,
        name: str,
        work: Callable[[JobContext], None],
        *,
        cancel_on_lock: bool = True,
        delay: float = 0.0,
    ) -> JobHandle:
        """Run ``work`` on a daemon thread named ``memories-NAME``, after ``delay`` seconds
        unless cancelled meanwhile (a deferred flush is a job that waits first)."""
        handle = JobHandle(name, cancel_on_lock=cancel_on_lock)
        with self._guard:
            self._running.append(handle)
        thread = threading.Thread(target=self._run, args=(handle, work, delay), name=f"memories-{name}", daemon=True)
        thread.start()
        return handle

    def _run(self, handle: JobHandle, work: Callable[[JobContext], None], delay: float) -> None:
        state: JobState = "cancelled"
        try:
            if delay > 0 and handle.cancelled.wait(delay):
                return
            if handle.cancelled.is_set():
                return
            handle.state = "running"
            self._changed(handle)
            work(JobContext(handle, self._changed))
            state = "cancelled" if handle.cancelled.is_set() else "done"
        except MemoriesError as exc:
            state, handle.failure = "failed", exc.code
            log.warning("background job %s stopped (%s)", handle.name, exc.code)
        except Exception as exc:  # a bug must not kill the daemon; only the type is logged (no data)
            state, handle.failure = "failed", type(exc).__name__
            log.error("background job %s failed type=%s", handle.name, type(exc).__name__)
        finally:
            with self._guard:  # a snapshot sees the job either running or ended with its state
                if handle in self._running:
                    self._running.remove(handle)
                handle._finish(state)
                self._ended.append(handle)
            self._changed(handle)

    def run_inline(self, name: str, work: Callable[[JobContext], T], *, cancel_on_lock: bool = True) -> T:
        """Run ``work`` on the calling thread as a listed job, and return its result or raise its
        error. For work a request waits for (a cloud worker): it keeps the request's thread — and
        so what the service tracks per request — while status lists it, shows its progress and a
        lock signals it. A job a lock cancelled ends as ``cancelled`` whatever it raised."""
        handle = JobHandle(name, cancel_on_lock=cancel_on_lock)
        with self._guard:
            self._running.append(handle)
        state: JobState = "failed"
        try:
            handle.state = "running"
            self._changed(handle)
            result = work(JobContext(handle, self._changed))
            state = "cancelled" if handle.cancelled.is_set() else "done"
            return result
        except MemoriesError as exc:
            state = "cancelled" if handle.cancelled.is_set() else "failed"
            handle.failure = exc.code
            raise
        except BaseException as exc:
            handle.failure = type(exc).__name__
            raise
        finally:
            with self._guard:
                if handle in self._running:
                    self._running.remove(handle)
                handle._finish(state)
                self._ended.append(handle)
            self._changed(handle)

    def cancel_on_lock(self) -> None:
        """The vault is locking: every job bound to the unlocked state is asked to stop."""
        with self._guard:
            bound = [handle for handle in self._running if handle.cancel_on_lock]
        for handle in bound:
            handle.cancel()

    def running(self) -> list[JobHandle]:
        with self._guard:
            return list(self._running)

    def snapshot(self) -> list[dict[str, Any]]:
        """Finished jobs (oldest first, bounded), then running ones: names, states, counts, times."""
        with self._guard:
            handles = [*self._ended, *self._running]
        return [handle.snapshot() for handle in handles]

    def save(self) -> list[dict[str, Any]]:
        """The jobs list, to outlive the engine's re-execution at lock (ST-12): what ended,
        and what was still under way, which the re-execution ends (as ``cancelled``)."""
        with self._guard:
            ended = [handle.snapshot() for handle in self._ended]
            stopped = [{**handle.snapshot(), "state": "cancelled"} for handle in self._running]
        return [*ended, *stopped][-(self._ended.maxlen or HISTORY) :]

    def restore(self, saved: Any) -> None:
        """Take back what :meth:`save` gave (in the re-executed engine); malformed entries are skipped."""
        if not isinstance(saved, list):
            return
        now = time.monotonic()
        for entry in saved:
            try:
                handle = JobHandle(str(entry["name"]), cancel_on_lock=True)
                state = entry["state"]
                if state not in ("done", "failed", "cancelled"):
                    continue
                handle.done = int(entry["done"])
                handle.total = None if entry["total"] is None else int(entry["total"])
                handle.started = float(entry["started"])
                handle._began = now - float(entry["seconds"])
            except (KeyError, TypeError, ValueError):
                continue
            handle._finish(state)
            with self._guard:
                self._ended.append(handle)
