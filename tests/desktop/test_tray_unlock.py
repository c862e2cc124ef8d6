"""Issue 17: the tray's own password window. Unlock… (wrong, then right) and the first-run
Create window, driven under Xvfb with a real tray host, a real engine and xdotool typing into
the real GTK window; the throttle and the messages against a real engine over IPC."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from desktop.status import TrayState
from desktop.tray.password_dialog import TITLE_CREATE, TITLE_UNLOCK
from desktop.tray.unlock import MESSAGES, VaultUnlocker
from engine.config import Paths
from tests.desktop.support import XSession
from tests.desktop.test_tray_x11 import Tray
from tests.helpers import PASSWORD, Cli, require

WRONG = "not the vault password 1234"


def _require_gtk() -> None:
    require(importlib.util.find_spec("gi") is not None, "PyGObject in the venv (pip install '.[gtk]')")
    require(shutil.which("dbus-run-session") is not None, "dbus-run-session (apt: dbus)")


def _require_toolkit(backend: str) -> None:
    """The tray's windows are GTK on the gtk backend and tkinter on the xorg backend."""
    if backend == "gtk":
        _require_gtk()
    else:
        require(importlib.util.find_spec("tkinter") is not None, "tkinter (apt: python3-tk)")


def _window(x: XSession, title: str, timeout: float = 120) -> str:
    """The id of the visible top-level window titled ``title`` (waits for it to map)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = _visible(x, title)
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no window titled {title!r} appeared")


def _visible(x: XSession, title: str) -> list[str]:
    out = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", f"^{title}$"], env=x.env(), capture_output=True, text=True, timeout=10
    )
    return out.stdout.split()


def _type_into(x: XSession, window: str, *keys: tuple[str, str]) -> None:
    """Give ``window`` the X input focus, then type text ("type") or press keys ("key") as a person would."""
    x.xdotool("windowfocus", "--sync", window)
    time.sleep(0.2)  # GTK handles FocusIn before the first key
    for how, what in keys:
        if how == "type":
            x.xdotool("type", "--delay", "15", what)
        else:
            x.xdotool("key", "--delay", "60", *what.split())


def _state(cli: Cli) -> str:
    state: str = cli.ok("status")["state"]
    return state


def test_tray_unlock_dialog_wrong_then_right(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """Issue 17 (DT-4 Unlock…): the tray menu's Unlock… opens the tray's own GTK window; a wrong
    password shows the error there and the vault stays locked; the right one unlocks the engine."""
    _require_gtk()
    vault.ok("lock")
    tray = Tray(vault, xsession, tmp_path, "gtk")
    try:
        tray.wait_output(r"memories tray: backend gtk")
        x, y = tray.wait_icon(TrayState.LOCKED)
        # Down selects "Open dashboard", the next "Unlock…" (Lock now is greyed out while locked).
        xsession.menu_choose((x, y), ["Down", "Down", "Return"], lambda: bool(_visible(xsession, TITLE_UNLOCK)))
        window = _window(xsession, TITLE_UNLOCK)
        _type_into(xsession, window, ("type", WRONG), ("key", "Return"))
        tray.wait_output(r"unlock dialog shows wrong_password")
        xsession.screenshot(tmp_path / "tray-unlock-wrong-password.png")
        assert _state(vault) == "locked"
        assert _visible(xsession, TITLE_UNLOCK) == [window], "the window stays open to try again"
        _type_into(xsession, window, ("type", PASSWORD), ("key", "Return"))
        tray.wait_output(r"memories tray: unlocked")
        assert _state(vault) == "unlocked"
        tray.wait_icon(TrayState.UNLOCKED)
        end = time.monotonic() + 120
        while time.monotonic() < end and _visible(xsession, TITLE_UNLOCK):
            time.sleep(0.1)
        assert _visible(xsession, TITLE_UNLOCK) == [], "the window closes once unlocked"
        assert WRONG not in tray.output() and PASSWORD not in tray.output()
    finally:
        tray.stop()


@pytest.mark.parametrize("backend", ["gtk", "xorg"])  # the GTK window; the xorg backend's tkinter window
def test_tray_first_run_dialog_creates_the_vault(cli: Cli, xsession: XSession, tmp_path: Path, backend: str) -> None:
    """Issue 17: with no vault, the tray opens its Create window by itself; two different
    passwords are refused (both fields emptied), a weak one is warned about once and kept
    (like `memories init`), then created."""
    _require_toolkit(backend)
    weak = "hunter22"
    tray = Tray(cli, xsession, tmp_path, backend)
    try:
        tray.wait_output(rf"memories tray: backend {backend}")
        window = _window(xsession, TITLE_CREATE, timeout=40)  # the tray starts the engine first
        xsession.screenshot(tmp_path / f"tray-first-run-{backend}.png")
        _type_into(xsession, window, ("type", PASSWORD), ("key", "Tab"), ("type", PASSWORD + "x"), ("key", "Return"))
        tray.wait_output(r"unlock dialog shows mismatch")
        assert not Paths(cli.home).store.exists(), "a mismatch creates nothing"
        _type_into(xsession, window, ("type", weak), ("key", "Tab"), ("type", weak), ("key", "Return"))
        tray.wait_output(r"unlock dialog shows weak_password")
        xsession.screenshot(tmp_path / f"tray-first-run-weak-{backend}.png")
        assert not Paths(cli.home).store.exists(), "the weak-password warning comes before anything is created"
        _type_into(xsession, window, ("key", "Return"))  # Create again: accepted, as `memories init` accepts it
        tray.wait_output(r"memories tray: vault created")
        assert _state(cli) == "unlocked"
        tray.wait_icon(TrayState.UNLOCKED)
    finally:
        tray.stop()
    cli.ok("lock")
    cli.unlock(weak)  # the vault was created with the password typed into the window
    assert _state(cli) == "unlocked"


def test_unlocker_throttled_by_the_engine_budget(vault: Cli) -> None:
    """Issue 17: the tray's unlock goes through the engine's password budget like the CLI's:
    wrong_password, then rate_limited, each a clear sentence without the password."""
    vault.ok("lock")
    unlocker = VaultUnlocker(Paths(vault.home).socket, timeout=60)
    codes = []
    for _ in range(8):
        outcome = unlocker.unlock(WRONG)
        assert not outcome.ok and WRONG not in outcome.message
        codes.append(outcome.code)
        if outcome.code == "rate_limited":
            break
    assert codes[0] == "wrong_password"
    assert codes[-1] == "rate_limited", codes
    assert outcome.message == MESSAGES["rate_limited"]
    assert unlocker.unlock(PASSWORD).code == "rate_limited", "the right password waits for the budget too"
    assert _state(vault) == "locked"
    assert unlocker.create(PASSWORD, PASSWORD + "x").code == "mismatch"
    assert unlocker.unlock("").code == "empty"
