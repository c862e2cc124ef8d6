"""The loopback listener every proxy shares: limits, handshake deadline, lifetime, stop-and-await (PX-1…PX-4)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from engine.errors import MemoriesError
from engine.remote.proxy.relay import relay
from engine.remote.targets import Target

__all__ = [
    "ProxyListener",
    "ProxyLimits",
    "HANDSHAKE_SECONDS",
    "MAX_PACKET",
    "MAX_CLIENTS",
    "LIFETIME_SECONDS",
    "Streams",
]

log = logging.getLogger("memories.remote.proxy")

HANDSHAKE_SECONDS = 30.0
MAX_PACKET = 64 * 1024
MAX_CLIENTS = 16
LIFETIME_SECONDS = 30 * 60.0

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True)
class ProxyLimits:
    """The handshake deadline and lifetime one listener enforces (PX-2, PX-4).

    Build it with :meth:`shortened`: the engine config may only make either limit shorter
    than the SPEC defaults (so tests can watch a deadline pass), never longer.
    """

    handshake_seconds: float = HANDSHAKE_SECONDS
    lifetime_seconds: float = LIFETIME_SECONDS

    @classmethod
    def shortened(cls, handshake_seconds: float | None = None, lifetime_seconds: float | None = None) -> ProxyLimits:
        def clamp(value: float | None, default: float) -> float:
            # Not positive (or NaN) means "not configured"; anything above the default is capped at it.
            if value is None or not value > 0:
                return default
            return min(float(value), default)

        return cls(clamp(handshake_seconds, HANDSHAKE_SECONDS), clamp(lifetime_seconds, LIFETIME_SECONDS))


class ProxyListener(ABC):
    """One proxy: a loopback listener plus a task per client. Runs on the remote runtime loop."""

    def __init__(self, proxy_id: str, target: Target, host: str) -> None:
        self.proxy_id = proxy_id
        self.target = target
        self.host = host
        self.target_name = target.name
        self.ctype = target.ctype
        self.port = 0
        self.started = time.time()
        self.stopped = False
        self.accepted = 0
        self.failed_handshakes = 0
        self._server: asyncio.Server | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._expiry: asyncio.TimerHandle | None = None
        self._expiring: asyncio.Task[None] | None = None
        self.limits = ProxyLimits()
        self._expires_at = time.monotonic() + self.limits.lifetime_seconds  # set again by start()

    # -- protocol specifics -------------------------------------------------------------
    @abstractmethod
    async def handshake(self, client: Streams) -> Streams:
        """Authenticate upstream with the credential; return the upstream streams ready to relay."""

    async def refuse(self, client: Streams, error: MemoriesError) -> None:  # noqa: B027 (optional hook)
        """Tell the local client why, in its own protocol, if it has a way to say it."""

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, port: int) -> None:
        # PX-1: bind here and give the very same socket to the loop: no close/re-bind window.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
            sock.setblocking(False)
            self._server = await asyncio.start_server(self._accept, sock=sock, limit=MAX_PACKET * 2)
        except OSError as exc:
            sock.close()
            raise MemoriesError("invalid_input", "That local port cannot be bound.") from exc
        self.port = int(sock.getsockname()[1])
        # PX-4: a proxy lives at most 30 minutes (or the configured shorter lifetime), whatever the traffic.
        lifetime = self.limits.lifetime_seconds
        self._expires_at = time.monotonic() + lifetime
        self._expiry = asyncio.get_running_loop().call_later(lifetime, self._expire)

    def _expire(self) -> None:
        log.info("proxy %s lifetime over", self.ctype)
        # Keep a reference: the loop holds tasks only weakly, and this one must run to the end.
        self._expiring = asyncio.get_running_loop().create_task(self.stop())

    @property
    def clients(self) -> int:
        return len(self._workers)

    def view(self) -> dict[str, Any]:
        return {
            "proxy": self.proxy_id,
            "type": self.ctype,
            "target": self.target_name,
            "port": self.port,
            "address": f"127.0.0.1:{self.port}",
            "clients": self.clients,
            # Monotonic: a wall-clock jump must neither extend nor cut the remaining lifetime shown.
            "expires_in": 0 if self.stopped else max(0, int(self._expires_at - time.monotonic())),
        }

    async def stop(self) -> None:
        """Close the listener, cancel every client worker and wait until each has finished (PX-4)."""
        self.stopped = True
        if self._expiry is not None:
            self._expiry.cancel()
        if self._server is not None:
            self._server.close()
        workers = list(self._workers)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        # One more loop pass: transports close their sockets in a loop callback after abort()
        # (uvloop in its close phase), so the caller's "stopped" follows the actual close.
        await asyncio.sleep(0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.stopped or len(self._workers) >= MAX_CLIENTS:
            writer.transport.abort()  # PX-2: at most 16 clients; the extra one is closed, others unaffected
            if not self.stopped:
                log.info("proxy %s client limit reached", self.ctype)
            return
        task = asyncio.current_task()
        assert task is not None
        self._workers.add(task)
        self.accepted += 1
        try:
            await self.serve_client((reader, writer))
        finally:
            writer.transport.abort()
            self._workers.discard(task)

    async def serve_client(self, client: Streams) -> None:
        """Handshake under the deadline, then relay bytes until either side closes."""
        upstream: Streams | None = None
        try:
            try:
                async with asyncio.timeout(self.limits.handshake_seconds):
                    upstream = await self.handshake(client)
            except TimeoutError:
                self.failed_handshakes += 1
                log.info("proxy %s handshake deadline", self.ctype)
                return
            except MemoriesError as exc:
                self.failed_handshakes += 1
                log.info("proxy %s handshake refused code=%s", self.ctype, exc.code)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.refuse(client, exc), 5)
                return
            except (OSError, asyncio.IncompleteReadError, EOFError):
                self.failed_handshakes += 1
                return
            await relay(client, upstream)
        finally:
            if upstream is not None:
                upstream[1].transport.abort()
