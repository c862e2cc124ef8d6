"""API-3, issue 29: elevation belongs to the terminal session, as sudo's tty tickets.

Each case runs a real shell on a fresh pseudo-terminal (its own session, the terminal its
controlling terminal). Inside it, a process asks the kernel who its socket peer is (itself,
through a socketpair) and prints the elevation namespace the engine would give it: the same for
a command and for one in a ``$( … )`` subshell of the same terminal (another parent process),
different for another terminal. Without a terminal the parent-process rule still holds
(tests/ipc/test_ipc_peer.py).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from engine.ipc.peer import session_from_stat
from engine.service.session import Session

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import socket; from engine.ipc.peer import caller_namespace, peer_of; "
    "a, b = socket.socketpair(); print(caller_namespace(peer_of(b)))"
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and TIOCSCTTY are Linux here")


def _on_terminal(script: str) -> list[str]:
    master, slave = os.openpty()

    def take_terminal() -> None:  # runs in the child after setsid (start_new_session)
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        ["sh", "-c", script],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        preexec_fn=take_terminal,
    )
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: every process holding the terminal ended
            break
        if not data:
            break
        out += data
    os.close(master)
    assert proc.wait(timeout=60) == 0, out
    return [line.strip() for line in out.decode().splitlines() if line.strip()]


@linux_only
def test_a_subshell_of_the_same_terminal_shares_elevation_another_terminal_does_not() -> None:
    py = sys.executable
    # "; true" keeps the shell from exec-ing the probe in place of the subshell: a real subshell.
    first = _on_terminal(f"'{py}' -c '{PROBE}'; echo \"$('{py}' -c '{PROBE}'; true)\"")
    assert len(first) == 2 and all("|tty" in ns for ns in first), first
    other = _on_terminal(f"'{py}' -c '{PROBE}'")
    # What the engine's session makes of them: `sudo` in the first command elevates the subshell
    # (another parent, the same terminal session), not the other terminal.
    session = Session(idle_seconds=900, sudo_seconds=300, max_failures_per_minute=5)
    session.elevate(first[0])
    assert first[0] != first[1] and session.is_elevated(first[1])
    assert not session.is_elevated(other[0])
    # Without a terminal nothing changes: one key, the parent process.
    assert not session.is_elevated("cli:4242") and "|" not in _off_terminal()


def _off_terminal() -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_session_fields_parse_after_the_last_paren() -> None:
    line = b"4242 (a) b (c) S 1 4242 4242 34817 4242 4194560"
    assert session_from_stat(line) == (4242, 34817)
    with pytest.raises(ValueError):
        session_from_stat(b"4242 (x) S 1")
