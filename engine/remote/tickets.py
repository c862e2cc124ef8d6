"""Approval tickets (RM-5): every instruction is proposed, fingerprinted, approved once, executed once.

The fingerprint is a full SHA-256 (ID-4) over the session ID, the ticket's
sequence number within that session and the *normalized* instruction, so an
approval cannot be replayed on another session, reordered, or stretched to a
changed instruction. Approval is bound to the approving caller's namespace and
only that namespace may execute the ticket.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.crypto.canonical import domain_bytes
from engine.errors import MemoriesError

__all__ = ["Ticket", "TicketBook", "normalize", "fingerprint", "display"]

TICKET_TAG = "memories.remote.ticket"
MAX_INSTRUCTION_CHARS = 64 * 1024
MAX_PUT_BYTES = 1024 * 1024
MAX_TICKETS = 256
FTP_ACTIONS = frozenset({"list", "get", "put", "delete", "mkdir"})


def _text(text: str) -> str:
    # NFC + LF line ends + trimmed ends: two spellings a human cannot tell apart get one fingerprint.
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text or len(text) > MAX_INSTRUCTION_CHARS or "\x00" in text:
        raise MemoriesError("invalid_input", "An instruction is 1–65536 characters without NUL.")
    return text


def normalize(ctype: str, text: str, data: bytes | None = None) -> dict[str, Any]:
    """Turn user input into the exact instruction the session will run (what the fingerprint covers)."""
    text = _text(text)
    if ctype in {"postgres", "mysql"}:
        return {"kind": "query", "text": text}
    if ctype == "ssh":
        return {"kind": "exec", "command": text}
    if ctype == "redis":
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            raise MemoriesError("invalid_input", "The Redis command has unbalanced quotes.") from exc
        if not argv:
            raise MemoriesError("invalid_input", "The Redis command is empty.")
        return {"kind": "command", "argv": [argv[0].upper(), *argv[1:]]}
    if ctype == "ftp":
        action, _, path = text.partition(" ")
        action = action.lower()
        path = path.strip()
        if action not in FTP_ACTIONS or (action != "list" and not path):
            raise MemoriesError("invalid_input", "FTP instructions: list [PATH], get PATH, put PATH, delete PATH, mkdir PATH.")
        instruction: dict[str, Any] = {"kind": "ftp", "action": action, "path": path}
        if action == "put":
            if data is None or len(data) > MAX_PUT_BYTES:
                raise MemoriesError("invalid_input", "An FTP put carries its data (at most 1 MiB) in the ticket.")
            instruction["data_b64"] = base64.b64encode(data).decode("ascii")
            instruction["sha256"] = hashlib.sha256(data).hexdigest()
        return instruction
    if ctype == "tcp":
        payload = data if data is not None else text.encode("utf-8")
        return {"kind": "send", "data_b64": base64.b64encode(payload).decode("ascii")}
    raise MemoriesError("invalid_input", "Unknown session type.")


def display(instruction: dict[str, Any]) -> str:
    """The full normalized instruction as a human reads it before approving (DT-5)."""
    kind = instruction["kind"]
    if kind == "query":
        return str(instruction["text"])
    if kind == "exec":
        return str(instruction["command"])
    if kind == "command":
        return shlex.join(instruction["argv"])
    if kind == "ftp":
        extra = (
            f" ({len(base64.b64decode(instruction['data_b64']))} bytes, sha256 {instruction['sha256']})"
            if instruction["action"] == "put"
            else ""
        )
        return f"{instruction['action']} {instruction['path']}{extra}".strip()
    return send_text(base64.b64decode(instruction["data_b64"]))


def send_text(data: bytes) -> str:
    """A TCP send as a person writes it: its text (bytes that are not UTF-8 as ``\\xNN``) and size.

    Control characters stay in the text; every surface escapes them where it shows them
    (the CLI through engine.terminal_text, the dashboard through HTML escaping).
    """
    size = f"{len(data)} byte{'' if len(data) == 1 else 's'}"
    return f"send {data.decode('utf-8', 'backslashreplace')}  ({size})"


def fingerprint(session_id: str, seq: int, instruction: dict[str, Any]) -> str:
    payload = {"session": session_id, "seq": seq, "instruction": instruction}
    return hashlib.sha256(domain_bytes(TICKET_TAG, 1, payload)).hexdigest()


@dataclass
class Ticket:
    ticket_id: str
    session_id: str
    seq: int
    instruction: dict[str, Any]
    fingerprint: str
    proposed_by: str
    state: str = "pending"  # pending → approved → running → done; or rejected
    approved_by: str = ""

    def view(self, target: str) -> dict[str, Any]:
        return {
            "ticket": self.ticket_id,
            "session": self.session_id,
            "seq": self.seq,
            "target": target,
            "instruction": display(self.instruction),
            "fingerprint": self.fingerprint,
            "state": self.state,
        }


class TicketBook:
    """Tickets live only in memory: lock, idle expiry and restart void them all (RM-5)."""

    def __init__(self) -> None:
        self.tickets: dict[str, Ticket] = {}
        # Told the number of pending tickets whenever it may have changed (the dashboard's
        # Tickets badge follows the engine's change feed with it; a count, never ticket text).
        self.on_change: Callable[[int], None] | None = None

    def pending_count(self) -> int:
        return sum(1 for t in list(self.tickets.values()) if t.state == "pending")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.pending_count())

    def propose(self, session_id: str, seq: int, instruction: dict[str, Any], caller: str) -> Ticket:
        if sum(1 for t in self.tickets.values() if t.state in {"pending", "approved"}) >= MAX_TICKETS:
            raise MemoriesError("invalid_input", "Too many open tickets; execute or reject some first.")
        ticket = Ticket(os.urandom(8).hex(), session_id, seq, instruction, fingerprint(session_id, seq, instruction), caller)
        self.tickets[ticket.ticket_id] = ticket
        self._changed()
        return ticket

    def get(self, ticket_id: str) -> Ticket:
        """A ticket by its ID or a unique prefix of it (4+ characters)."""
        ticket = self.tickets.get(ticket_id)
        if ticket is None and len(ticket_id) >= 4:
            found = [t for tid, t in self.tickets.items() if tid.startswith(ticket_id.lower())]
            if len(found) > 1:
                raise MemoriesError("ambiguous_id", "That ticket ID prefix matches more than one ticket; type more.")
            ticket = found[0] if found else None
        if ticket is None:
            raise MemoriesError("not_found", "No open ticket has that ID.")
        return ticket

    def approve(self, ticket_id: str, caller: str, expected: str | None) -> Ticket:
        ticket = self.get(ticket_id)
        if ticket.state != "pending":
            raise MemoriesError("ticket_used")
        if expected is not None and expected.lower() != ticket.fingerprint:
            raise MemoriesError("invalid_input", "The fingerprint does not match this ticket; nothing was approved.")
        ticket.state, ticket.approved_by = "approved", caller
        self._changed()
        return ticket

    def reject(self, ticket_id: str) -> Ticket:
        ticket = self.get(ticket_id)
        if ticket.state not in {"pending", "approved"}:
            raise MemoriesError("ticket_used")
        ticket.state = "rejected"
        self._changed()
        return ticket

    def claim(self, ticket_id: str, caller: str) -> Ticket:
        """Move an approved ticket to running exactly once, for the namespace that approved it."""
        ticket = self.get(ticket_id)
        if ticket.state == "pending":
            raise MemoriesError("ticket_not_approved")
        if ticket.state != "approved":
            raise MemoriesError("ticket_used")
        if ticket.approved_by != caller:
            raise MemoriesError("permission_denied", "Only the caller that approved this ticket may execute it.")
        ticket.state = "running"
        return ticket

    def drop_session(self, session_id: str) -> None:
        for key in [k for k, t in self.tickets.items() if t.session_id == session_id]:
            del self.tickets[key]
        self._changed()

    def clear(self) -> None:
        self.tickets.clear()
        self._changed()
