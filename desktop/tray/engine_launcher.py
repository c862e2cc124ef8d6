"""Start the engine from the tray (SPEC DT-4 "Start engine"; the tray starts it at launch).

Runs the sibling CLI's ``daemon start`` as a child with a deadline, like the prober, so
a slow start never blocks the icon. The CLI detaches the daemon in its own session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

from desktop.sibling import cli_command, cli_options

__all__ = ["start_engine", "START_DEADLINE"]

START_DEADLINE = 20.0


def start_engine(home: Path, deadline: float = START_DEADLINE, env: dict[str, str] | None = None) -> str | None:
    """Start the engine if it is not running. Returns None on success, else an error code."""
    child = subprocess.Popen(
        cli_command(home, "daemon", "start", "--json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        **cli_options(home, env),
        start_new_session=True,
        close_fds=True,
    )
    try:
        out, _ = child.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.communicate(timeout=5)
        return "timeout"
    if child.returncode == 0:
        return None
    try:
        code = json.loads(out.decode("utf-8"))["error"]["code"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "daemon_unavailable"
    return code if isinstance(code, str) and code.isidentifier() else "daemon_unavailable"
