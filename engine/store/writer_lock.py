"""Exclusive OS writer lock on the data directory (ST-7)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["WriterLock"]


class WriterLock:
    """Holds an exclusive, non-blocking lock on ``engine.lock`` for the process lifetime.

    The holder writes its PID into the file so that a second engine can name it.
    The OS releases the lock when the holder dies, so kill -9 never leaves a stale lock.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            self._lock(fd)
        except OSError as exc:
            holder = self._read_holder(fd)
            os.close(fd)
            who = f"PID {holder}" if holder else "another process"
            raise MemoriesError(
                "store_in_use",
                f"Another engine ({who}) already holds the data directory {self.path.parent}.",
                pid=holder,
            ) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def adopt(self, fd: int) -> None:
        """Keep the lock a predecessor passed on across ``exec`` (the same process, PID and
        open file: the engine re-executing itself at lock, ST-12). Locking the same open file
        again succeeds at once; anything else is refused as by :meth:`acquire`."""
        try:
            self._lock(fd)
            if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                raise OSError("the inherited descriptor is not this data directory's lock file")
        except OSError as exc:
            os.close(fd)
            raise MemoriesError("store_in_use", "The engine lost its lock on the data directory while restarting.") from exc
        os.set_inheritable(fd, False)
        self._fd = fd

    @property
    def fd(self) -> int | None:
        return self._fd

    @staticmethod
    def _lock(fd: int) -> None:
        if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    @staticmethod
    def _read_holder(fd: int) -> int | None:
        try:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
