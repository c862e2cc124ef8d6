"""Bounded status prober (SPEC DT-2, DT-3).

The tray and the dashboard (which share this module; the dashboard never imports the
tray) never talk to a possibly hung engine on their own threads: the prober runs the sibling
CLI (``memories status --json``) as a child process with a deadline, kills the child's
whole process group on timeout and reaps it. One probe runs at a time, on one worker
thread, so a hung engine costs one stuck child for at most ``deadline`` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop.sibling import cli_command, cli_options

__all__ = [
    "Probe",
    "ProbeWorker",
    "probe_once",
    "status_command",
    "STATUS_KEYS",
    "ACTIVITY_JOBS",
    "DEFAULT_DEADLINE",
]

DEFAULT_DEADLINE = 2.0
DEFAULT_INTERVAL = 2.0

# The DT-1 projection's keys. Anything else a (future or foreign) engine sends is dropped
# here, so the tray and the dashboard can only ever show counts and types.
STATUS_KEYS = frozenset(
    {
        "state",
        "initialized",
        "locked",
        "vaults",
        "assets",
        "conflicts",
        "connections",
        "providers",
        "sync_queue",
        "cloud_delivery",  # CL-5: devices whose cloud writes are not arriving / not taken (counts)
        "storage",  # issue 32: bytes on disk of the store, its pack files and reserve (sizes any `ls` shows)
        "attention_reasons",  # DT-7: fixed codes (ATTENTION_REASONS below), any other text dropped
        "busy",
        "attention",
    }
)
# Background jobs the desktop may mention (engine/jobs/background.py names them; fixed engine
# names, never user data). Any other name is dropped, so a foreign engine cannot put text of
# its own into the tray or the page through this list.
ACTIVITY_JOBS = frozenset(
    {"verify", "search-build", "search-catch-up", "segmenter-warm", "sync", "cloud-sync", "job-run", "memory-cycle"}
)
MAX_ACTIVITY = 8
# Why the engine asks for attention (engine/service/handlers/session.py names them).
ATTENTION_REASONS = frozenset({"conflicts", "quarantine", "forks", "cloud_delivery", "tickets"})
MAX_COUNT = 10**12
# States the prober itself reports when the engine gave no usable answer.
PROBE_STATES = frozenset({"not_running", "not_responding", "error"})
ENGINE_STATES = frozenset({"uninitialized", "locked", "unlocked"})


@dataclass(frozen=True)
class Probe:
    """One probe outcome: ``state`` plus the sanitized DT-1 projection."""

    state: str
    status: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # a typed error code, never a message from the engine
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "status": dict(self.status), "error": self.error, "seq": self.seq}


def status_command(home: Path) -> list[str]:
    return cli_command(home, "status", "--json")


def sanitize(raw: object) -> Probe:
    """Map the CLI's JSON to a Probe, keeping only DT-1 keys with plain JSON values."""
    if not isinstance(raw, dict):
        return Probe("error", error="invalid_status")
    err = raw.get("error")
    if isinstance(err, dict):
        code = err.get("code")
        if code in ("timeout", "busy"):
            return Probe("not_responding", error=str(code))
        if code == "daemon_unavailable":
            return Probe("not_running")
        return Probe("error", error=code if isinstance(code, str) and code.isidentifier() else "error")
    state = raw.get("state")
    if state == "not_running":
        return Probe("not_running")
    if state not in ENGINE_STATES:
        return Probe("error", error="invalid_status")
    if state == "locked":
        # DT-1: a locked engine says only "locked"; never pass anything else on.
        return Probe("locked", {"state": "locked"})
    status = {k: v for k, v in raw.items() if k in STATUS_KEYS and _plain(v)}
    if "attention_reasons" in status:
        reasons = status["attention_reasons"]
        status["attention_reasons"] = [r for r in reasons if r in ATTENTION_REASONS] if isinstance(reasons, list) else []
    if state == "unlocked":
        status["activity"] = activity(raw.get("jobs"))
    return Probe(str(state), status)


