"""The tray menu (SPEC DT-4): Open dashboard, Unlock…, Lock now, Start engine, Quit.

``menu_entries`` is the pure description (what is enabled in which state); ``build_menu``
turns it into a pystray menu whose enabled flags are re-read from the current state each
time the menu is shown, so nothing needs rebuilding when the state changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from desktop.status import TrayState

__all__ = ["MenuEntry", "menu_entries", "build_menu", "ACTIONS"]

ACTIONS = ("open", "unlock", "lock", "start", "quit")
_UNLOCKED = frozenset({TrayState.UNLOCKED, TrayState.BUSY, TrayState.ATTENTION})


@dataclass(frozen=True)
class MenuEntry:
    key: str
    label: str
    enabled: bool
    default: bool = False


def menu_entries(state: TrayState) -> list[MenuEntry]:
    return [
        # Default item: what a left click (or the xorg backend's only click) does.
        MenuEntry("open", "Open dashboard", True, default=True),
        # The tray's own password window (issue 17); on first run it creates the vault.
        MenuEntry("unlock", "Unlock…", state is TrayState.LOCKED),
        MenuEntry("lock", "Lock now", state in _UNLOCKED),
        MenuEntry("start", "Start engine", state is TrayState.NOT_RUNNING),
        MenuEntry("quit", "Quit", True),
    ]


def build_menu(
    pystray: Any,
    current: Callable[[], TrayState],
    actions: dict[str, Callable[[], None]],
    status: Callable[[], str] = lambda: "",
) -> Any:
    """``status`` gives the running background job as text ("Indexing 3,000 of 10,000…"); the
    menu shows it as a greyed first line while there is one, re-read each time it opens."""

    def enabled(key: str) -> Callable[[Any], bool]:
        return lambda item: next(e.enabled for e in menu_entries(current()) if e.key == key)

    def run(key: str) -> Callable[[Any, Any], None]:
        return lambda icon, item: actions[key]()

    items = [pystray.MenuItem(e.label, run(e.key), enabled=enabled(e.key), default=e.default) for e in menu_entries(current())]
    status_line = pystray.MenuItem(
        lambda item: status() or " ", lambda icon, item: None, enabled=False, visible=lambda item: bool(status())
    )
    return pystray.Menu(status_line, *items)
