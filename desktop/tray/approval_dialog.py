"""The tray's native ticket-approval window (SPEC DT-6): the password never enters the web page.

The dashboard's Approve only names a ticket; the tray (which serves the dashboard) opens
this window with the ticket's target, instruction and full fingerprint, as the engine
reports them, and takes the vault password here. The password goes from this window to
the engine over the local socket (``remote_approve_confirm``, the same op, budget and
single use as before); the page only learns the outcome.

The window uses the unlock window's toolkit (``choose_toolkit``): GTK inside the tray's
GTK loop, else tkinter on its own thread. At most one approval window is open at a time.
``approve`` blocks its caller (a dashboard worker thread) until the window closes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop.tray.unlock import KDF_TIMEOUT, MESSAGES
from engine.errors import CODES, MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["ApprovalDialogs", "TITLE_APPROVE", "APPROVAL_WAIT"]

TITLE_APPROVE = "Approve remote command"
APPROVAL_WAIT = 600.0  # a person reads the instruction; the page's request waits this long at most
_INTRO = (
    "The dashboard asks to approve this remote command once. Check the instruction and the "
    "fingerprint, then type the vault password. It goes straight to the engine, never to the web page."
)
# Answers after which trying again in the same window cannot help: the window closes with them.
_FINAL = {"rate_limited", "ticket_used", "ticket_not_approved", "session_closed", "locked", "not_found", "invalid_input"}
_MESSAGES = {
    **MESSAGES,
    "ticket_used": "This ticket was already approved or run.",
    "session_closed": "The remote session is closed; the ticket is gone.",
}


@dataclass
class _Pending:
    """One open window's answer: ``result`` (approved/cancelled) or ``error`` (a typed code)."""

    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    error: str | None = None
    last_error: str | None = None  # a wrong password, kept if the person then closes the window

    def finish(self, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()

    def close(self) -> None:
        """Closed without approving: refused after a wrong password (403), else cancelled."""
        if self.last_error is not None:
            self.finish(error=self.last_error)
        else:
            self.finish({"outcome": "cancelled"})


class ApprovalDialogs:
    """Opens the approval window for a ticket and returns what happened."""

    def __init__(self, socket_path: Path, toolkit: str | None, say: Callable[[str], None], wait: float = APPROVAL_WAIT) -> None:
        self.socket_path = socket_path
        self.toolkit = toolkit if toolkit in ("gtk", "tk") else None
        self.say = say
        self.wait = wait
        self._busy = threading.Lock()

    def approve(self, ticket: dict[str, Any]) -> dict[str, Any]:
        """Show ``ticket`` (the engine's view) and wait. Returns {"outcome": approved|cancelled|busy|no_dialog, ...};
        raises MemoriesError for the engine's refusals (wrong_password, rate_limited, ticket_used...)."""
        if self.toolkit is None:
            return {"outcome": "no_dialog"}
        if not self._busy.acquire(blocking=False):
            return {"outcome": "busy"}
        try:
            pending = _Pending()
            if self.toolkit == "gtk":
                from gi.repository import GLib

                GLib.idle_add(self._gtk_build, ticket, pending)
            else:
                threading.Thread(target=self._tk_run, args=(ticket, pending), name="memories-approve", daemon=True).start()
            if not pending.done.wait(self.wait):
                return {"outcome": "cancelled"}
        finally:
            self._busy.release()
        if pending.error is not None:
            self.say(f"memories tray: approval dialog ends with {pending.error}")
            raise MemoriesError(pending.error, _MESSAGES.get(pending.error) or CODES.get(pending.error))
        result = pending.result or {"outcome": "cancelled"}
        self.say(f"memories tray: approval dialog ends with {result['outcome']}")
        return result

    def _confirm(self, ticket: dict[str, Any], password: str, pending: _Pending) -> str | None:
        """Send the approval; None when approved (``pending`` is finished), else the error code to show."""
        if not password:
            return "empty"
        body = {"op": "remote_approve_confirm", "ticket": ticket["ticket"], "fingerprint": ticket["fingerprint"]}
        body["password"] = password
        try:
            with IpcClient(self.socket_path, timeout=KDF_TIMEOUT, client_label="tray") as client:
                answer = client.request(body, timeout=KDF_TIMEOUT)
        except MemoriesError as exc:
            code = exc.code
        except OSError:
            code = "daemon_unavailable"
        else:
            pending.finish({"outcome": "approved", "state": answer.get("state", "approved")})
            return None
        if code in _FINAL:
            pending.finish(error=code)
        elif code == "wrong_password":
            pending.last_error = code
        return code

    @staticmethod
    def _message(code: str) -> str:
        return _MESSAGES.get(code) or CODES.get(code) or "The engine refused the approval."

    @staticmethod
    def _rows(ticket: dict[str, Any]) -> list[tuple[str, str]]:
        session = f"{ticket.get('session', '')} #{ticket.get('seq', '')}"
        return [
            ("Target", str(ticket.get("target", ""))),
            ("Session", session),
            ("Instruction", str(ticket.get("instruction", ""))),
            ("Fingerprint", str(ticket.get("fingerprint", ""))),
        ]

    # -- GTK (inside the tray's GTK loop) ---------------------------------------------------
    def _gtk_build(self, ticket: dict[str, Any], pending: _Pending) -> bool:
        from gi.repository import Gdk, GLib, Gtk

        win = Gtk.Window(title=TITLE_APPROVE)
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
        for row, (name, value) in enumerate(self._rows(ticket)):
            grid.attach(Gtk.Label(label=name, xalign=1, yalign=0), 0, row, 1, 1)
            value_label = Gtk.Label(label=value, xalign=0, selectable=True)
            value_label.set_line_wrap(True)
            value_label.set_max_width_chars(64 if name == "Fingerprint" else 48)
            if name == "Fingerprint":
                value_label.get_style_context().add_class("monospace")
            grid.attach(value_label, 1, row, 1, 1)
        label = Gtk.Label(label="Vault password", xalign=1)
        entry = Gtk.Entry(visibility=False, activates_default=True, hexpand=True)
        entry.set_input_purpose(Gtk.InputPurpose.PASSWORD)
        label.set_mnemonic_widget(entry)
        grid.attach(label, 0, 4, 1, 1)
        grid.attach(entry, 1, 4, 1, 1)
        box.pack_start(grid, False, False, 0)
        message = Gtk.Label(label="", xalign=0)
        message.set_line_wrap(True)
        box.pack_start(message, False, False, 0)
        buttons = Gtk.Box(spacing=8, halign=Gtk.Align.END)
        cancel = Gtk.Button(label="Cancel")
        ok = Gtk.Button(label="Approve", can_default=True)
        ok.get_style_context().add_class("suggested-action")
        buttons.pack_start(cancel, False, False, 0)
        buttons.pack_start(ok, False, False, 0)
        box.pack_start(buttons, False, False, 0)
        win.add(box)

        def shown(code: str | None) -> bool:
            if pending.done.is_set():
                win.destroy()
                return False
            message.set_text(self._message(code or "internal"))
            self.say(f"memories tray: approval dialog shows {code}")
            entry.set_text("")
            ok.set_sensitive(True)
            entry.grab_focus()
            return False

        def submit(*_: object) -> None:
            if not ok.get_sensitive():
                return
            ok.set_sensitive(False)
            message.set_text("Approving…")
            password = entry.get_text()
            work = lambda: GLib.idle_add(shown, self._confirm(ticket, password, pending))  # noqa: E731
            threading.Thread(target=work, name="memories-approve", daemon=True).start()

        ok.connect("clicked", submit)
        cancel.connect("clicked", lambda *_: win.destroy())
        win.connect("destroy", lambda *_: pending.close())
        # Escape closes without approving, as in the tkinter window and most dialogs.
        win.connect("key-press-event", lambda _w, event: event.keyval == Gdk.KEY_Escape and (win.destroy() or True))
        win.set_default(ok)
        win.show_all()
        win.present()
        entry.grab_focus()
        return False  # run once

    # -- tkinter (its own thread and loop) ---------------------------------------------------
    def _tk_run(self, ticket: dict[str, Any], pending: _Pending) -> None:
        import tkinter as tk

        answers: queue.Queue[str | None] = queue.Queue()
        root = tk.Tk()
        root.title(TITLE_APPROVE)
        root.resizable(False, False)
        root.attributes("-topmost", True)
        frame = tk.Frame(root, padx=16, pady=16)
        frame.pack()
        tk.Label(frame, text=_INTRO, wraplength=420, justify="left").grid(row=0, column=0, columnspan=2, sticky="w", pady=(0, 8))
        for row, (name, value) in enumerate(self._rows(ticket), start=1):
            tk.Label(frame, text=name).grid(row=row, column=0, sticky="ne", padx=(0, 8))
            tk.Label(frame, text=value, wraplength=420, justify="left").grid(row=row, column=1, sticky="w")
        tk.Label(frame, text="Vault password").grid(row=5, column=0, sticky="e", padx=(0, 8))
        entry = tk.Entry(frame, show="•", width=40)
        entry.grid(row=5, column=1, sticky="we", pady=2)
        message = tk.Label(frame, text="", wraplength=420, justify="left", fg="#a00000")
        message.grid(row=6, column=0, columnspan=2, sticky="w", pady=8)
        ok = tk.Button(frame, text="Approve", default="active")
        ok.grid(row=7, column=1, sticky="e")
        tk.Button(frame, text="Cancel", command=root.destroy).grid(row=7, column=0, sticky="w")

        def submit(*_: object) -> None:
            if str(ok["state"]) == "disabled":
                return
            ok.configure(state="disabled")
            message.configure(text="Approving…")
            password = entry.get()
            threading.Thread(target=lambda: answers.put(self._confirm(ticket, password, pending)), daemon=True).start()

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
            self.say(f"memories tray: approval dialog shows {code}")
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
            pending.close()
