"""The frame every native tray window shares: unlock, ticket approval, export, import.

A window is described once, toolkit-free (a :class:`Form`: title, intro, rows, the OK
button's word, the action and what its answer means), and built here for the toolkit the
tray runs on: GTK inside the tray's own GTK loop (``GLib.idle_add``), else tkinter on a
thread of its own with its own loop (Tk is not thread-safe, so the action's answer comes back
through a queue the loop polls). Either way the window stays above others, centred, not
resizable; Return presses OK, Escape and Cancel close it; the first password field (else the
first field) has the focus. The action runs on a worker thread, OK greyed out meanwhile,
so neither the window nor the tray icon freezes while the engine's KDF works.

Passwords (``secret`` rows) are read from the field only when OK is pressed, handed to the
action and nowhere else (no log line, argument or environment), and the fields are emptied
after every refused try. The windows live in the tray's own process: nothing here starts one.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import queue
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

__all__ = ["Chooser", "Form", "Reply", "Row", "OneWindow", "build_gtk", "choose_toolkit", "coded_reply", "run_tk", "show"]

Answer = TypeVar("Answer")
_POLL_MS = 50  # how often a tkinter window looks for its action's answer


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


@dataclass(frozen=True)
class Chooser:
    """A button beside a path field that opens the desktop's own file or folder chooser."""

    label: str
    title: str
    folder: bool


@dataclass(frozen=True)
class Row:
    """One labelled line of the form: ``text`` shows a value, ``entry`` takes text, ``secret`` a password."""

    label: str
    kind: Literal["text", "entry", "secret"]
    value: str = ""
    monospace: bool = False  # a fingerprint, read character by character
    choosers: tuple[Chooser, ...] = ()


@dataclass(frozen=True)
class Reply:
    """What the window does with an answer: close, or show ``message`` for another try."""

    close: bool = False
    message: str = ""
    clear_secrets: bool = True  # a warning that the same password may be sent again keeps it


def coded_reply(
    done: threading.Event, code: str | None, say: Callable[[str], None], kind: str, message: Callable[[str], str]
) -> Reply:
    """The reply to an action that answers with an error code (None when it went through): close
    once the waiting caller has its answer (``done``), else log the code (never what was typed)
    and show its sentence for another try."""
    if done.is_set():
        return Reply(close=True)
    say(f"memories tray: {kind} dialog shows {code}")
    return Reply(message=message(code or "internal"))


@dataclass(frozen=True)
class Form(Generic[Answer]):
    """A window, toolkit-free. ``act`` gets the fields' texts (entry and secret rows, in order)
    on a worker thread; ``answered`` turns its answer into a :class:`Reply` in the window's
    loop; ``closed`` runs once, in that loop, when the window is gone for any reason."""

    title: str
    intro: str
    rows: Sequence[Row]
    ok: str
    working: str | None  # shown while ``act`` runs; None leaves the message as it is
    act: Callable[[list[str]], Answer]
    answered: Callable[[Answer], Reply]
    closed: Callable[[], None] = lambda: None
    thread: str = "memories-dialog"  # the worker threads' name, for a stack dump
    wrap_chars: int = 56  # the intro's and the message's width
    entry_chars: int = 40

    @property
    def columns(self) -> int:
        """Label, field, and a third column when a row has chooser buttons."""
        return 3 if any(row.choosers for row in self.rows) else 2


def show(toolkit: str, form: Form[Any]) -> None:
    """Open ``form`` from any thread, in the tray's GTK loop or on a tkinter thread of its own."""
    if toolkit == "gtk":
        from gi.repository import GLib

        GLib.idle_add(lambda: build_gtk(form) and False)  # False: run once
    else:
        threading.Thread(target=run_tk, args=(form,), name=form.thread, daemon=True).start()


class OneWindow:
    """At most one window of a kind at a time, for a caller that waits for it (a dashboard worker thread)."""

    def __init__(self, toolkit: str | None, wait: float) -> None:
        self.toolkit = toolkit if toolkit in ("gtk", "tk") else None
        self.wait = wait
        self._busy = threading.Lock()

    def show_and_wait(self, form: Form[Any], done: threading.Event, busy: bool = False) -> str | None:
        """None once ``done`` is set; else the outcome without it: no_dialog, busy, or cancelled
        (nobody answered within ``wait``)."""
        if self.toolkit is None:
            return "no_dialog"
        if busy or not self._busy.acquire(blocking=False):
            return "busy"
        try:
            show(self.toolkit, form)
            if not done.wait(self.wait):
                return "cancelled"
        finally:
            self._busy.release()
        return None


