"""The tray's native import window (SPEC DT-9): the page starts it, the tray chooses what to read.

The dashboard's Import names nothing: a web page cannot hand a local path to the tray, and
should not read the user's files. The tray opens this window, where the person types or
chooses (native file and folder choosers) a Markdown file or folder, a JSONL file or a
memories.json; the tray runs `memories import SOURCE` (desktop/tray/transfer.py). Importing
notes needs no elevation, as in a terminal, so this window asks for no password. The page
follows the job in ``/api/status``. Built by desktop/tray/dialog_base.py like the export and
approval windows: GTK inside the tray's loop or tkinter on its own thread, one window at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from desktop.tray.dialog_base import Chooser, Form, OneWindow, Row, coded_reply
from desktop.tray.export_dialog import Pending
from desktop.tray.transfer import TransferJobs
from engine.errors import CODES

__all__ = ["ImportDialogs", "TITLE_IMPORT", "IMPORT_WAIT"]

TITLE_IMPORT = "Import into the vault"
IMPORT_WAIT = 600.0
_INTRO = (
    "The dashboard asks to import notes: a Markdown file or folder (an Obsidian vault works), a "
    "JSONL file, or a memories.json export. Notes already in the vault are skipped."
)
_MESSAGES = {
    "missing": "Type or choose an existing file or folder (a full path).",
    "busy": "An import or export is already running; wait for it to finish.",
}


def _source(text: str) -> Path | None:
    path = Path(text.strip()).expanduser()
    return path if text.strip() and path.is_absolute() and path.exists() else None


class ImportDialogs:
    """Opens the import window and returns what the person chose."""

    def __init__(self, jobs: TransferJobs, toolkit: str | None, say: Callable[[str], None], wait: float = IMPORT_WAIT) -> None:
        self.jobs = jobs
        self.say = say
        self.window = OneWindow(toolkit, wait)

    def import_(self) -> dict[str, Any]:
        """Show the window and wait. Returns {"outcome": started|cancelled|busy|no_dialog}."""
        pending = Pending()
        choosers = (Chooser("Choose file…", "Import from", folder=False), Chooser("Choose folder…", "Import from", folder=True))
        form = Form(
            title=TITLE_IMPORT,
            intro=_INTRO,
            rows=[Row("File or folder", "entry", choosers=choosers)],
            ok="Import",
            working=None,
            act=lambda values: self._start(values[0], pending),
            answered=lambda code: coded_reply(pending.done, code, self.say, "import", self._message),
            closed=pending.cancel,
            thread="memories-import",
        )
        return pending.reported(self.say, "import", self.window.show_and_wait(form, pending.done, busy=self.jobs.running()))

    def _start(self, text: str, pending: Pending) -> str | None:
        source = _source(text)
        if source is None:
            return "missing"
        code = self.jobs.import_notes(source)
        if code is None:
            pending.finish("started")
        return code

    @staticmethod
    def _message(code: str) -> str:
        return _MESSAGES.get(code) or CODES.get(code) or "The import did not start."
