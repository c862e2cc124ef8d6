"""Crypto job runs in flight and recently ended (issue 16): what `memories job status RUN_ID` reads.

A run is a background job (engine/jobs/background.py) plus what its caller waits for: the
plan's digest and kind, the step it is on, the published outputs or the typed error. Run IDs
are random (128 bits) and are the only handle; nothing here is a secret (paths the user
planned, a step count, an error code and its masked sentence). A bounded number of runs
may be in flight, and a bounded number of ended runs is kept so that a waiting CLI — or
one asking after a lock — still learns how its run ended.
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from typing import Any, Literal

from engine.errors import MemoriesError, error_from_wire
from engine.jobs.background import JobContext, JobHandle

__all__ = ["Run", "Runs", "RunState", "MAX_RUNNING", "KEPT"]

MAX_RUNNING = 4
KEPT = 32
RunState = Literal["running", "done", "failed", "cancelled"]


class Run:
    """One crypto job run: progress for the waiting CLI, then its outputs or its error."""

    def __init__(self, run_id: str, digest: str, kind: str, steps: int) -> None:
        self.run_id = run_id
        self.digest = digest
        self.kind = kind
        self.steps = steps
        self.done_steps = 0
        self.state: RunState = "running"
        self.outputs: list[str] = []
        self.error: MemoriesError | None = None
        self.handle: JobHandle | None = None
        self._changed = threading.Condition()

    def progress(self, context: JobContext, done: int, total: int) -> None:
        with self._changed:
            self.done_steps = done
            context.progress(done, total)
            self._changed.notify_all()

    def finish(self, state: RunState, outputs: list[str] | None = None, error: MemoriesError | None = None) -> None:
        with self._changed:
            self.state = state
            self.outputs = outputs or []
            self.error = error
            self._changed.notify_all()

    def wait_change(self, seen_step: int | None, timeout: float) -> None:
        """Return when the run ended, its step differs from ``seen_step``, or ``timeout`` passed."""
        with self._changed:
            self._changed.wait_for(lambda: self.state != "running" or self.done_steps != seen_step, timeout)

    def view(self) -> dict[str, Any]:
        with self._changed:
            view: dict[str, Any] = {
                "run": self.run_id,
                "digest": self.digest,
                "kind": self.kind,
                "state": self.state,
                "steps_done": self.done_steps,  # while running, step steps_done + 1 of steps is under way
                "steps": self.steps,
                "outputs": list(self.outputs),
                "error": self.error.to_wire() if self.error is not None else None,
            }
        return view


class Runs:
    """The runs of one engine, by ID: started, looked up, and waited for on lock or shutdown."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._runs: collections.OrderedDict[str, Run] = collections.OrderedDict()

    def new(self, digest: str, kind: str, steps: int) -> Run:
        with self._guard:
            running = sum(1 for run in self._runs.values() if run.state == "running")
            if running >= MAX_RUNNING:
                raise MemoriesError("busy", f"{MAX_RUNNING} jobs are running; wait for one to end.")
            run = Run(secrets.token_hex(16), digest, kind, steps)
            self._runs[run.run_id] = run
            ended = [key for key, old in self._runs.items() if old.state != "running"]
            for key in ended[: max(0, len(ended) - KEPT)]:
                del self._runs[key]
        return run

    def get(self, run_id: str) -> Run:
        with self._guard:
            run = self._runs.get(run_id)
        if run is None:
            raise MemoriesError("not_found", "No job run has that ID (the engine keeps the last few it ran).")
        return run

    def running(self) -> list[Run]:
        with self._guard:
            return [run for run in self._runs.values() if run.state == "running"]

    def wait_ended(self, timeout: float) -> None:
        """Wait (bounded) until every run's thread has ended: its child killed, its workspace removed."""
        deadline = time.monotonic() + timeout
        with self._guard:
            handles = [run.handle for run in self._runs.values() if run.handle is not None]
        for handle in handles:
            handle.wait(max(0.0, deadline - time.monotonic()))

    def save(self) -> list[dict[str, Any]]:
        """The ended runs, to outlive the engine's re-execution at lock (ST-12): IDs, counts,
        output paths and error sentences, as ``job status`` shows them; no content."""
        with self._guard:
            ended = [run for run in self._runs.values() if run.state != "running"]
        return [run.view() for run in ended[-KEPT:]]

    def restore(self, saved: Any) -> None:
        """Take back what :meth:`save` gave (after the re-execution); malformed entries are skipped."""
        if not isinstance(saved, list):
            return
        for view in saved[-KEPT:]:
            try:
                run = Run(str(view["run"]), str(view["digest"]), str(view["kind"]), int(view["steps"]))
                run.done_steps = int(view["steps_done"])
                state = view["state"]
                if state not in ("done", "failed", "cancelled"):
                    continue
                error = error_from_wire(view["error"]) if view["error"] is not None else None
                run.finish(state, [str(o) for o in view["outputs"]], error)
            except (KeyError, TypeError, ValueError):
                continue
            with self._guard:
                self._runs[run.run_id] = run
