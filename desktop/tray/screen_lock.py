"""Lock the vault when the screen locks or the machine suspends (DT-9), on Linux over D-Bus.

Two listeners, one per bus, each on its own daemon thread (jeepney, blocking I/O):
- the system bus: logind's ``org.freedesktop.login1.Manager.PrepareForSleep(true)`` (suspend or
  hibernate is about to happen) and ``org.freedesktop.login1.Session.Lock`` (``loginctl
  lock-session``, and what desktops send when they lock);
- the session bus: ``ActiveChanged(true)`` of ``org.freedesktop.ScreenSaver`` (KDE, XFCE, the
  freedesktop name) and ``org.gnome.ScreenSaver`` (GNOME), i.e. the screen saver or lock
  screen came on.

The listeners always run; the setting (``lock_on_screen_lock`` in config.toml, engine/settings.py)
is read when a signal arrives, so `memories config set` or the Settings page take effect at
once without re-subscribing. Any client on a bus may send such a signal: the worst it can do is
lock the vault, which the same user can do with `memories lock` anyway, so senders are not
checked. macOS (distributed notifications) and Windows (WTS session notifications) are not
heard yet; docs/desktop.md says so.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ScreenLockWatcher", "lock_reason", "RULES"]

# (bus, interface, member, path, path_namespace): what each listener subscribes to.
RULES: dict[str, tuple[tuple[str, str, str | None, str | None], ...]] = {
    "SYSTEM": (
        ("org.freedesktop.login1.Manager", "PrepareForSleep", "/org/freedesktop/login1", None),
        ("org.freedesktop.login1.Session", "Lock", None, "/org/freedesktop/login1/session"),
    ),
    "SESSION": (
        ("org.freedesktop.ScreenSaver", "ActiveChanged", None, None),
        ("org.gnome.ScreenSaver", "ActiveChanged", None, None),
    ),
}
_CONNECT_TIMEOUT = 10.0


def lock_reason(interface: str | None, member: str | None, body: tuple[Any, ...]) -> str | None:
    """What a signal means for the vault: a reason to lock, or None (a resume, a screen unlocked)."""
    if member == "PrepareForSleep" and interface == "org.freedesktop.login1.Manager":
        return "the machine is suspending" if body[:1] == (True,) else None
    if member == "Lock" and interface == "org.freedesktop.login1.Session":
        return "the session locked"
    if member == "ActiveChanged" and interface in ("org.freedesktop.ScreenSaver", "org.gnome.ScreenSaver"):
        return "the screen locked" if body[:1] == (True,) else None
    return None


class ScreenLockWatcher:
    """Calls ``on_lock(reason)`` from a listener thread for each signal that means "lock now"."""

    def __init__(self, on_lock: Callable[[str], None], say: Callable[[str], None], verbose: bool = False) -> None:
        self.on_lock = on_lock
        self.say = say
        self.verbose = verbose
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()

    def start(self) -> None:
        for bus in RULES:
            threading.Thread(target=self._listen, args=(bus,), name=f"memories-screen-lock-{bus.lower()}", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        with self._guard:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked receive; the thread then ends

    def _listen(self, bus: str) -> None:
        try:
            from jeepney.bus_messages import MatchRule, message_bus
            from jeepney.io.blocking import open_dbus_connection
            from jeepney.low_level import HeaderFields
        except ImportError:
            self.say("memories tray: jeepney is not installed; locking on screen lock is off")
            return
        try:
            conn = open_dbus_connection(bus=bus, auth_timeout=_CONNECT_TIMEOUT)
        except Exception as exc:  # no such bus here (a headless box, a container): nothing to hear
            if self.verbose:
                self.say(f"memories tray: no {bus.lower()} bus ({type(exc).__name__}); its lock signals are not heard")
            return
        with self._guard:
            self._sockets.append(conn.sock)
            if self._stopped.is_set():
                conn.close()
                return
        try:
            rules = [
                MatchRule(type="signal", interface=interface, member=member, path=path, path_namespace=namespace)
                for interface, member, path, namespace in RULES[bus]
            ]
            for rule in rules:
                conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=_CONNECT_TIMEOUT)
            if self.verbose:
                self.say(f"memories tray: listening for screen lock on the {bus.lower()} bus")
            while not self._stopped.is_set():
                message = conn.receive()
                if not any(rule.matches(message) for rule in rules):
                    continue
                fields = message.header.fields
                reason = lock_reason(fields.get(HeaderFields.interface), fields.get(HeaderFields.member), tuple(message.body))
                if reason is not None:
                    self.on_lock(reason)
        except Exception as exc:  # the bus went away or we were stopped: stop listening on it
            if self.verbose and not self._stopped.is_set():
                self.say(f"memories tray: stopped listening on the {bus.lower()} bus ({type(exc).__name__})")
        finally:
            conn.close()
