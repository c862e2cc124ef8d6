"""Run a CLI command on a real pseudo-terminal, as a user at a shell would (prompts included)."""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

__all__ = ["run_in_terminal"]


def run_in_terminal(
    command: Sequence[str], answers: Sequence[tuple[str, str]], env: Mapping[str, str], timeout: float = 60
) -> tuple[int, str]:
    """Run ``command`` with a fresh pty as its controlling terminal (so ``getpass`` prompts on it).

    ``answers`` are (prompt, typed line) pairs in the order the prompts are expected; each line
    is typed once its prompt shows. Returns (exit code, everything printed on the terminal)."""
    main_fd, sub_fd = os.openpty()

    def own_terminal() -> None:  # runs in the child after setsid: make the pty its controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        list(command),
        stdin=sub_fd,
        stdout=sub_fd,
        stderr=sub_fd,
        env=dict(env),
        start_new_session=True,
        # The one way to give a child a controlling terminal from Python 3.11's subprocess.
        preexec_fn=own_terminal,
    )
    os.close(sub_fd)
    output = b""
    pending = list(answers)
    seen = 0  # output already searched for a prompt
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(main_fd, 4096)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not chunk:
                    break
                output += chunk
                text = output.decode(errors="replace")
                if pending and pending[0][0] in text[seen:]:
                    prompt, line = pending.pop(0)
                    seen = text.index(prompt, seen) + len(prompt)
                    os.write(main_fd, line.encode() + b"\n")
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
        return proc.wait(10), output.decode(errors="replace")
    finally:
        os.close(main_fd)
