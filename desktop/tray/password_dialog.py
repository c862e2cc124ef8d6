"""The tray's own password window (issue 17): Unlock…, and Create on first run.

The toolkit is the best one present (``choose_toolkit``): GTK when the tray runs on a GTK
backend, else tkinter, else a terminal prompt when the tray has one; the windows are built by
desktop/tray/dialog_base.py. At most one window is open at a time: a second Unlock… raises
the open GTK window. The request runs on a worker thread (the engine's KDF takes a moment) so
neither the window nor the icon freezes.
"""

from __future__ import annotations

import getpass
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from desktop.tray.dialog_base import Form, Reply, Row, build_gtk, choose_toolkit, run_tk
from desktop.tray.unlock import Outcome, VaultUnlocker

__all__ = ["DialogHost", "TITLE_UNLOCK", "TITLE_CREATE"]

TITLE_UNLOCK = "Unlock Memories"
TITLE_CREATE = "Create your Memories vault"
_INTRO_UNLOCK = "Type the vault password. It goes straight to the engine, never to the web page."
_INTRO_CREATE = (
    "No vault exists yet. Choose its password and type it twice. Nobody can recover a forgotten password; keep it somewhere safe."
)


class DialogHost:
    """Opens the Unlock/Create window; ``on_done`` runs (any thread) after the vault unlocked."""

    def __init__(self, socket_path: Path, backend: str, say: Callable[[str], None], on_done: Callable[[], None]) -> None:
        self.socket_path = socket_path
        self.toolkit = choose_toolkit(backend)
        self.say = say
        self.on_done = on_done
        self._open = threading.Lock()  # held while a window is up
        self._gtk_window: Any = None

    def open(self, first_run: bool) -> None:
        """Callable from any thread; a second call while a window is up raises that window."""
        if self.toolkit == "gtk":
            from gi.repository import GLib

            GLib.idle_add(self._gtk_open, first_run)
            return
        if self.toolkit is None:
            self.say("memories tray: no dialog toolkit here; run `memories unlock` in a terminal")
            return
        if not self._open.acquire(blocking=False):
            return
        target = self._tk_run if self.toolkit == "tk" else self._terminal_run
        threading.Thread(target=self._release_after, args=(target, first_run), name="memories-unlock", daemon=True).start()

    def _tk_run(self, first_run: bool) -> None:
        run_tk(self._form(first_run))

    def _release_after(self, target: Callable[[bool], None], first_run: bool) -> None:
        try:
            target(first_run)
        finally:
            self._open.release()

    def _report(self, first_run: bool, outcome: Outcome) -> None:
        if outcome.ok:
            self.say("memories tray: vault created" if first_run else "memories tray: unlocked")
            self.on_done()
        else:
            self.say(f"memories tray: unlock dialog shows {outcome.code}")

    @staticmethod
    def _submit(unlocker: VaultUnlocker, first_run: bool, password: str, again: str) -> Outcome:
        return unlocker.create(password, again) if first_run else unlocker.unlock(password)

    def _form(self, first_run: bool, on_closed: Callable[[], None] = lambda: None) -> Form[Outcome]:
        unlocker = VaultUnlocker(self.socket_path)
        labels = ("Password", "Password again") if first_run else ("Password",)
        return Form(
            title=TITLE_CREATE if first_run else TITLE_UNLOCK,
            intro=_INTRO_CREATE if first_run else _INTRO_UNLOCK,
            rows=[Row(label, "secret") for label in labels],
            ok="Create" if first_run else "Unlock",
            working="Creating the vault…" if first_run else "Unlocking…",
            act=lambda values: self._submit(unlocker, first_run, values[0], values[1] if first_run else ""),
            answered=lambda outcome: self._answered(first_run, outcome),
            closed=on_closed,
            thread="memories-unlock",
            wrap_chars=48,
            entry_chars=32,
        )

    def _answered(self, first_run: bool, outcome: Outcome) -> Reply:
        self._report(first_run, outcome)
        # After the weak-password warning the same password may be sent again, as `memories init` allows.
        return Reply(close=outcome.ok, message=outcome.message, clear_secrets=outcome.code != "weak_password")

    # -- GTK (runs inside the tray's GTK loop): a second Unlock… raises the open window --------
    def _gtk_open(self, first_run: bool) -> bool:
        if self._gtk_window is not None:
            self._gtk_window.present()
            return False
        self._gtk_window = build_gtk(self._form(first_run, on_closed=self._gtk_closed))
        return False  # run once

    def _gtk_closed(self) -> None:
        self._gtk_window = None

    # -- terminal (last resort) ---------------------------------------------------------------
    def _terminal_run(self, first_run: bool) -> None:
        unlocker = VaultUnlocker(self.socket_path)
        for _ in range(3):
            try:
                password = getpass.getpass("New vault password: " if first_run else "Vault password: ")
                again = getpass.getpass("Again: ") if first_run else ""
            except (EOFError, KeyboardInterrupt, OSError):
                return
            outcome = self._submit(unlocker, first_run, password, again)
            self._report(first_run, outcome)
            if outcome.ok:
                return
            print(outcome.message, file=sys.stderr, flush=True)