def _focus_index(rows: Sequence[Row]) -> int:
    """Among the fields, the first password, else the first field."""
    fields = [row for row in rows if row.kind != "text"]
    return next((i for i, row in enumerate(fields) if row.kind == "secret"), 0)


# -- GTK (inside the tray's GTK loop) -------------------------------------------------------
def build_gtk(form: Form[Any]) -> Any:
    """Build and show ``form``'s window; call inside the GTK loop. Returns the Gtk.Window."""
    from gi.repository import Gdk, GLib, Gtk

    win = Gtk.Window(title=form.title)
    win.set_position(Gtk.WindowPosition.CENTER)
    win.set_resizable(False)
    win.set_keep_above(True)
    box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=10)
    box.set_border_width(16)
    intro = Gtk.Label(label=form.intro, xalign=0)
    intro.set_line_wrap(True)
    intro.set_max_width_chars(form.wrap_chars)
    box.pack_start(intro, False, False, 0)
    grid = Gtk.Grid(row_spacing=6, column_spacing=8)
    fields: list[tuple[Row, Any]] = []
    shown: list[Any] = []  # the selectable values (a person may copy a fingerprint)
    for line, row in enumerate(form.rows):
        if row.kind == "text":
            grid.attach(Gtk.Label(label=row.label, xalign=1, yalign=0), 0, line, 1, 1)
            value = Gtk.Label(label=row.value, xalign=0, selectable=True)
            value.set_line_wrap(True)
            value.set_max_width_chars(64 if row.monospace else 48)
            if row.monospace:
                value.get_style_context().add_class("monospace")
            grid.attach(value, 1, line, form.columns - 1, 1)
            shown.append(value)
            continue
        label = Gtk.Label(label=row.label, xalign=1)
        entry = Gtk.Entry(text=row.value, visibility=row.kind != "secret", activates_default=True, hexpand=True)
        if row.kind == "secret":
            entry.set_input_purpose(Gtk.InputPurpose.PASSWORD)
        else:
            entry.set_width_chars(form.entry_chars)
        label.set_mnemonic_widget(entry)  # the field's accessible name is its label
        grid.attach(label, 0, line, 1, 1)
        grid.attach(entry, 1, line, 1 if row.choosers else form.columns - 1, 1)
        if row.choosers:
            grid.attach(_gtk_choosers(win, entry, row.choosers), 2, line, 1, 1)
        fields.append((row, entry))
    box.pack_start(grid, False, False, 0)
    message = Gtk.Label(label="", xalign=0)
    message.set_line_wrap(True)
    message.set_max_width_chars(form.wrap_chars)
    box.pack_start(message, False, False, 0)
    buttons = Gtk.Box(spacing=8, halign=Gtk.Align.END)
    cancel = Gtk.Button(label="Cancel")
    ok = Gtk.Button(label=form.ok, can_default=True)
    ok.get_style_context().add_class("suggested-action")
    buttons.pack_start(cancel, False, False, 0)
    buttons.pack_start(ok, False, False, 0)
    box.pack_start(buttons, False, False, 0)
    win.add(box)
    focus = fields[_focus_index(form.rows)][1]

    def answered(answer: object) -> bool:
        reply = form.answered(answer)
        if reply.close:
            win.destroy()
            return False
        message.set_text(reply.message)
        for row, entry in fields:
            if row.kind == "secret" and reply.clear_secrets:
                entry.set_text("")
        ok.set_sensitive(True)
        focus.grab_focus()
        return False  # run once

    def submit(*_: object) -> None:
        if not ok.get_sensitive():
            return
        ok.set_sensitive(False)
        if form.working is not None:
            message.set_text(form.working)
        values = [entry.get_text() for _, entry in fields]
        work = lambda: GLib.idle_add(answered, form.act(values))  # noqa: E731
        threading.Thread(target=work, name=form.thread, daemon=True).start()

    ok.connect("clicked", submit)
    cancel.connect("clicked", lambda *_: win.destroy())
    win.connect("destroy", lambda *_: form.closed())
    # Escape closes without answering, as in the tkinter window and most dialogs.
    win.connect("key-press-event", lambda _w, event: event.keyval == Gdk.KEY_Escape and (win.destroy() or True))
    win.set_default(ok)
    win.show_all()
    win.present()
    focus.grab_focus()
    # GTK gives the first selectable label the focus while the window is built and selects its
    # whole text, which stays highlighted after the password field takes the focus: the window
    # would open with the target looking chosen. Nothing is selected until the person selects it.
    for value in shown:
        value.select_region(0, 0)
    return win


