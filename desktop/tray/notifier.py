"""Desktop notifications for remote-exec tickets that wait for approval (issue 17, DT-4).

The prober's status only says "attention" (a pending ticket or a conflict). While it does,
the tray asks the engine for the pending tickets (`remote_pending`, which does not touch
the idle timer) and notifies once per new ticket. The notification names the target and
points at the dashboard; it never carries the instruction, a fingerprint or a password
prompt (approval stays on the Tickets page with the vault password, DT-5). Notification
servers read the body as markup, so the target is escaped.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

from engine.terminal_text import one_line

__all__ = ["TicketNotifier", "TITLE", "MAX_SEEN"]

TITLE = "Memories: approval needed"
MAX_SEEN = 1024


class TicketNotifier:
    def __init__(self, fetch: Callable[[], dict[str, Any]], send: Callable[[str, str], None]) -> None:
        self._fetch = fetch
        self._send = send
        self._seen: set[str] = set()
        self._running = threading.Lock()

    def check(self, attention: bool) -> int:
        """Notify about tickets not seen before; returns how many notifications were sent.

        Never blocks a caller behind a running check (a slow engine): it then returns 0."""
        if not attention or not self._running.acquire(blocking=False):
            return 0
        try:
            try:
                tickets = self._fetch().get("tickets", [])
            except Exception:  # locked meanwhile, engine gone: the next probe tries again
                return 0
            pending = [t for t in tickets if isinstance(t, dict) and t.get("state") == "pending"]
            fresh = [t for t in pending if str(t.get("ticket")) not in self._seen]
            # Remember exactly what is still pending (announced ones included), bounded.
            self._seen = {str(t.get("ticket")) for t in pending[:MAX_SEEN]}
            for ticket in fresh:
                self._send(TITLE, message_for(ticket))
            return len(fresh)
        finally:
            self._running.release()


def message_for(ticket: dict[str, Any]) -> str:
    target = html.escape(one_line(str(ticket.get("target") or "a remote target"))[:80])
    return f"A remote command for {target} waits for your approval. Open the dashboard's Tickets page to review it."
