"""The tray's fallback transcript capture (AG-11): `memories transcript watch` as a supervised child.

A connected client's own hooks import its sessions as they happen (`agent connect`); this
watcher catches what the hooks miss (a client started without them, a hook that failed).
It runs only while the vault is unlocked and only when it is wanted:

* the setting ``transcript_watcher`` (config.toml ``[desktop]``, `memories config set`):
  ``"on"`` always, ``"off"`` never, ``"auto"`` (the default) when at least one agent was connected with transcripts, i.e. an
  ``agents/NAME.json`` manifest written by `agent connect` says ``transcripts: true`` with a
  scope other than ``"none"``. Both are read on every probe, so a connect, a disconnect or
  a config edit counts without restarting the tray.

The child is the sibling CLI (desktop/sibling.py), isolated like every Python child (ST-11,
engine/launch.py), in its own process group (its whole group is stopped), with no console
window and its output discarded (nothing per turn). One supervisor thread starts, watches
and stops it, so there is never more than one; a child that dies while still wanted is
started again after a growing pause (1 s doubling to 60 s; reset once one ran a minute).
A tray killed outright (no chance to stop it) leaves no orphan: ``--parent-pid``
(the tray's) makes the watcher end within a round once its parent is another.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from desktop.sibling import cli_command, cli_options
from engine.agent_manifests import manifests
from engine.config import Paths
from engine.errors import MemoriesError
from engine.settings import read_settings

__all__ = ["TranscriptWatcher", "watcher_wanted", "why_not_watching"]

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
HEALTHY_RUN = 60.0  # a child that ran this long resets the backoff
STOP_GRACE = 5.0  # SIGTERM, then SIGKILL: watch ends a round and exits on SIGTERM
TICK = 0.5  # how often the supervisor looks at its child when nothing wakes it
UNKNOWN_STATES = frozenset({"not_responding", "error"})


def why_not_watching(home: Path) -> str | None:
    """None when the tray should run the watcher now (the vault's state aside), else why not."""
    mode = read_settings(Paths(home).config_file)["transcript_watcher"]
    if mode != "auto":
        return None if mode == "on" else "transcript_watcher is off"
    try:
        connected = manifests(home)
    except MemoriesError:  # a damaged manifest: `agent list` names it; the tray stays quiet
        connected = []
    if any(m.transcripts and m.transcripts_scope != "none" for m in connected):
        return None
    return "no agent is connected with transcripts"


def watcher_wanted(home: Path) -> bool:
    return why_not_watching(home) is None


def _spawn_options() -> dict[str, Any]:
    """Own process group, and on Windows no console window."""
    if sys.platform == "win32":
        flags = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0) | getattr(subprocess, "CREATE_NO_WINDOW", 0)
        return {"creationflags": flags}
    return {"start_new_session": True}


class TranscriptWatcher:
    """Call :meth:`update` with each probe's state; :meth:`close` on quit."""

    def __init__(
        self,
        home: Path,
        say: Callable[[str], None],
        verbose: bool = False,
        interval: float = 2.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.home, self._say, self.verbose, self.interval, self.env = home, say, verbose, interval, env
        self._unlocked = False
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._backoff = FIRST_BACKOFF
        self._next_start = 0.0

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def update(self, state: str) -> None:
        """The vault's state as the latest probe saw it (any thread; never blocks). An engine
        that did not answer in time (busy importing, a loaded machine) changes nothing."""
        if state in UNKNOWN_STATES:
            return
        self._unlocked = state == "unlocked"
        if self._closed.is_set():
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._supervise, name="memories-transcript-watcher", daemon=True)
            self._thread.start()
        self._wake.set()

    def close(self, timeout: float = STOP_GRACE + 5) -> None:
        """Stop the child and the supervisor (quit, logout); waits for the child to be gone."""
        self._closed.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._stop_child("the tray is quitting")

    # -- the supervisor thread ----------------------------------------------------------
    def _supervise(self) -> None:
        while not self._closed.is_set():
            self._wake.clear()
            why_not = why_not_watching(self.home) if self._unlocked else "the vault is locked"
            child = self._child
            if child is not None and child.poll() is not None:
                self._child = None
                ran = time.monotonic() - self._started_at
                self._backoff = FIRST_BACKOFF if ran >= HEALTHY_RUN else min(self._backoff * 2, MAX_BACKOFF)
                self._next_start = time.monotonic() + self._backoff
                self._say(f"memories tray: transcript watcher ended (exit {child.returncode}); restarting in {self._backoff:g} s")
            if why_not is not None:
                self._stop_child(why_not)
            elif self._child is None and time.monotonic() >= self._next_start:
                self._start_child()
            self._wake.wait(TICK)

    def _start_child(self) -> None:
        command = cli_command(
            self.home, "transcript", "watch", "--json", "--parent-pid", str(os.getpid()), "--interval", f"{self.interval:g}"
        )
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                **cli_options(self.home, self.env),
                **_spawn_options(),
                close_fds=True,
            )
        except OSError as exc:
            self._backoff = min(self._backoff * 2, MAX_BACKOFF)
            self._next_start = time.monotonic() + self._backoff
            self._say(f"memories tray: could not start the transcript watcher ({type(exc).__name__})")
            return
        self._child, self._started_at = child, time.monotonic()
        if self.verbose:
            self._say(f"memories tray: transcript watcher started (pid {child.pid})")

    def _stop_child(self, reason: str) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.poll() is None:
            self._signal(child, signal.SIGTERM)
            try:
                child.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self._signal(child, getattr(signal, "SIGKILL", signal.SIGTERM))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(5)
        self._next_start = 0.0  # a deliberate stop: the next start need not wait
        if self.verbose:
            self._say(f"memories tray: transcript watcher stopped ({reason})")

    @staticmethod
    def _signal(child: subprocess.Popen[bytes], signum: int) -> None:
        """The whole group where there is one (what the CLI may have started goes too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if sys.platform == "win32":
                child.terminate()
            else:
                os.killpg(child.pid, signum)