def _gtk_choosers(win: Any, entry: Any, choosers: tuple[Chooser, ...]) -> Any:
    from gi.repository import Gtk

    def pick(chooser: Chooser) -> None:
        action = Gtk.FileChooserAction.SELECT_FOLDER if chooser.folder else Gtk.FileChooserAction.OPEN
        native = Gtk.FileChooserNative.new(chooser.title, win, action, "Choose", "Cancel")
        native.set_create_folders(True)
        if native.run() == Gtk.ResponseType.ACCEPT and native.get_filename():
            entry.set_text(native.get_filename())
        native.destroy()

    box = Gtk.Box(spacing=8)
    for chooser in choosers:
        button = Gtk.Button(label=chooser.label)
        button.connect("clicked", lambda _button, chosen=chooser: pick(chosen))
        box.pack_start(button, False, False, 0)
    return box


# -- tkinter (its own thread and loop) ------------------------------------------------------
def run_tk(form: Form[Any]) -> None:
    """Build ``form``'s window with a Tk loop of its own on this thread; returns once it is closed."""
    import tkinter as tk

    answers: queue.Queue[object] = queue.Queue()
    wrap = form.wrap_chars * 15 // 2  # pixels, about as wide as the GTK window's lines
    root = tk.Tk()
    root.title(form.title)
    root.resizable(False, False)
    root.attributes("-topmost", True)
    frame = tk.Frame(root, padx=16, pady=16)
    frame.pack()
    tk.Label(frame, text=form.intro, wraplength=wrap, justify="left").grid(
        row=0, column=0, columnspan=form.columns, sticky="w", pady=(0, 8)
    )
    fields: list[tuple[Row, Any]] = []
    for line, row in enumerate(form.rows, start=1):
        if row.kind == "text":
            tk.Label(frame, text=row.label).grid(row=line, column=0, sticky="ne", padx=(0, 8))
            tk.Label(frame, text=row.value, wraplength=wrap, justify="left").grid(
                row=line, column=1, columnspan=form.columns - 1, sticky="w"
            )
            continue
        tk.Label(frame, text=row.label).grid(row=line, column=0, sticky="e", padx=(0, 8))
        entry = tk.Entry(frame, show="•" if row.kind == "secret" else "", width=form.entry_chars)
        entry.insert(0, row.value)
        entry.grid(row=line, column=1, columnspan=1 if row.choosers else form.columns - 1, sticky="we", pady=2)
        if row.choosers:
            _tk_choosers(root, frame, entry, row.choosers).grid(row=line, column=2, padx=(8, 0))
        fields.append((row, entry))
    end = len(form.rows) + 1
    message = tk.Label(frame, text="", wraplength=wrap, justify="left", fg="#a00000")
    message.grid(row=end, column=0, columnspan=form.columns, sticky="w", pady=8)
    ok = tk.Button(frame, text=form.ok, default="active")
    ok.grid(row=end + 1, column=form.columns - 1, sticky="e")
    tk.Button(frame, text="Cancel", command=root.destroy).grid(row=end + 1, column=0, sticky="w")
    focus = fields[_focus_index(form.rows)][1]

    def submit(*_: object) -> None:
        if str(ok["state"]) == "disabled":
            return
        ok.configure(state="disabled")
        if form.working is not None:
            message.configure(text=form.working)
        values = [entry.get() for _, entry in fields]
        threading.Thread(target=lambda: answers.put(form.act(values)), name=form.thread, daemon=True).start()

    def poll() -> None:
        try:
            answer = answers.get_nowait()
        except queue.Empty:
            root.after(_POLL_MS, poll)
            return
        reply = form.answered(answer)
        if reply.close:
            root.destroy()
            return
        message.configure(text=reply.message)
        for row, entry in fields:
            if row.kind == "secret" and reply.clear_secrets:
                entry.delete(0, "end")
        ok.configure(state="normal")
        focus.focus_set()
        root.after(_POLL_MS, poll)

    ok.configure(command=submit)
    root.bind("<Return>", submit)
    root.bind("<Escape>", lambda *_: root.destroy())
    focus.focus_force()
    root.after(_POLL_MS, poll)
    try:
        root.mainloop()
    finally:
        form.closed()


def _tk_choosers(root: Any, frame: Any, entry: Any, choosers: tuple[Chooser, ...]) -> Any:
    import tkinter as tk
    from tkinter import filedialog

    def pick(chooser: Chooser) -> None:
        if chooser.folder:
            chosen = filedialog.askdirectory(parent=root, title=chooser.title, mustexist=False)
        else:
            chosen = filedialog.askopenfilename(parent=root, title=chooser.title)
        if chosen:
            entry.delete(0, "end")
            entry.insert(0, chosen)

    box = tk.Frame(frame)
    for n, chooser in enumerate(choosers):
        tk.Button(box, text=chooser.label, command=functools.partial(pick, chooser)).pack(side="left", padx=(8 if n else 0, 0))
    return box
