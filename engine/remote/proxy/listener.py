"""The loopback listener every proxy shares: limits, handshake deadline, lifetime, stop-and-await (PX-1…PX-4)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from abc import ABC, abstractmethod
from typing import Any

from engine.errors import MemoriesError
from engine.remote.proxy.relay import relay
from engine.remote.targets import Target

__all__ = ["ProxyListener", "HANDSHAKE_SECONDS", "MAX_PACKET", "MAX_CLIENTS", "LIFETIME_SECONDS", "Streams"]

log = logging.getLogger("memories.remote.proxy")

HANDSHAKE_SECONDS = 30.0
MAX_PACKET = 64 * 1024
MAX_CLIENTS = 16
LIFETIME_SECONDS = 30 * 60.0

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
        loop = asyncio.get_running_loop()
        # PX-4: a proxy lives at most 30 minutes, whatever the traffic.
        self._expiry = loop.call_later(LIFETIME_SECONDS, lambda: loop.create_task(self.stop()))

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
            "expires_in": max(0, int(self.started + LIFETIME_SECONDS - time.time())),
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
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.stopped or len(self._workers) >= MAX_CLIENTS:
            writer.transport.abort()  # PX-2: at most 16 clients; the extra one is closed, others unaffected
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
                async with asyncio.timeout(HANDSHAKE_SECONDS):
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
