"""The tray's native ticket-approval window (SPEC DT-6): the password never enters the web page.

The dashboard's Approve only names a ticket; the tray (which serves the dashboard) opens
this window with the ticket's target, instruction and full fingerprint, as the engine
reports them, and takes the vault password here. The password goes from this window to
the engine over the local socket (``remote_approve_confirm``, the same op, budget and
single use as before); the page only learns the outcome.

The window is built by desktop/tray/dialog_base.py (GTK inside the tray's GTK loop, else
tkinter on its own thread). At most one approval window is open at a time. ``approve``
blocks its caller (a dashboard worker thread) until the window closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop.tray.dialog_base import Form, OneWindow, Row, coded_reply
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
        self.say = say
        self.window = OneWindow(toolkit, wait)

    def approve(self, ticket: dict[str, Any]) -> dict[str, Any]:
        """Show ``ticket`` (the engine's view) and wait. Returns {"outcome": approved|cancelled|busy|no_dialog, ...};
        raises MemoriesError for the engine's refusals (wrong_password, rate_limited, ticket_used...)."""
        pending = _Pending()
        unanswered = self.window.show_and_wait(self._form(ticket, pending), pending.done)
        if unanswered is not None:
            return {"outcome": unanswered}
        if pending.error is not None:
            self.say(f"memories tray: approval dialog ends with {pending.error}")
            raise MemoriesError(pending.error, _MESSAGES.get(pending.error) or CODES.get(pending.error))
        result = pending.result or {"outcome": "cancelled"}
        self.say(f"memories tray: approval dialog ends with {result['outcome']}")
        return result

    def _form(self, ticket: dict[str, Any], pending: _Pending) -> Form[str | None]:
        session = f"{ticket.get('session', '')} #{ticket.get('seq', '')}"
        shown = [("Target", ticket.get("target", "")), ("Session", session), ("Instruction", ticket.get("instruction", ""))]
        rows = [Row(name, "text", str(value)) for name, value in shown]
        rows += [Row("Fingerprint", "text", str(ticket.get("fingerprint", "")), monospace=True), Row("Vault password", "secret")]
        return Form(
            title=TITLE_APPROVE,
            intro=_INTRO,
            rows=rows,
            ok="Approve",
            working="Approving…",
            act=lambda values: self._confirm(ticket, values[0], pending),
            answered=lambda code: coded_reply(pending.done, code, self.say, "approval", self._message),
            closed=pending.close,
            thread="memories-approve",
        )

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
