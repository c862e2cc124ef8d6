"""Peer credentials and the cli:{pid} elevation namespace (SPEC API-2, API-3)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.ipc.peer import Peer, caller_namespace, parent_pid_from_stat, peer_of, session_from_stat

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and SO_PEERCRED")


def test_peer_of_socketpair_reports_this_process() -> None:
    """API-2: SO_PEERCRED / getpeereid gives the kernel's view of the peer."""
    a, b = socket.socketpair()
    with a, b:
        peer = peer_of(b)
    assert peer.uid == os.getuid()
    if sys.platform.startswith("linux"):
        assert peer == Peer(pid=os.getpid(), uid=os.getuid(), gid=os.getgid())


def test_peer_is_frozen() -> None:
    peer = Peer(pid=1, uid=2, gid=3)
    with pytest.raises(AttributeError):
        peer.uid = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("line", "ppid"),
    [
        (b"123 (bash) S 456 123 123 34816 0 4194304\n", 456),
        (b"123 (a) b (c) S 789 1 1 0\n", 789),
        (b"123 (x) S 99 (y) R 321 1 1 0\n", 321),
        (b"123 () S 7 1 1\n", 7),
    ],
)
def test_parent_pid_parsing_uses_last_paren(line: bytes, ppid: int) -> None:
    """API-3: comm may contain spaces and parentheses; parse after the last ')'."""
    assert parent_pid_from_stat(line) == ppid


@pytest.mark.parametrize("line", [b"", b"123 (bash", b"123 (bash) S", b"123 (bash) S x"])
def test_parent_pid_parsing_rejects_garbage(line: bytes) -> None:
    with pytest.raises(ValueError):
        parent_pid_from_stat(line)


@linux_only
def test_namespace_is_parent_of_peer() -> None:
    """API-3: a local caller's namespace is cli:{parent pid of the peer} (its shell)."""
    a, b = socket.socketpair()
    with a, b:
        peer = peer_of(b)
    ppid = os.getppid()
    expected = f"cli:{ppid}" if ppid > 1 else f"cli:{os.getpid()}"
    with open(f"/proc/{os.getpid()}/stat", "rb") as fh:
        session, tty = session_from_stat(fh.read())
    if tty != 0 and session > 1:  # run from a terminal: also its session (tests/ipc/test_elevation_terminal.py)
        expected += f"|tty{tty}:sid{session}"
    assert caller_namespace(peer) == expected


@linux_only
def test_namespace_with_hostile_comm(tmp_path: Path) -> None:
    """API-3: a process named like a fake stat line still maps to its real parent."""
    evil = tmp_path / "x) S 99 (y"
    evil.symlink_to(os.path.realpath(sys.executable))
    child = subprocess.Popen([str(evil), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            assert b"(x) S 99 (y)" in fh.read()
        peer = Peer(pid=child.pid, uid=os.getuid(), gid=None)
        assert caller_namespace(peer) == f"cli:{os.getpid()}"
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(5)


@linux_only
def test_namespace_fallbacks_fail_closed() -> None:
    """API-3: unreadable /proc, foreign owner, orphan or unknown pid never widen sharing."""
    # Owner mismatch (pid recycled by another user): fall back to the peer pid itself.
    assert caller_namespace(Peer(pid=os.getpid(), uid=os.getuid() + 4242, gid=None)) == f"cli:{os.getpid()}"
    # A pid that does not exist: fall back to the pid.
    assert caller_namespace(Peer(pid=2**22 + 12345, uid=os.getuid(), gid=None)) == f"cli:{2**22 + 12345}"
    # Parent 0/1 (init or orphan): the peer pid itself, not a namespace shared by orphans.
    assert caller_namespace(Peer(pid=1, uid=0, gid=0)) == "cli:1"
    # No pid at all: a one-off namespace that nobody else can share.
    first = caller_namespace(Peer(pid=None, uid=os.getuid(), gid=None))
    second = caller_namespace(Peer(pid=None, uid=os.getuid(), gid=None))
    assert first.startswith("cli:unknown-") and first != second
