"""SSH proxy (PX-1): a loopback port forward through the daemon's authenticated SSH connection.

Local clients connect to 127.0.0.1:PORT with no key; each connection becomes a
``direct-tcpip`` channel to the configured destination (as seen from the SSH
server) over one SSH connection that the daemon opened with the credential,
host key verified (RM-2). The connection is opened on first use and closed
when the proxy stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncssh

from engine.errors import MemoriesError
from engine.remote.proxy.listener import ProxyListener, Streams
from engine.remote.sessions.ssh import ssh_connect
from engine.remote.targets import Target

__all__ = ["SshProxy"]

log = logging.getLogger("memories.remote.proxy")
CHUNK = 65536


class SshProxy(ProxyListener):
    def __init__(self, proxy_id: str, target: Target, host: str, dest_host: str, dest_port: int) -> None:
        super().__init__(proxy_id, target, host)
        self.dest_host, self.dest_port = dest_host, dest_port
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()

    async def handshake(self, client: Streams) -> Streams:  # pragma: no cover - serve_client is overridden
        raise NotImplementedError

    async def connection(self) -> asyncssh.SSHClientConnection:
        async with self._connecting:
            if self._conn is None or self._conn.is_closed():
                self._conn = await ssh_connect(self.target, self.host)
            return self._conn

    async def serve_client(self, client: Streams) -> None:
        try:
            async with asyncio.timeout(self.limits.handshake_seconds):
                conn = await self.connection()
                up_reader, up_writer = await conn.open_connection(self.dest_host, self.dest_port)
        except (MemoriesError, asyncssh.Error, OSError, TimeoutError) as exc:
            self.failed_handshakes += 1
            log.info("ssh proxy channel refused type=%s", type(exc).__name__)
            return
        reader, writer = client

        async def local_to_remote() -> None:
            while data := await reader.read(CHUNK):
                up_writer.write(data)
                await up_writer.drain()
            up_writer.write_eof()

        async def remote_to_local() -> None:
            while data := await up_reader.read(CHUNK):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()

        tasks = [asyncio.ensure_future(local_to_remote()), asyncio.ensure_future(remote_to_local())]
        try:
            # Either direction ending (EOF or error) ends the pair: a half-open tunnel is not kept.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            if not any(t.exception() for t in done if not t.cancelled()):
                await asyncio.wait(tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            up_writer.close()

    async def stop(self) -> None:
        await super().stop()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.abort()
