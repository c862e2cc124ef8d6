"""Issue 31, DT-9: the tray locks the vault when the screen locks or the machine suspends.

A real tray (xorg backend under Xvfb with trayer) listens on two D-Bus buses this test owns:
a session bus (``DBUS_SESSION_BUS_ADDRESS``) for ScreenSaver ``ActiveChanged`` and a second
dbus-daemon standing in for the system bus (``DBUS_SYSTEM_BUS_ADDRESS``), on which the test
sends logind's ``PrepareForSleep`` and ``Session.Lock`` exactly as logind would (same path,
interface, member and signature; only the sender's well-known name differs, which the tray
does not check). The setting is read when a signal arrives, so `memories config set` counts
without restarting the tray.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop.status import TrayState
from desktop.tray.screen_lock import lock_reason
from tests.desktop.support import XSession, stop_process
from tests.desktop.test_tray_x11 import Tray
from tests.helpers import Cli, require
from tests.session_bus import session_daemon_command

LOGIN1 = "/org/freedesktop/login1"


@pytest.fixture
def buses(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(session, system): two private dbus-daemons, stopped after the test."""
    require(shutil.which("dbus-daemon") is not None, "dbus-daemon (apt: dbus)")
    procs: list[subprocess.Popen[str]] = []
    addresses: list[str] = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                session_daemon_command(tmp_path / f"bus-{len(procs)}"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            address = proc.stdout.readline().strip()
            assert address, "dbus-daemon printed no address"
            addresses.append(address)
        yield addresses[0], addresses[1]
    finally:
        for proc in procs:
            stop_process(proc)


def _emit(address: str, path: str, interface: str, member: str, signature: str | None = None, body: tuple[Any, ...] = ()) -> None:
    """Send one signal on the bus at ``address``, and wait until the bus has routed it (a call
    answered after it on the same connection)."""
    from jeepney import DBusAddress, new_signal
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    with open_dbus_connection(bus=address) as conn:
        conn.send(new_signal(DBusAddress(path, interface=interface), member, signature, body))
        conn.send_and_get_reply(message_bus.GetId(), timeout=30)


def _wait_status(cli: Cli, state: str, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < end:
        status = cli.ok("status")
        if status.get("state") == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"the vault never became {state}: {status}")


def test_lock_reasons() -> None:
    """DT-9: which signals mean "lock now" (a resume or a screen coming back does not)."""
    assert lock_reason("org.freedesktop.login1.Manager", "PrepareForSleep", (True,)) == "the machine is suspending"
    assert lock_reason("org.freedesktop.login1.Manager", "PrepareForSleep", (False,)) is None
    assert lock_reason("org.freedesktop.login1.Session", "Lock", ()) == "the session locked"
    assert lock_reason("org.freedesktop.login1.Session", "Unlock", ()) is None
    assert lock_reason("org.freedesktop.ScreenSaver", "ActiveChanged", (True,)) == "the screen locked"
    assert lock_reason("org.gnome.ScreenSaver", "ActiveChanged", (True,)) == "the screen locked"
    assert lock_reason("org.gnome.ScreenSaver", "ActiveChanged", (False,)) is None
    assert lock_reason("org.example.Other", "ActiveChanged", (True,)) is None


def test_tray_locks_on_screen_lock_and_suspend(vault: Cli, xsession: XSession, tmp_path: Path, buses: tuple[str, str]) -> None:
    """DT-9: with lock_on_screen_lock on (the default), the tray locks the vault on the session
    bus's ScreenSaver ActiveChanged(true), on logind's PrepareForSleep(true) and on a logind
    session's Lock; with it off (set by `memories config set`, no restart) the same signals
    leave the vault unlocked, and a resume (PrepareForSleep(false)) never locks."""
    session_bus, system_bus = buses
    tray = Tray(vault, xsession, tmp_path, "xorg", bus=session_bus, extra_env={"DBUS_SYSTEM_BUS_ADDRESS": system_bus})
    try:
        tray.wait_icon(TrayState.UNLOCKED)
        tray.wait_output(r"listening for screen lock on the system bus")
        tray.wait_output(r"listening for screen lock on the session bus")

        # Off: the signals are heard and ignored. Both are on one connection, so the resume
        # was handled before the Lock's line appears.
        vault.ok("config", "set", "lock_on_screen_lock", "off")
        _emit(system_bus, LOGIN1, "org.freedesktop.login1.Manager", "PrepareForSleep", "b", (True,))
        _emit(system_bus, LOGIN1 + "/session/_32", "org.freedesktop.login1.Session", "Lock")
        tray.wait_output(r"the session locked; lock_on_screen_lock is off")
        tray.wait_output(r"the machine is suspending; lock_on_screen_lock is off")
        assert vault.ok("status")["state"] == "unlocked"

        vault.ok("config", "set", "lock_on_screen_lock", "on")
        _emit(system_bus, LOGIN1, "org.freedesktop.login1.Manager", "PrepareForSleep", "b", (False,))
        _emit(session_bus, "/org/freedesktop/ScreenSaver", "org.freedesktop.ScreenSaver", "ActiveChanged", "b", (True,))
        tray.wait_output(r"the screen locked; locking the vault")
        _wait_status(vault, "locked")

        vault.unlock()
        _emit(system_bus, LOGIN1, "org.freedesktop.login1.Manager", "PrepareForSleep", "b", (True,))
        tray.wait_output(r"the machine is suspending; locking the vault")
        _wait_status(vault, "locked")
        # The resume sent earlier on the same bus was handled before this signal: it locked nothing.
        assert tray.output().count("the machine is suspending; locking the vault") == 1, tray.output()

        vault.unlock()
        _emit(system_bus, LOGIN1 + "/session/_32", "org.freedesktop.login1.Session", "Lock")
        tray.wait_output(r"the session locked; locking the vault")
        _wait_status(vault, "locked")
        tray.wait_icon(TrayState.LOCKED)
    finally:
        tray.stop()
