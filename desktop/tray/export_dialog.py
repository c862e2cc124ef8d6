"""The tray's native export window (SPEC DT-9): destination and elevation, never in the web page.

The dashboard's Export only names a format; the tray opens this window, which takes the
destination folder (a fresh folder under the home directory, editable, with a native folder
chooser) and the vault password that `memories export` needs through `memories sudo`
(API-3). The password goes from this window to `memories sudo --password-stdin`
(desktop/tray/transfer.py); the page only learns "started" or "cancelled", then follows the
job in ``/api/status``. The window is built by desktop/tray/dialog_base.py like the approval
window: GTK inside the tray's loop or tkinter on its own thread, one window at a time, a wrong
password shown in the window for another try.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop.tray.dialog_base import Chooser, Form, OneWindow, Row, coded_reply
from desktop.tray.transfer import TransferJobs, default_export_dir
from desktop.tray.unlock import MESSAGES
from engine.errors import CODES

__all__ = ["ExportDialogs", "Pending", "TITLE_EXPORT", "EXPORT_WAIT"]

TITLE_EXPORT = "Export the vault"
EXPORT_WAIT = 600.0
_INTRO = (
    "The dashboard asks to export this vault's notes ({fmt}) into a new folder. Exporting needs "
    "the vault password, as \u201cmemories sudo\u201d does in a terminal. It goes straight to the engine, "
    "never to the web page."
)
# Answers after which another try in the same window cannot help: the window closes with them.
_FINAL = {"rate_limited", "locked", "not_initialized", "daemon_unavailable", "invalid_input"}
_MESSAGES = {**MESSAGES, "folder": "Choose a folder that does not exist yet or is empty."}


@dataclass
class Pending:
    """One open window's answer (the import window uses it too)."""

    done: threading.Event = field(default_factory=threading.Event)
    outcome: str = "cancelled"
    error: str | None = None

    def finish(self, outcome: str, error: str | None = None) -> None:
        if not self.done.is_set():
            self.outcome, self.error = outcome, error
            self.done.set()

    def cancel(self) -> None:
        """The window closed without starting a job (a no-op once it started one)."""
        self.finish("cancelled")

    def reported(self, say: Callable[[str], None], kind: str, unanswered: str | None) -> dict[str, Any]:
        """The page's answer: ``unanswered`` (no_dialog, busy, cancelled by the wait) when no
        window answered, else {"outcome": ..., "error"?: code}, logged by its code."""
        if unanswered is not None:
            return {"outcome": unanswered}
        say(f"memories tray: {kind} dialog ends with {self.error or self.outcome}")
        return {"outcome": self.outcome, **({"error": self.error} if self.error else {})}


def _usable(folder: str) -> Path | None:
    """An absolute folder path that is new or empty (export never overwrites), else None."""
    path = Path(folder.strip()).expanduser()
    if not folder.strip() or not path.is_absolute():
        return None
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        return None
    return path


class ExportDialogs:
    """Opens the export window for a format and returns what the person chose."""

    def __init__(self, jobs: TransferJobs, toolkit: str | None, say: Callable[[str], None], wait: float = EXPORT_WAIT) -> None:
        self.jobs = jobs
        self.say = say
        self.window = OneWindow(toolkit, wait)

    def export(self, fmt: str) -> dict[str, Any]:
        """Show the window and wait. Returns {"outcome": started|cancelled|busy|no_dialog, "error"?: code}."""
        pending = Pending()
        choose = Chooser("Choose…", "Export into folder", folder=True)
        folder = Row("Folder", "entry", str(default_export_dir()), choosers=(choose,))
        form = Form(
            title=TITLE_EXPORT,
            intro=_INTRO.format(fmt=fmt),
            rows=[folder, Row("Vault password", "secret")],
            ok="Export",
            working="Checking the password…",
            act=lambda values: self._start(fmt, values[0], values[1], pending),
            answered=lambda code: coded_reply(pending.done, code, self.say, "export", self._message),
            closed=pending.cancel,
            thread="memories-export",
        )
        return pending.reported(self.say, "export", self.window.show_and_wait(form, pending.done, busy=self.jobs.running()))

    def _start(self, fmt: str, folder: str, password: str, pending: Pending) -> str | None:
        """Elevate and start; None when the export runs (``pending`` is finished), else the code to show."""
        if not password:
            return "empty"
        target = _usable(folder)
        if target is None:
            return "folder"
        code = self.jobs.export(fmt, target, password)
        if code is None:
            pending.finish("started")
        elif code in _FINAL:
            pending.finish("failed", code)
        return code

    @staticmethod
    def _message(code: str) -> str:
        return _MESSAGES.get(code) or CODES.get(code) or "The engine refused the export."
