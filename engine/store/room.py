"""Room to work on a full disk (FI-2, issue 27).

A disk filled by a large `file add` (or by anything else) used to jam the vault: opening the
store needs SQLite's shared-memory file and a log, a read commits its audit intent first, and
deleting an aborted upload's chunks writes to the log too. So the store keeps a small file of
reserved blocks beside it (``store.db-reserve``, zeros only): when the disk is full, the store
deletes it to open, to record reads and to clean up, and makes it again once there is room.
``free_bytes`` and ``FLOOR`` let an upload check for space before it starts and stop before
the disk is full.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

__all__ = ["FLOOR", "RESERVE_MAX", "free_bytes", "reserve_path", "reserve_size", "ensure_reserve", "release_reserve"]

log = logging.getLogger("memories.store")

# An upload stops while at least this much stays free: room for the upload's own cleanup,
# reads (their audit intents) and everyday writes.
FLOOR = 4 * 1024 * 1024
# The reserve file: at most this, and at most 1/16 of a small filesystem.
RESERVE_MAX = 8 * 1024 * 1024
_PAGE = 4096


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def reserve_path(store: Path) -> Path:
    return store.with_name(store.name + "-reserve")


def reserve_size(directory: Path) -> int:
    st = os.statvfs(directory)
    return max(_PAGE, min(RESERVE_MAX, st.f_blocks * st.f_frsize // 16) // _PAGE * _PAGE)


def ensure_reserve(store: Path) -> bool:
    """Make the reserve file if it is missing and the disk has room for it and ``FLOOR`` more.

    True if the reserve is in place afterwards. Never raises: it is a precaution.
    """
    path = reserve_path(store)
    try:
        size = reserve_size(store.parent)
        if path.exists() and path.stat().st_size >= size:
            return True
        if free_bytes(store.parent) < size + FLOOR:
            return False
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)  # real blocks, not a sparse file
            except OSError:
                zeros = bytes(1 << 20)
                for offset in range(0, size, len(zeros)):
                    os.pwrite(fd, zeros[: size - offset], offset)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        log.warning("the store's reserve file could not be made (%s)", type(exc).__name__)
        return False


def release_reserve(store: Path) -> bool:
    """Delete the reserve file to free its blocks; True if there was one."""
    try:
        reserve_path(store).unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("the store's reserve file could not be removed (%s)", type(exc).__name__)
        return False
    log.warning("the disk is full: the store's reserved space was released")
    return True
