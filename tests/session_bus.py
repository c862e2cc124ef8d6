"""Private D-Bus session buses for tests, on abstract sockets: nothing left on disk.

Debian's session configuration (``/usr/share/dbus-1/session.conf``) listens on
``unix:tmpdir=/tmp``, so every ``dbus-daemon --session`` or ``dbus-run-session`` a test starts
left a ``/tmp/dbus-*`` socket file behind when it was stopped by a signal. A copy of that
configuration whose only change is ``<listen>`` puts each bus on a Linux abstract socket of a
random name instead: it has no file, and it goes with the daemon however the daemon ends. (A
socket file in the test's own folder is no answer: CI's temporary folders are deeper than a
socket path may be long.)
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

SYSTEM_SESSION_CONFIG = Path("/usr/share/dbus-1/session.conf")
_LISTEN = re.compile(r"<listen>[^<]*</listen>")


def session_config(folder: Path) -> Path:
    """A session-bus configuration (written in ``folder``) for a bus of its own name."""
    folder.mkdir(parents=True, exist_ok=True)
    text = SYSTEM_SESSION_CONFIG.read_text(encoding="utf-8")
    if not _LISTEN.search(text):
        raise AssertionError(f"{SYSTEM_SESSION_CONFIG} has no <listen> element to replace")
    name = f"memories-test-bus-{secrets.token_hex(8)}"
    config = folder / f"dbus-session-{name}.conf"
    config.write_text(_LISTEN.sub(f"<listen>unix:abstract={name}</listen>", text, count=1), encoding="utf-8")
    return config


def session_daemon_command(folder: Path) -> list[str]:
    """``dbus-daemon`` for a session bus in the foreground, printing its address on stdout."""
    return ["dbus-daemon", f"--config-file={session_config(folder)}", "--nofork", "--nopidfile", "--print-address=1"]


def run_session_prefix(folder: Path) -> list[str]:
    """``dbus-run-session`` with that configuration, to put before a command."""
    return ["dbus-run-session", f"--config-file={session_config(folder)}", "--"]