def activity(jobs: object) -> list[dict[str, Any]]:
    """The running background jobs as ``{"job", "done", "total"}``: a known job name and two
    counts (``total`` may be None), nothing else — no times, IDs, paths or failure text (DT-1)."""
    if not isinstance(jobs, list):
        return []
    running: list[dict[str, Any]] = []
    for job in jobs[:64]:
        if not isinstance(job, dict) or job.get("state") != "running":
            continue
        name, done, total = job.get("name"), job.get("done"), job.get("total")
        if not (isinstance(name, str) and name in ACTIVITY_JOBS and _count(done)):
            continue
        if total is not None and not _count(total):
            continue
        running.append({"job": name, "done": done, "total": total})
        if len(running) == MAX_ACTIVITY:
            break
    return running


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _plain(value: object) -> bool:
    """Counts, flags and short type names only: scalars, lists of type names
    (providers) and flat maps of counts (sync queues). Nothing nested deeper."""
    if _scalar(value):
        return True
    if isinstance(value, list):
        return len(value) <= 32 and all(isinstance(v, str) and len(v) <= 64 for v in value)
    if isinstance(value, dict):
        return len(value) <= 16 and all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, bool | int) for k, v in value.items()
        )
    return False


def _scalar(value: object) -> bool:
    return isinstance(value, bool | int) or value is None or (isinstance(value, str) and len(value) <= 64)


def probe_once(home: Path, deadline: float = DEFAULT_DEADLINE, env: dict[str, str] | None = None) -> Probe:
    """Run ``memories status --json`` once; on timeout kill the child's group and reap it."""
    try:
        child = subprocess.Popen(
            status_command(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            **cli_options(home, env),
            # Own process group: the kill below must also take anything the CLI spawned.
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return Probe("error", error="probe_failed")
    try:
        out, _ = child.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        _kill_and_reap(child)
        return Probe("not_responding", error="timeout")
    except BaseException:
        _kill_and_reap(child)
        raise
    try:
        raw = json.loads(out.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Probe("error", error="invalid_status")
    return sanitize(raw)


def _kill_and_reap(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    # SIGKILL cannot be ignored, so this wait is short; it removes the zombie.
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
        child.communicate(timeout=5)


Listener = Callable[[Probe], None]


class ProbeWorker:
    """A daemon thread probing every ``interval`` seconds; ``refresh()`` probes at once."""

    def __init__(
        self,
        home: Path,
        *,
        interval: float = DEFAULT_INTERVAL,
        deadline: float = DEFAULT_DEADLINE,
        env: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.interval = interval
        self.deadline = deadline
        self._env = env
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest = Probe("starting")
        self._seq = 0
        self._listeners: list[Listener] = []
        self._thread = threading.Thread(target=self._run, name="memories-prober", daemon=True)

    @property
    def latest(self) -> Probe:
        with self._lock:
            return self._latest

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def start(self) -> None:
        self._thread.start()

    def refresh(self) -> None:
        self._wake.set()

    def stop(self, join_timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(self.deadline + 6 if join_timeout is None else join_timeout)

    def wait_for(self, predicate: Callable[[Probe], bool], timeout: float) -> Probe | None:
        """Block the *calling* thread until a probe satisfies ``predicate`` (used by tests/bench)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            probe = self.latest
            if predicate(probe):
                return probe
            time.sleep(0.02)
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            probe = probe_once(self.home, self.deadline, self._env)
            with self._lock:
                self._seq += 1
                probe = Probe(probe.state, probe.status, probe.error, self._seq)
                self._latest = probe
                listeners = list(self._listeners)
            for listener in listeners:
                # A failing listener (e.g. a tray backend hiccup) must not stop probing.
                with contextlib.suppress(Exception):
                    listener(probe)
            self._wake.wait(self.interval)
            self._wake.clear()
