"""The tray's native import window (SPEC DT-9): the page starts it, the tray chooses what to read.

The dashboard's Import names nothing: a web page cannot hand a local path to the tray, and
should not read the user's files. The tray opens this window, where the person types or
chooses (native file and folder choosers) a Markdown file or folder, a JSONL file or a
memories.json; the tray runs `memories import SOURCE` (desktop/tray/transfer.py). Importing
notes needs no elevation, as in a terminal, so this window asks for no password. The page
follows the job in ``/api/status``. Built like the export and approval windows: GTK inside
the tray's loop or tkinter on its own thread, one window at a time.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        self.toolkit = toolkit if toolkit in ("gtk", "tk") else None
        self.say = say
        self.wait = wait
        self._busy = threading.Lock()

    def import_(self) -> dict[str, Any]:
        """Show the window and wait. Returns {"outcome": started|cancelled|busy|no_dialog}."""
        if self.toolkit is None:
            return {"outcome": "no_dialog"}
        if self.jobs.running() or not self._busy.acquire(blocking=False):
            return {"outcome": "busy"}
        try:
            pending = Pending()
            if self.toolkit == "gtk":
                from gi.repository import GLib

                GLib.idle_add(self._gtk_build, pending)
            else:
                threading.Thread(target=self._tk_run, args=(pending,), name="memories-import", daemon=True).start()
            if not pending.done.wait(self.wait):
                return {"outcome": "cancelled"}
        finally:
            self._busy.release()
        self.say(f"memories tray: import dialog ends with {pending.error or pending.outcome}")
        return {"outcome": pending.outcome, **({"error": pending.error} if pending.error else {})}

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

    # -- GTK (inside the tray's GTK loop) ---------------------------------------------------
    def _gtk_build(self, pending: Pending) -> bool:
        from gi.repository import Gdk, Gtk

        win = Gtk.Window(title=TITLE_IMPORT)
        win.set_position(Gtk.WindowPosition.CENTER)
        win.set_resizable(False)
        win.set_keep_above(True)
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=10)
        box.set_border_width(16)
        intro = Gtk.Label(label=_INTRO, xalign=0)
        intro.set_line_wrap(True)
        intro.set_max_width_chars(56)
        box.pack_start(intro, False, False, 0)
        grid = Gtk.Grid(row_spacing=6, column_spacing=8)
        label = Gtk.Label(label="File or folder", xalign=1)
        entry = Gtk.Entry(hexpand=True, width_chars=40, activates_default=True)
        label.set_mnemonic_widget(entry)
        grid.attach(label, 0, 0, 1, 1)
        grid.attach(entry, 1, 0, 1, 1)
        choosers = Gtk.Box(spacing=8)
        pick_file = Gtk.Button(label="Choose file…")
        pick_folder = Gtk.Button(label="Choose folder…")
        choosers.pack_start(pick_file, False, False, 0)
        choosers.pack_start(pick_folder, False, False, 0)
        grid.attach(choosers, 1, 1, 1, 1)
        box.pack_start(grid, False, False, 0)
        message = Gtk.Label(label="", xalign=0)
        message.set_line_wrap(True)
        box.pack_start(message, False, False, 0)
        buttons = Gtk.Box(spacing=8, halign=Gtk.Align.END)
        cancel = Gtk.Button(label="Cancel")
        ok = Gtk.Button(label="Import", can_default=True)
        ok.get_style_context().add_class("suggested-action")
        buttons.pack_start(cancel, False, False, 0)
        buttons.pack_start(ok, False, False, 0)
        box.pack_start(buttons, False, False, 0)
        win.add(box)

        def pick(action: Any) -> None:
            chooser = Gtk.FileChooserNative.new("Import from", win, action, "Choose", "Cancel")
            if chooser.run() == Gtk.ResponseType.ACCEPT and chooser.get_filename():
                entry.set_text(chooser.get_filename())
            chooser.destroy()

        def submit(*_: object) -> None:
            code = self._start(entry.get_text(), pending)
            if pending.done.is_set():
                win.destroy()
                return
            message.set_text(self._message(code or "internal"))
            self.say(f"memories tray: import dialog shows {code}")

        pick_file.connect("clicked", lambda *_: pick(Gtk.FileChooserAction.OPEN))
        pick_folder.connect("clicked", lambda *_: pick(Gtk.FileChooserAction.SELECT_FOLDER))
        ok.connect("clicked", submit)
        cancel.connect("clicked", lambda *_: win.destroy())
        win.connect("destroy", lambda *_: pending.finish("cancelled"))
        win.connect("key-press-event", lambda _w, event: event.keyval == Gdk.KEY_Escape and (win.destroy() or True))
        win.set_default(ok)
        win.show_all()
        win.present()
        entry.grab_focus()
        return False  # run once

    # -- tkinter (its own thread and loop) ---------------------------------------------------
    def _tk_run(self, pending: Pending) -> None:
        import tkinter as tk
        from tkinter import filedialog

        answers: queue.Queue[str | None] = queue.Queue()
        root = tk.Tk()
        root.title(TITLE_IMPORT)
        root.resizable(False, False)
        root.attributes("-topmost", True)
        frame = tk.Frame(root, padx=16, pady=16)
        frame.pack()
        tk.Label(frame, text=_INTRO, wraplength=420, justify="left").grid(row=0, column=0, columnspan=3, sticky="w", pady=(0, 8))
        tk.Label(frame, text="File or folder").grid(row=1, column=0, sticky="e", padx=(0, 8))
        entry = tk.Entry(frame, width=40)
        entry.grid(row=1, column=1, columnspan=2, sticky="we", pady=2)

        def chosen(path: str) -> None:
            if path:
                entry.delete(0, "end")
                entry.insert(0, path)

        tk.Button(frame, text="Choose file…", command=lambda: chosen(filedialog.askopenfilename(parent=root))).grid(
            row=2, column=1, sticky="w"
        )
        tk.Button(frame, text="Choose folder…", command=lambda: chosen(filedialog.askdirectory(parent=root))).grid(
            row=2, column=2, sticky="w"
        )
        message = tk.Label(frame, text="", wraplength=420, justify="left", fg="#a00000")
        message.grid(row=3, column=0, columnspan=3, sticky="w", pady=8)

        def submit(*_: object) -> None:
            answers.put(self._start(entry.get(), pending))

        def poll() -> None:
            try:
                code = answers.get_nowait()
            except queue.Empty:
                root.after(50, poll)
                return
            if pending.done.is_set():
                root.destroy()
                return
            message.configure(text=self._message(code or "internal"))
            self.say(f"memories tray: import dialog shows {code}")
            root.after(50, poll)

        tk.Button(frame, text="Import", default="active", command=submit).grid(row=4, column=2, sticky="e")
        tk.Button(frame, text="Cancel", command=root.destroy).grid(row=4, column=0, sticky="w")
        root.bind("<Return>", submit)
        root.bind("<Escape>", lambda *_: root.destroy())
        entry.focus_force()
        root.after(50, poll)
        try:
            root.mainloop()
        finally:
            pending.finish("cancelled")
