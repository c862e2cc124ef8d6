"""Session state: lock generation, idle auto-lock, elevation, password throttling (ST-10, API-3).

The password budget (``max_failures_per_minute``) is consumed *before* the KDF runs: an
attempt reserves a slot under a lock, so concurrent wrong passwords cannot all pass the
check while the first KDF is still running. A success refunds its slot; a failure keeps it
for a minute. Slots are written to a small file in the data home (0600, timestamps only,
overwritten in place so that a full disk cannot stop it) before the KDF starts, so neither a
daemon restart, a crash mid-KDF nor a full disk resets the budget.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["Session", "PASSWORD_WINDOW_SECONDS", "FRESH_SECONDS"]

log = logging.getLogger("memories.engine")

PASSWORD_WINDOW_SECONDS = 60.0
# How long after `memories sudo` a re-prompt item may be read (once): long enough for
# `memories sudo && memories login copy-password ID`, short enough to mean "just now".
FRESH_SECONDS = 60.0
# The budget file's size (a multiple of it for a very large budget): one filesystem block.
_SLOTS_FILE_BYTES = 4096


@dataclass
class Session:
    idle_seconds: float
    sudo_seconds: float
    max_failures_per_minute: int
    # Where spent password slots persist across restarts; None keeps them in memory only.
    failures_file: Path | None = None
    generation: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    _elevated: dict[str, float] = field(default_factory=dict)
    # A fresh elevation, spent by the first read of a re-prompt item (Bitwarden's "master
    # password re-prompt"): such an item asks for the password before every read.
    _fresh: dict[str, float] = field(default_factory=dict)
    # Wall-clock times (they must survive a restart) of failed and in-flight attempts.
    _slots: list[float] = field(default_factory=list)
    _budget_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Legacy two-call API (check_password_budget / record_password_failure): the slot a
    # thread reserved, refunded by ``settle_thread_attempt`` unless it was recorded as failed.
    _thread: threading.local = field(default_factory=threading.local, repr=False)

    def __post_init__(self) -> None:
        self._slots = self._read_slots()

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def idle_expired(self) -> bool:
        return time.monotonic() - self.last_activity >= self.idle_seconds

    def bump_generation(self) -> None:
        """Locking: in-flight work started under the old generation is dropped before delivery."""
        self.generation += 1
        self._elevated.clear()
        self._fresh.clear()

    # -- elevation ----------------------------------------------------------------
    def elevate(self, namespace: str) -> float:
        """Elevate every key of ``namespace`` (a caller on a terminal has two: its parent
        process and its terminal session, engine/ipc/peer.py)."""
        now = time.monotonic()
        expires = now + self.sudo_seconds
        for key in namespace.split("|"):
            self._elevated[key] = expires
            self._fresh[key] = now + min(self.sudo_seconds, FRESH_SECONDS)
        return self.sudo_seconds

    def take_fresh(self, namespace: str) -> bool:
        """Spend the caller's fresh elevation (every key of it): True once per `sudo`, within FRESH_SECONDS."""
        now = time.monotonic()
        fresh = [self._fresh.pop(key, 0.0) for key in namespace.split("|")]
        return any(expires > now for expires in fresh) and self.is_elevated(namespace)

    def is_elevated(self, namespace: str) -> bool:
        return any(self._key_elevated(key) for key in namespace.split("|"))

    def _key_elevated(self, key: str) -> bool:
        expires = self._elevated.get(key)
        if expires is None:
            return False
        if time.monotonic() >= expires:
            del self._elevated[key]
            return False
        return True

    # -- password throttling ------------------------------------------------------
    @contextlib.contextmanager
    def password_attempt(self) -> Iterator[None]:
        """Reserve a budget slot before the KDF; refund it if the block succeeds.

        A ``MemoriesError`` from the block (``wrong_password``) keeps the slot spent; any
        other exit (success, or an engine failure that proved nothing about the password)
        refunds it.
        """
        slot = self._reserve()
        failed = False
        try:
            yield
        except MemoriesError as exc:
            failed = exc.code == "wrong_password"
            raise
        finally:
            if not failed:
                self._refund(slot)

    def check_password_budget(self) -> None:
        """Reserve a slot for this thread's attempt (pair with ``record_password_failure``).

        Prefer ``password_attempt``. The dispatcher calls ``settle_thread_attempt`` after every
        request, which refunds a slot that was not recorded as a failure.
        """
        self.settle_thread_attempt()
        self._thread.slot = self._reserve()

    def record_password_failure(self) -> None:
        """The attempt this thread reserved failed: its slot stays spent for a minute."""
        if getattr(self._thread, "slot", None) is not None:
            self._thread.slot = None
            return
        with self._budget_lock:  # no reservation (a caller that skipped the check): still count it
            self._slots.append(time.time())
            self._write_slots()

    def settle_thread_attempt(self) -> None:
        slot = getattr(self._thread, "slot", None)
        if slot is not None:
            self._thread.slot = None
            self._refund(slot)

    def _reserve(self) -> float:
        with self._budget_lock:
            now = time.time()
            self._slots = [min(t, now) for t in self._slots if now - t < PASSWORD_WINDOW_SECONDS]
            if len(self._slots) >= self.max_failures_per_minute:
                raise MemoriesError("rate_limited")
            self._slots.append(now)
            self._write_slots()
            return now

    def _refund(self, slot: float) -> None:
        with self._budget_lock:
            with contextlib.suppress(ValueError):
                self._slots.remove(slot)
            self._write_slots()

    # -- persistence ----------------------------------------------------------------
    def _read_slots(self) -> list[float]:
        if self.failures_file is None:
            return []
        try:
            data = json.loads(self.failures_file.read_text("ascii"))
            slots = data["slots"]
            if not isinstance(slots, list) or not all(isinstance(t, (int, float)) for t in slots):
                raise ValueError("slots")
            return [float(t) for t in slots]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError):
            # Unreadable: assume the budget is spent for this minute rather than reset it.
            log.warning("password budget file unreadable; treating this minute's budget as spent")
            return [time.time()] * self.max_failures_per_minute

    def _write_slots(self) -> None:
        """Save the slots without needing new disk space (FI-2): a full disk must not reset the budget.

        The file is a fixed ``_SLOTS_FILE_BYTES`` of JSON padded with spaces, overwritten in
        place and synced, so after its first write it never needs another block (a
        temp-file-and-rename needed a new one each time, which a full disk refused). A write
        torn by a crash leaves a file that does not parse: it is read as a spent budget.
        Called under the lock.
        """
        path = self.failures_file
        if path is None:
            return
        data = json.dumps({"v": 1, "slots": self._slots}).encode("ascii")
        padded = data.ljust(-(-len(data) // _SLOTS_FILE_BYTES) * _SLOTS_FILE_BYTES, b" ")
        try:
            created = not path.exists()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                view, offset = memoryview(padded), 0
                while offset < len(view):
                    offset += os.pwrite(fd, view[offset:], offset)
                if os.fstat(fd).st_size > len(padded):  # an older, longer file: only ever shrinks
                    os.ftruncate(fd, len(padded))
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(path.parent)
        except OSError as exc:
            # The budget still holds in memory; only a restart before the next write could reset it.
            log.warning("password budget could not be saved (%s)", type(exc).__name__)


def _fsync_dir(directory: Path) -> None:
    if os.name != "posix":  # pragma: no cover - directory fsync is POSIX-only
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
