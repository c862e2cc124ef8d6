"""The daemon's remote state: open sessions, tickets and proxies, all dropped by lock (RM-5, PX-4, ST-10).

Every mutation happens under the service lock (the handlers hold it); network
I/O happens on the :class:`Runtime` loop. ``drop_all`` is the ``on_lock`` hook:
it empties the tables first (so nothing new can use them) and then waits for
every connection and proxy worker to finish closing before lock returns.

This module knows nothing of the service (SPEC LY-1): the service side
(``engine/service/handlers/remote.py``) builds one manager per Service from its
config and wires ``drop_all`` and ``status_counts`` into the Service's hooks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.remote.proxy.listener import ProxyLimits
from engine.remote.runtime import Runtime
from engine.remote.sessions.base import EXEC_TIMEOUT, RemoteSession
from engine.remote.tickets import TicketBook

__all__ = ["RemoteManager", "SessionEntry", "ProxyHandle"]

log = logging.getLogger("memories.remote")
DROP_TIMEOUT = 20.0


class ProxyHandle(Protocol):
    """What the manager needs from a running proxy listener."""

    proxy_id: str
    target_name: str
    ctype: str
    port: int
    started: float

    async def stop(self) -> None: ...

    def view(self) -> dict[str, Any]: ...


@dataclass
class SessionEntry:
    session_id: str
    session: RemoteSession
    target_name: str
    ctype: str
    asset_id: bytes
    host: str
    opened_by: str
    next_seq: int = 1
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)
    opened: float = field(default_factory=time.time)

    def view(self) -> dict[str, Any]:
        return {"session": self.session_id, "target": self.target_name, "type": self.ctype, "host": self.host}


class RemoteManager:
    def __init__(self, proxy_limits: ProxyLimits | None = None, exec_seconds: float = EXEC_TIMEOUT) -> None:
        self.runtime = Runtime()
        self.sessions: dict[str, SessionEntry] = {}
        self.tickets = TicketBook()
        self.proxies: dict[str, ProxyHandle] = {}
        # Every proxy this daemon starts gets these (config may only shorten them).
        self.proxy_limits = proxy_limits or ProxyLimits()
        self.exec_seconds = exec_seconds  # each session's per-instruction deadline

    def status_counts(self) -> tuple[int, bool]:
        """For DesktopStatus (DT-1/DT-4): (open sessions + proxies, a ticket waits for approval).

        Counts only, no identifiers; safe to call without the service lock (a snapshot read).
        """
        pending = any(t.state == "pending" for t in list(self.tickets.tickets.values()))
        # A proxy whose lifetime ended stays in the table until the next proxy op prunes it; it is no connection.
        proxies = sum(1 for p in list(self.proxies.values()) if not getattr(p, "stopped", False))
        return len(self.sessions) + proxies, pending

    @staticmethod
    def new_id() -> str:
        return os.urandom(6).hex()

    def drop_all(self) -> None:
        """on_lock: forget sessions, tickets and proxies, then await every close (PX-4)."""
        sessions = list(self.sessions.values())
        proxies = list(self.proxies.values())
        self.sessions.clear()
        self.proxies.clear()
        self.tickets.clear()
        if not sessions and not proxies:
            return

        async def close_everything() -> None:
            results = await asyncio.gather(
                *(entry.session.close() for entry in sessions),
                *(proxy.stop() for proxy in proxies),
                return_exceptions=True,
            )
            failed = sum(1 for r in results if isinstance(r, BaseException))
            if failed:
                log.warning("remote drop: %d closes raised", failed)

        try:
            self.runtime.call(close_everything(), DROP_TIMEOUT)
        except Exception as exc:
            log.error("remote drop failed type=%s", type(exc).__name__)
