"""The tray's badges (issue 17): tickets waiting for approval and a failed last sync.

Read over the tray's own IPC connection with two status ops that never touch the idle
timer (`remote_pending`, `sync_status`), so showing a badge never keeps the vault unlocked.
Only counts and a yes/no leave this module; no ticket text, target or peer.
"""

from __future__ import annotations

from pathlib import Path

from desktop.status import Badges, sync_problem
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["read_badges", "BADGE_TIMEOUT"]

BADGE_TIMEOUT = 3.0


def read_badges(socket_path: Path, timeout: float = BADGE_TIMEOUT) -> Badges | None:
    """The current badges, or None when the engine could not say (the icon keeps what it shows)."""
    try:
        with IpcClient(socket_path, timeout=timeout, client_label="tray") as client:
            tickets = client.request({"op": "remote_pending"}, timeout=timeout).get("tickets", [])
            synced = client.request({"op": "sync_status"}, timeout=timeout)
    except (MemoriesError, OSError):
        return None
    pending = sum(1 for t in tickets if isinstance(t, dict) and t.get("state") == "pending") if isinstance(tickets, list) else 0
    return Badges(tickets=pending, sync_problem=sync_problem(synced))
