"""Peer credentials of a Unix-domain-socket connection (SPEC API-2, API-3).

The server trusts the kernel, never the client, about who is on the other end:

* Linux: ``SO_PEERCRED`` returns ``struct ucred {pid_t pid; uid_t uid; gid_t gid;}``
  as captured when the peer called ``connect()``.
* macOS / BSD: ``getpeereid(2)`` (uid, gid); on macOS the pid comes from
  ``LOCAL_PEERPID``. If ``getpeereid`` is unavailable we fall back to ``LOCAL_PEERCRED``
  (``struct xucred``).
* Anything else fails closed with ``permission_denied``.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Protocol

from engine.errors import MemoriesError

__all__ = ["ALSO", "Peer", "peer_of", "caller_namespace", "parent_pid_from_stat", "session_from_stat"]

# Separates the keys of one namespace: elevating it elevates each; it is elevated if any key is
# (engine/service/session.py). Only this module makes such namespaces, never a client.
ALSO = "|"
_UCRED = struct.Struct("3i")  # pid_t, uid_t, gid_t - all 32-bit on Linux
_U32 = 0xFFFFFFFF
_BSD_PLATFORMS = ("darwin", "freebsd", "openbsd", "netbsd", "dragonfly")

# <sys/un.h> on macOS / FreeBSD
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 0x001
_LOCAL_PEERPID = 0x002  # macOS only
_XUCRED = struct.Struct("=IIh2x16I")  # cr_version, cr_uid, cr_ngroups, pad, cr_groups[16]
_XUCRED_VERSION = 0


class _SocketLike(Protocol):
    """What we need from ``socket.socket`` / ``asyncio.trsock.TransportSocket``."""

    def fileno(self) -> int: ...

    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes: ...


@dataclass(frozen=True)
class Peer:
    """The process on the other end of a local connection, as reported by the kernel.

    ``pid`` is ``None`` when the platform cannot report it. On Windows (named pipes) the
    owner-only ACL is the access check and ``uid`` is not meaningful (``-1``).
    """

    pid: int | None
    uid: int
    gid: int | None


def peer_of(sock: _SocketLike) -> Peer:
    """Return the kernel-reported credentials of the peer of a connected AF_UNIX socket.

    Raises ``MemoriesError("permission_denied")`` when credentials cannot be obtained, so
    callers fail closed.
    """
    try:
        if sys.platform.startswith("linux"):
            return _peer_linux(sock)
        if sys.platform.startswith(_BSD_PLATFORMS):
            return _peer_bsd(sock)
    except OSError:
        raise MemoriesError("permission_denied", "The caller's identity could not be verified.") from None
    raise MemoriesError("permission_denied", "This platform cannot verify the caller's identity.")


def _peer_linux(sock: _SocketLike) -> Peer:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    # pid 0 means "not visible from our pid namespace".
    return Peer(pid=pid if pid > 0 else None, uid=uid & _U32, gid=gid & _U32)


def _peer_bsd(sock: _SocketLike) -> Peer:
    uid: int
    gid: int | None
    ids = _getpeereid(sock.fileno())
    if ids is not None:
        uid, gid = ids
    else:
        raw = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED.size)
        fields = _XUCRED.unpack(raw)
        version, uid, ngroups = fields[0], fields[1], fields[2]
        if version != _XUCRED_VERSION:
            raise OSError("unexpected xucred version")
        gid = fields[3] if ngroups > 0 else None
    pid: int | None = None
    if sys.platform == "darwin":
        try:
            (pid_raw,) = struct.unpack("i", sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, 4))
            pid = pid_raw if pid_raw > 0 else None
        except OSError:
            pid = None
    return Peer(pid=pid, uid=uid, gid=gid)


def _getpeereid(fd: int) -> tuple[int, int] | None:
    """``getpeereid(2)`` through ctypes; ``None`` when libc does not provide it."""
    import ctypes  # server-side only; not on the CLI start path

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.getpeereid
    except (OSError, AttributeError):
        return None
    euid = ctypes.c_uint32()
    egid = ctypes.c_uint32()
    if func(fd, ctypes.byref(euid), ctypes.byref(egid)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(euid.value), int(egid.value)


def parent_pid_from_stat(data: bytes) -> int:
    """Parse the parent pid out of the contents of ``/proc/<pid>/stat``.

    The line is ``pid (comm) state ppid ...``. ``comm`` is the executable name and may
    contain spaces and parentheses (``a) b (c``), so we parse after the *last* ``)``.
    Raises ``ValueError`` on anything unexpected.
    """
    close = data.rindex(b")")
    fields = data[close + 1 :].split()
    if len(fields) < 2:
        raise ValueError("truncated stat line")
    return int(fields[1])


def session_from_stat(data: bytes) -> tuple[int, int]:
    """``(session ID, controlling terminal device number)`` from a ``/proc/<pid>/stat`` line
    (fields 6 and 7; 0 for the terminal when the process has none). Raises ``ValueError``."""
    close = data.rindex(b")")
    fields = data[close + 1 :].split()
    if len(fields) < 5:
        raise ValueError("truncated stat line")
    return int(fields[3]), int(fields[4])


def _linux_stat(pid: int, expected_uid: int) -> bytes | None:
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # /proc/<pid> files are owned by the process's effective uid. If the owner is not
        # the peer, the pid was recycled by another user's process (or the process made
        # itself non-dumpable): do not trust what it says.
        if os.fstat(fd).st_uid != expected_uid:
            return None
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _linux_parent_pid(pid: int, expected_uid: int) -> int | None:
    data = _linux_stat(pid, expected_uid)
    return None if data is None else parent_pid_from_stat(data)


def caller_namespace(peer: Peer) -> str:
    """Return the elevation namespace of a local caller (SPEC API-3): ``cli:{pid}`` of its
    parent, plus for a process on a terminal ``|tty{N}:sid{S}`` (its controlling terminal and
    session): elevation of either key counts (engine/service/session.py).

    ``pid`` is the *parent* of the connecting process, not the process itself. Every CLI
    invocation is a new short-lived process, so keying elevation on the peer pid would make
    ``memories sudo`` useless: the next command (``memories export``) is another process.
    Its parent, however, is the user's shell / terminal session, shared by consecutive
    commands typed in that shell and *not* shared with other terminals. This mirrors
    sudo(8)'s per-session (tty / parent) timestamp tickets: elevating in one shell does not
    elevate another shell of the same user.

    Fallbacks, all of which fail *closed* (elevation is then per process, never wider):

    * On Linux the ppid is read from ``/proc/{pid}/stat`` (parsed after the last ``)``
      because the comm field may contain spaces and parentheses). If that fails, if the
      ``/proc`` entry is not owned by the peer's uid (pid recycled), or if the parent is
      pid 0/1 (an orphaned process reparented to init, which would otherwise share one
      namespace with every other orphan), the peer pid itself is used.
    * On other platforms the peer pid itself is used.
    * If the kernel did not report a pid, a random one-off namespace is returned so the
      caller can never inherit anyone's elevation.

    Known limit: like sudo's tickets, a recycled parent pid within the elevation window
    would inherit it; the elevation TTL bounds that window.
    """
    pid = peer.pid
    if pid is None or pid <= 0:
        return f"cli:unknown-{secrets.token_hex(8)}"
    if sys.platform.startswith("linux"):
        try:
            data = _linux_stat(pid, peer.uid)
            session, tty = session_from_stat(data) if data is not None else (0, 0)
            ppid = parent_pid_from_stat(data) if data is not None else None
        except (OSError, ValueError):
            session, tty, ppid = 0, 0, None
        base = f"cli:{ppid}" if ppid is not None and ppid > 1 else f"cli:{pid}"
        if tty != 0 and session > 1:
            # A process on a terminal also answers to its terminal session, as sudo's tty
            # tickets (issue 29): `memories sudo && X=$(memories …)` works (a subshell is another
            # parent, the same session and terminal), another terminal (another session) does not.
            return f"{base}{ALSO}tty{tty}:sid{session}"
        return base
    return f"cli:{pid}"
