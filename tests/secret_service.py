"""A real Secret Service for tests: a private D-Bus session bus with gnome-keyring-daemon.

`memories agent connect` stores tokens through `keyring`, whose Linux backend speaks the
freedesktop Secret Service API over D-Bus. Tests start the real thing (Debian's dbus and
gnome-keyring) on a bus of their own, with the keyring's files under a temporary home, so
nothing touches the user's session and the backend is the one users have.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import require
from tests.session_bus import session_daemon_command

__all__ = ["secret_service", "KEYRING_PASSWORD"]

KEYRING_PASSWORD = "login keyring password for the tests"


def _stop(process: subprocess.Popen[bytes] | None, pid: int | None = None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


@contextmanager
def secret_service(user_home: Path) -> Iterator[dict[str, str]]:
    """Yield the environment variables that point a process at a running, unlocked Secret
    Service whose keyrings live under ``user_home``."""
    require(shutil.which("dbus-daemon") is not None, "dbus-daemon is not installed (Debian package dbus)")
    require(
        shutil.which("gnome-keyring-daemon") is not None,
        "gnome-keyring-daemon is not installed (Debian package gnome-keyring)",
    )
    runtime = user_home / ".runtime"
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {
        "HOME": str(user_home),
        "XDG_DATA_HOME": str(user_home / ".local" / "share"),
        "XDG_CONFIG_HOME": str(user_home / ".config"),
        "XDG_RUNTIME_DIR": str(runtime),
    }
    bus = subprocess.Popen(
        session_daemon_command(user_home / ".bus"),
        stdout=subprocess.PIPE,
        env={**os.environ, **env},
    )
    keyring_pid: int | None = None
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().decode().strip()
        assert address, "dbus-daemon printed no address"
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        # --unlock reads the login keyring's password on stdin and creates that keyring;
        # --daemonize returns once the daemon has claimed its bus name.
        started = subprocess.run(
            ["gnome-keyring-daemon", "--unlock", "--components=secrets", "--daemonize"],
            input=KEYRING_PASSWORD.encode(),
            capture_output=True,
            env={**os.environ, **env},
            timeout=30,
            check=True,
        )
        for line in started.stdout.decode().splitlines():
            if line.startswith("GNOME_KEYRING_PID="):
                keyring_pid = int(line.split("=", 1)[1])
        # Without a printed PID the daemon still exits by itself when its bus goes away.
        yield env
    finally:
        _stop(None, keyring_pid)
        _stop(bus)
