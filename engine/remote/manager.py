"""The daemon's remote state: open sessions, tickets and proxies, all dropped by lock (RM-5, PX-4, ST-10).

Every mutation happens under the service lock (the handlers hold it); network
I/O happens on the :class:`Runtime` loop. ``drop_all`` is the ``on_lock`` hook:
it empties the tables first (so nothing new can use them) and then waits for
every connection and proxy worker to finish closing before lock returns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.remote.proxy.listener import ProxyLimits
from engine.remote.runtime import Runtime
from engine.remote.sessions.base import EXEC_TIMEOUT, RemoteSession, exec_deadline
from engine.remote.tickets import TicketBook

if TYPE_CHECKING:
    from engine.service.service import Service

__all__ = ["RemoteManager", "SessionEntry", "ProxyHandle", "manager_of", "install"]

log = logging.getLogger("memories.remote")
DROP_TIMEOUT = 20.0
_ATTR = "remote_manager"


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


def manager_of(service: Service) -> RemoteManager:
    manager = getattr(service, _ATTR, None)
    if not isinstance(manager, RemoteManager):
        raise RuntimeError("remote extension not installed")
    return manager


def install(service: Service) -> None:
    """EXTENSIONS hook: one manager per Service, wiped on every lock (incl. idle and shutdown)."""
    config = service.config
    manager = RemoteManager(
        ProxyLimits.shortened(config.proxy_handshake_seconds, config.proxy_lifetime_seconds),
        exec_deadline(config.remote_exec_seconds),
    )
    setattr(service, _ATTR, manager)
    service.on_lock.append(manager.drop_all)

    def contribute() -> dict[str, int | bool]:
        connections, pending = status_counts(service)
        return {"connections": connections, "attention": pending}

    service.status_contributors.append(contribute)


def status_counts(service: Service) -> tuple[int, bool]:
    """For DesktopStatus (DT-1/DT-4): (open sessions + proxies, a ticket waits for approval).

    Counts only, no identifiers; safe to call without the service lock (a snapshot read).
    """
    manager = getattr(service, _ATTR, None)
    if not isinstance(manager, RemoteManager):
        return 0, False
    pending = any(t.state == "pending" for t in list(manager.tickets.tickets.values()))
    # A proxy whose lifetime ended stays in the table until the next proxy op prunes it; it is no connection.
    proxies = sum(1 for p in list(manager.proxies.values()) if not getattr(p, "stopped", False))
    return len(manager.sessions) + proxies, pending
