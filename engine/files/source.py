"""The file a local client opened, read by the engine itself (FI-1, issue 32).

Sending a file's bytes over the socket cost, for every byte, a read, a hash and a send in the CLI
and a receive in the engine (for 256 MiB, ~0.3 s of the CLI's CPU, now ~0.07 s). When
the CLI runs on this machine it may instead offer the descriptor of the file it opened; the
engine opens that same open file through ``/proc/PID/fd/N`` (Linux), where PID is the
connecting process as the kernel reports it (``SO_PEERCRED``), never a number from the request.

Why this grants nothing new: the socket serves only our own user; the kernel opens the
descriptor only for a process allowed to read the client's (same user, ptrace read access)
and checks the file's permissions against the engine's credentials as for any open, so the
engine reads nothing that user could not. It reads only what the client itself holds open
(a process cannot name a file it has no access to, e.g. from a sandbox that shares the
socket), and only if the file is the one the client saw (device, inode, size, and modification
and change times all equal): anything else, and every failure, leaves the client to send the
bytes as before. The file's times are compared again when the last chunk was read (FI-2).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Sequence

__all__ = ["identity_of", "open_client_file"]


def identity_of(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """What identifies a file's content without reading it (the CLI's FI-2 check uses the same)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def open_client_file(pid: int | None, fd: int, identity: Sequence[int], size: int) -> int | None:
    """A descriptor of the regular file the process ``pid`` holds open as ``fd``, or None.

    None (the client then sends the bytes) when this is not Linux, the kernel did not name the
    peer, the descriptor cannot be opened, or it is not the regular file of ``identity`` and
    ``size``. The file is checked before it is opened (a FIFO or device is never opened) and
    again through the new descriptor.
    """
    if pid is None or not sys.platform.startswith("linux"):
        return None
    expected = tuple(identity)
    if len(expected) != 5 or expected[2] != size:
        return None
    link = f"/proc/{pid}/fd/{fd}"
    try:
        if identity_of(os.stat(link)) != expected:
            return None
        source = os.open(link, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(source)
        if stat.S_ISREG(info.st_mode) and identity_of(info) == expected:
            os.set_blocking(source, True)
            return source
    except OSError:
        pass
    with contextlib.suppress(OSError):
        os.close(source)
    return None
