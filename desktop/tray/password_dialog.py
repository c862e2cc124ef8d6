"""The tray's own password window (issue 17): Unlock…, and Create on first run.

The toolkit is the best one present: GTK when the tray runs on a GTK backend (its loop is
already running, so the window is built inside it with ``GLib.idle_add``), else tkinter
(ships with most Pythons; it gets its own thread and loop), else a terminal prompt when the
tray has one. At most one window is open at a time. The request itself runs on a worker
thread (the engine's KDF takes a moment) so neither the window nor the icon freezes.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from desktop.tray.unlock import Outcome, VaultUnlocker

__all__ = ["DialogHost", "TITLE_UNLOCK", "TITLE_CREATE", "choose_toolkit"]

TITLE_UNLOCK = "Unlock Memories"
TITLE_CREATE = "Create your Memories vault"
_INTRO_UNLOCK = "Type the vault password. It goes straight to the engine, never to the web page."
_INTRO_CREATE = (
    "No vault exists yet. Choose its password and type it twice. Nobody can recover a forgotten password; keep it somewhere safe."
)


def choose_toolkit(backend: str) -> str | None:
    """ "gtk" on a GTK tray, else "tk" where tkinter and a display exist, else "terminal" on a tty."""
    if backend in ("gtk", "appindicator"):
        return "gtk"
    has_display = sys.platform in ("win32", "darwin") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if has_display and importlib.util.find_spec("tkinter") is not None:
        return "tk"
    if sys.stdin is not None and sys.stdin.isatty():
        return "terminal"
    return None


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

            GLib.idle_add(self._gtk_build, first_run)
            return
        if self.toolkit is None:
            self.say("memories tray: no dialog toolkit here; run `memories unlock` in a terminal")
            return
        if not self._open.acquire(blocking=False):
            return
        target = self._tk_run if self.toolkit == "tk" else self._terminal_run
        threading.Thread(target=self._release_after, args=(target, first_run), name="memories-unlock", daemon=True).start()

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

    # -- GTK (runs inside the tray's GTK loop) -----------------------------------------------
    def _gtk_build(self, first_run: bool) -> bool:
        from gi.repository import GLib, Gtk

        if self._gtk_window is not None:
            self._gtk_window.present()
            return False
        unlocker = VaultUnlocker(self.socket_path)
        win = Gtk.Window(title=TITLE_CREATE if first_run else TITLE_UNLOCK)
        win.set_position(Gtk.WindowPosition.CENTER)
        win.set_resizable(False)
        win.set_keep_above(True)
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=10)
        box.set_border_width(16)
        intro = Gtk.Label(label=_INTRO_CREATE if first_run else _INTRO_UNLOCK, xalign=0)
        intro.set_line_wrap(True)
        intro.set_max_width_chars(48)
        box.pack_start(intro, False, False, 0)
        grid = Gtk.Grid(row_spacing=6, column_spacing=8)
        entries: list[Any] = []
        labels = ("Password", "Password again") if first_run else ("Password",)
        for row, text in enumerate(labels):
            label = Gtk.Label(label=text, xalign=1)
            entry = Gtk.Entry(visibility=False, activates_default=True, hexpand=True)
            entry.set_input_purpose(Gtk.InputPurpose.PASSWORD)
            label.set_mnemonic_widget(entry)
            grid.attach(label, 0, row, 1, 1)
            grid.attach(entry, 1, row, 1, 1)
            entries.append(entry)
        box.pack_start(grid, False, False, 0)
        message = Gtk.Label(label="", xalign=0)
        message.set_line_wrap(True)
        message.set_max_width_chars(48)
        box.pack_start(message, False, False, 0)
        buttons = Gtk.Box(spacing=8, halign=Gtk.Align.END)
        cancel = Gtk.Button(label="Cancel")
        ok = Gtk.Button(label="Create" if first_run else "Unlock", can_default=True)
        ok.get_style_context().add_class("suggested-action")
        buttons.pack_start(cancel, False, False, 0)
        buttons.pack_start(ok, False, False, 0)
        box.pack_start(buttons, False, False, 0)
        win.add(box)

        def finish(outcome: Outcome) -> bool:
            self._report(first_run, outcome)
            if outcome.ok:
                win.destroy()
                return False
            message.set_text(outcome.message)
            for entry in entries if outcome.code != "weak_password" else []:
                entry.set_text("")
            ok.set_sensitive(True)
            entries[0].grab_focus()
            return False

        def submit(*_: object) -> None:
            if not ok.get_sensitive():
                return
            ok.set_sensitive(False)
            message.set_text("Creating the vault…" if first_run else "Unlocking…")
            values = [e.get_text() for e in entries] + [""]
            work = lambda: GLib.idle_add(finish, self._submit(unlocker, first_run, values[0], values[1]))  # noqa: E731
            threading.Thread(target=work, name="memories-unlock", daemon=True).start()

        def closed(*_: object) -> None:
            self._gtk_window = None

        ok.connect("clicked", submit)
        cancel.connect("clicked", lambda *_: win.destroy())
        win.connect("destroy", closed)
        win.set_default(ok)
        self._gtk_window = win
        win.show_all()
        entries[0].grab_focus()
        return False  # run once

    # -- tkinter (its own thread and loop) ----------------------------------------------------
    def _tk_run(self, first_run: bool) -> None:
        import tkinter as tk

        unlocker = VaultUnlocker(self.socket_path)
        results: queue.Queue[Outcome] = queue.Queue()
        root = tk.Tk()
        root.title(TITLE_CREATE if first_run else TITLE_UNLOCK)
        root.resizable(False, False)
        root.attributes("-topmost", True)
        frame = tk.Frame(root, padx=16, pady=16)
        frame.pack()
        tk.Label(frame, text=_INTRO_CREATE if first_run else _INTRO_UNLOCK, wraplength=360, justify="left").grid(
            row=0, column=0, columnspan=2, sticky="w", pady=(0, 8)
        )
        entries = []
        for row, text in enumerate(("Password", "Password again") if first_run else ("Password",), start=1):
            tk.Label(frame, text=text).grid(row=row, column=0, sticky="e", padx=(0, 8))
            entry = tk.Entry(frame, show="•", width=32)
            entry.grid(row=row, column=1, sticky="we", pady=2)
            entries.append(entry)
        message = tk.Label(frame, text="", wraplength=360, justify="left", fg="#a00000")
        message.grid(row=4, column=0, columnspan=2, sticky="w", pady=8)
        ok = tk.Button(frame, text="Create" if first_run else "Unlock", default="active")
        ok.grid(row=5, column=1, sticky="e")
        tk.Button(frame, text="Cancel", command=root.destroy).grid(row=5, column=0, sticky="w")

        def submit(*_: object) -> None:
            if str(ok["state"]) == "disabled":
                return
            ok.configure(state="disabled")
            message.configure(text="Creating the vault…" if first_run else "Unlocking…")
            values = [e.get() for e in entries] + [""]
            threading.Thread(
                target=lambda: results.put(self._submit(unlocker, first_run, values[0], values[1])), daemon=True
            ).start()

        def poll() -> None:
            try:
                outcome = results.get_nowait()
            except queue.Empty:
                root.after(50, poll)
                return
            self._report(first_run, outcome)
            if outcome.ok:
                root.destroy()
                return
            message.configure(text=outcome.message)
            if outcome.code != "weak_password":
                for entry in entries:
                    entry.delete(0, "end")
            ok.configure(state="normal")
            entries[0].focus_set()
            root.after(50, poll)

        ok.configure(command=submit)
        root.bind("<Return>", submit)
        root.bind("<Escape>", lambda *_: root.destroy())
        entries[0].focus_force()
        root.after(50, poll)
        root.mainloop()

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
