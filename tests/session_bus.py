"""Private D-Bus session buses for tests, listening in the test's own folder.

Debian's session configuration (``/usr/share/dbus-1/session.conf``) listens on
``unix:tmpdir=/tmp``, so every ``dbus-daemon --session`` or ``dbus-run-session`` a test starts
left a ``/tmp/dbus-*`` socket file behind when it was stopped by a signal. A copy of that
configuration whose only change is the listening folder keeps the socket under the test's
temporary folder, which pytest removes.
"""

from __future__ import annotations

import re
from pathlib import Path

SYSTEM_SESSION_CONFIG = Path("/usr/share/dbus-1/session.conf")
_LISTEN = re.compile(r"<listen>[^<]*</listen>")


def session_config(folder: Path) -> Path:
    """A session-bus configuration that listens in ``folder`` (created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    sockets = folder / "dbus-sockets"
    sockets.mkdir(mode=0o700, exist_ok=True)
    text = SYSTEM_SESSION_CONFIG.read_text(encoding="utf-8")
    if not _LISTEN.search(text):
        raise AssertionError(f"{SYSTEM_SESSION_CONFIG} has no <listen> element to replace")
    config = folder / "dbus-session.conf"
    config.write_text(_LISTEN.sub(f"<listen>unix:dir={sockets}</listen>", text, count=1), encoding="utf-8")
    return config


def session_daemon_command(folder: Path) -> list[str]:
    """``dbus-daemon`` for a session bus in the foreground, printing its address on stdout."""
    return ["dbus-daemon", f"--config-file={session_config(folder)}", "--nofork", "--nopidfile", "--print-address=1"]


def run_session_prefix(folder: Path) -> list[str]:
    """``dbus-run-session`` with that configuration, to put before a command."""
    return ["dbus-run-session", f"--config-file={session_config(folder)}", "--"]
