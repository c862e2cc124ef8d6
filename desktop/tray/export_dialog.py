"""The tray's native export window (SPEC DT-9): destination and elevation, never in the web page.

The dashboard's Export only names a format; the tray opens this window, which takes the
destination folder (a fresh folder under the home directory, editable, with a native folder
chooser) and the vault password that `memories export` needs through `memories sudo`
(API-3). The password goes from this window to `memories sudo --password-stdin`
(desktop/tray/transfer.py); the page only learns "started" or "cancelled", then follows the
job in ``/api/status``. The window follows the approval window (approval_dialog.py): the same
toolkit choice, GTK inside the tray's loop or tkinter on its own thread, one window at a
time, a wrong password shown in the window for another try.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
        self.toolkit = toolkit if toolkit in ("gtk", "tk") else None
        self.say = say
        self.wait = wait
        self._busy = threading.Lock()

    def export(self, fmt: str) -> dict[str, Any]:
        """Show the window and wait. Returns {"outcome": started|cancelled|busy|no_dialog, "error"?: code}."""
        if self.toolkit is None:
            return {"outcome": "no_dialog"}
        if self.jobs.running() or not self._busy.acquire(blocking=False):
            return {"outcome": "busy"}
        try:
            pending = Pending()
            folder = str(default_export_dir())
            if self.toolkit == "gtk":
                from gi.repository import GLib

                GLib.idle_add(self._gtk_build, fmt, folder, pending)
            else:
                threading.Thread(target=self._tk_run, args=(fmt, folder, pending), name="memories-export", daemon=True).start()
            if not pending.done.wait(self.wait):
                return {"outcome": "cancelled"}
        finally:
            self._busy.release()
        self.say(f"memories tray: export dialog ends with {pending.error or pending.outcome}")
        return {"outcome": pending.outcome, **({"error": pending.error} if pending.error else {})}

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

    # -- GTK (inside the tray's GTK loop) ---------------------------------------------------
    def _gtk_build(self, fmt: str, folder: str, pending: Pending) -> bool:
        from gi.repository import Gdk, GLib, Gtk

        win = Gtk.Window(title=TITLE_EXPORT)
        win.set_position(Gtk.WindowPosition.CENTER)
        win.set_resizable(False)
        win.set_keep_above(True)
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=10)
        box.set_border_width(16)
        intro = Gtk.Label(label=_INTRO.format(fmt=fmt), xalign=0)
        intro.set_line_wrap(True)
        intro.set_max_width_chars(56)
        box.pack_start(intro, False, False, 0)
        grid = Gtk.Grid(row_spacing=6, column_spacing=8)
        folder_label = Gtk.Label(label="Folder", xalign=1)
        folder_entry = Gtk.Entry(text=folder, hexpand=True, width_chars=40)
        folder_label.set_mnemonic_widget(folder_entry)
        choose = Gtk.Button(label="Choose…")
        grid.attach(folder_label, 0, 0, 1, 1)
        grid.attach(folder_entry, 1, 0, 1, 1)
        grid.attach(choose, 2, 0, 1, 1)
        label = Gtk.Label(label="Vault password", xalign=1)
        entry = Gtk.Entry(visibility=False, activates_default=True, hexpand=True)
        entry.set_input_purpose(Gtk.InputPurpose.PASSWORD)
        label.set_mnemonic_widget(entry)
        grid.attach(label, 0, 1, 1, 1)
        grid.attach(entry, 1, 1, 2, 1)
        box.pack_start(grid, False, False, 0)
        message = Gtk.Label(label="", xalign=0)
        message.set_line_wrap(True)
        box.pack_start(message, False, False, 0)
        buttons = Gtk.Box(spacing=8, halign=Gtk.Align.END)
        cancel = Gtk.Button(label="Cancel")
        ok = Gtk.Button(label="Export", can_default=True)
        ok.get_style_context().add_class("suggested-action")
        buttons.pack_start(cancel, False, False, 0)
        buttons.pack_start(ok, False, False, 0)
        box.pack_start(buttons, False, False, 0)
        win.add(box)

        def pick(*_: object) -> None:
            chooser = Gtk.FileChooserNative.new(
                "Export into folder", win, Gtk.FileChooserAction.SELECT_FOLDER, "Choose", "Cancel"
            )
            chooser.set_create_folders(True)
            if chooser.run() == Gtk.ResponseType.ACCEPT and chooser.get_filename():
                folder_entry.set_text(chooser.get_filename())
            chooser.destroy()

        def shown(code: str | None) -> bool:
            if pending.done.is_set():
                win.destroy()
                return False
            message.set_text(self._message(code or "internal"))
            self.say(f"memories tray: export dialog shows {code}")
            entry.set_text("")
            ok.set_sensitive(True)
            entry.grab_focus()
            return False

        def submit(*_: object) -> None:
            if not ok.get_sensitive():
                return
            ok.set_sensitive(False)
            message.set_text("Checking the password…")
            password, where = entry.get_text(), folder_entry.get_text()
            work = lambda: GLib.idle_add(shown, self._start(fmt, where, password, pending))  # noqa: E731
            threading.Thread(target=work, name="memories-export", daemon=True).start()

        choose.connect("clicked", pick)
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
    def _tk_run(self, fmt: str, folder: str, pending: Pending) -> None:
        import tkinter as tk
        from tkinter import filedialog

        answers: queue.Queue[str | None] = queue.Queue()
        root = tk.Tk()
        root.title(TITLE_EXPORT)
        root.resizable(False, False)
        root.attributes("-topmost", True)
        frame = tk.Frame(root, padx=16, pady=16)
        frame.pack()
        tk.Label(frame, text=_INTRO.format(fmt=fmt), wraplength=420, justify="left").grid(
            row=0, column=0, columnspan=3, sticky="w", pady=(0, 8)
        )
        tk.Label(frame, text="Folder").grid(row=1, column=0, sticky="e", padx=(0, 8))
        where = tk.Entry(frame, width=40)
        where.insert(0, folder)
        where.grid(row=1, column=1, sticky="we", pady=2)

        def pick() -> None:
            chosen = filedialog.askdirectory(parent=root, title="Export into folder", mustexist=False)
            if chosen:
                where.delete(0, "end")
                where.insert(0, chosen)

        tk.Button(frame, text="Choose…", command=pick).grid(row=1, column=2, padx=(8, 0))
        tk.Label(frame, text="Vault password").grid(row=2, column=0, sticky="e", padx=(0, 8))
        entry = tk.Entry(frame, show="•", width=40)
        entry.grid(row=2, column=1, columnspan=2, sticky="we", pady=2)
        message = tk.Label(frame, text="", wraplength=420, justify="left", fg="#a00000")
        message.grid(row=3, column=0, columnspan=3, sticky="w", pady=8)
        ok = tk.Button(frame, text="Export", default="active")
        ok.grid(row=4, column=2, sticky="e")
        tk.Button(frame, text="Cancel", command=root.destroy).grid(row=4, column=0, sticky="w")

        def submit(*_: object) -> None:
            if str(ok["state"]) == "disabled":
                return
            ok.configure(state="disabled")
            message.configure(text="Checking the password…")
            password, folder_now = entry.get(), where.get()
            threading.Thread(target=lambda: answers.put(self._start(fmt, folder_now, password, pending)), daemon=True).start()

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
            self.say(f"memories tray: export dialog shows {code}")
            entry.delete(0, "end")
            ok.configure(state="normal")
            entry.focus_set()
            root.after(50, poll)

        ok.configure(command=submit)
        root.bind("<Return>", submit)
        root.bind("<Escape>", lambda *_: root.destroy())
        entry.focus_force()
        root.after(50, poll)
        try:
            root.mainloop()
        finally:
            pending.finish("cancelled")
