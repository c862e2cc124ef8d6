"""The background-work runtime (engine/jobs/background.py): one way to start, cancel on lock and report.

Real threads, synchronised with events: the tests assert states and counts, never times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from engine.errors import MemoriesError
from engine.jobs.background import BackgroundWork, JobContext

WAIT = 30.0  # a generous bound for a thread to notice an event; never asserted as a duration


def gated(started: threading.Event, release: threading.Event, steps: int = 3) -> Callable[[JobContext], None]:
    """Work that reports progress and, after its first step, waits for ``release`` or its cancel signal."""

    def work(context: JobContext) -> None:
        context.progress(0, steps)
        started.set()
        for step in range(steps):
            if context.cancelled.is_set():
                return
            if step == 1:
                while not release.is_set() and not context.cancelled.is_set():
                    release.wait(0.01)
            context.progress(step + 1)

    return work


def test_progress_and_states_in_the_snapshot() -> None:
    """Issue 16: a running job reports name, state and done/total; a finished one stays listed as done."""
    work = BackgroundWork()
    started, release = threading.Event(), threading.Event()
    handle = work.start("index", gated(started, release))
    assert started.wait(WAIT)
    (running,) = work.snapshot()
    assert running["name"] == "index" and running["state"] == "running" and running["total"] == 3
    assert running["done"] < 3
    release.set()
    assert handle.wait(WAIT)
    (ended,) = work.snapshot()
    assert ended["state"] == "done" and ended["done"] == ended["total"] == 3
    assert set(ended) == {"name", "state", "done", "total", "started", "seconds"}


def test_lock_cancels_bound_jobs_only() -> None:
    """Issue 16: cancel_on_lock stops every job bound to the unlocked state and leaves the others running."""
    work = BackgroundWork()
    bound_started, free_started, release = threading.Event(), threading.Event(), threading.Event()
    bound = work.start("build", gated(bound_started, threading.Event()))
    free = work.start("warm", gated(free_started, release), cancel_on_lock=False)
    assert bound_started.wait(WAIT) and free_started.wait(WAIT)
    work.cancel_on_lock()
    # The bound job is waiting on an event nobody sets: only the cancel signal can end it early.
    assert bound.cancelled.is_set() and not free.cancelled.is_set()
    release.set()
    assert free.wait(WAIT)
    assert free.state == "done"
    assert bound.wait(WAIT)
    assert bound.state == "cancelled"
    states = {job["name"]: job["state"] for job in work.snapshot()}
    assert states == {"build": "cancelled", "warm": "done"}


def test_a_delayed_job_cancelled_while_waiting_never_runs() -> None:
    """A deferred job (the token flush) that a lock cancels before its delay ends does nothing."""
    work = BackgroundWork()
    ran = threading.Event()
    handle = work.start("flush", lambda _: ran.set(), delay=3600.0)
    assert work.snapshot()[0]["state"] == "waiting"
    work.cancel_on_lock()
    assert handle.wait(WAIT)
    assert handle.state == "cancelled" and not ran.is_set()


def test_a_failing_job_is_reported_by_code_or_type_only() -> None:
    """A failure ends as `failed` with the error's code (or exception type), never its text."""
    work = BackgroundWork()

    def typed(_: JobContext) -> None:
        raise MemoriesError("store_corrupt", "secret detail 1234")

    def bug(_: JobContext) -> None:
        raise ValueError("secret detail 5678")

    first, second = work.start("verify", typed), work.start("other", bug)
    assert first.wait(WAIT) and second.wait(WAIT)
    assert (first.state, first.failure) == ("failed", "store_corrupt")
    assert (second.state, second.failure) == ("failed", "ValueError")
    assert "secret detail" not in repr(work.snapshot())
    assert sorted((j["name"], j["failure"]) for j in work.snapshot()) == [("other", "ValueError"), ("verify", "store_corrupt")]


def test_history_is_bounded() -> None:
    """Finished jobs are kept for the status view, but only the latest few."""
    work = BackgroundWork(history=4)
    for number in range(10):
        assert work.start(f"job{number}", lambda _: None).wait(WAIT)
    assert [job["name"] for job in work.snapshot()] == ["job6", "job7", "job8", "job9"]


def test_run_inline_lists_work_on_the_calling_thread_and_a_lock_marks_it_cancelled() -> None:
    """Issue 16: work a request waits for runs on the request's own thread, listed while it runs
    (with progress), returns its result or raises its error; one a lock signalled ends cancelled."""
    work = BackgroundWork()
    seen: dict[str, object] = {}

    def counted(context: JobContext) -> str:
        context.progress(1, 3)
        seen["thread"] = threading.current_thread()
        (listed,) = work.snapshot()
        seen["listed"] = (listed["name"], listed["state"], listed["done"], listed["total"])
        return "result"

    assert work.run_inline("cloud-sync", counted) == "result"
    assert seen["thread"] is threading.current_thread()
    assert seen["listed"] == ("cloud-sync", "running", 1, 3)
    assert work.snapshot()[-1]["state"] == "done"

    def locked_meanwhile(context: JobContext) -> str:
        work.cancel_on_lock()  # the vault locks while the worker runs …
        assert context.cancelled.is_set()
        raise MemoriesError("locked")  # … and its generation check refuses to acknowledge

    try:
        work.run_inline("cloud-sync", locked_meanwhile)
    except MemoriesError as exc:
        assert exc.code == "locked"
    else:
        raise AssertionError("the error was swallowed")
    assert work.snapshot()[-1]["state"] == "cancelled"

    def broken(context: JobContext) -> str:
        raise MemoriesError("cloud_unreachable")

    try:
        work.run_inline("cloud-sync", broken)
    except MemoriesError as exc:
        assert exc.code == "cloud_unreachable"
    assert work.snapshot()[-1]["state"] == "failed"
    assert work.running() == []
