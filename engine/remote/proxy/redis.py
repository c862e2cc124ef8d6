"""Redis proxy (PX-2): direct TLS upstream, AUTH with the credential, then a byte relay.

The local client sends nothing first in RESP, so the proxy authenticates
upstream right after accept, reads exactly one bounded reply line per command
it sent, and only then starts relaying the client's bytes.
"""

from __future__ import annotations

import asyncio
import ssl

from engine.errors import MemoriesError
from engine.remote.proxy.listener import MAX_PACKET, ProxyListener, Streams
from engine.remote.tls import client_context

__all__ = ["RedisProxy", "resp_command"]


def resp_command(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


async def read_simple_reply(reader: asyncio.StreamReader) -> bytes:
    """One RESP simple-string or error line, bounded (a bulk reply here is a protocol error)."""
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError as exc:
        raise MemoriesError("protocol_error", "The Redis server sent an oversized reply.") from exc
    if len(line) > MAX_PACKET:
        raise MemoriesError("protocol_error", "The Redis server sent an oversized reply.")
    return line[:-2]


class RedisProxy(ProxyListener):
    async def handshake(self, client: Streams) -> Streams:
        context = client_context(self.target)
        try:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.target.port,
                ssl=context,
                server_hostname=self.host if context else None,
                limit=MAX_PACKET * 2,
            )
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise MemoriesError("remote_tls_failed") from exc
        except OSError as exc:
            raise MemoriesError("remote_unreachable") from exc
        try:
            commands: list[tuple[str, ...]] = []
            if self.target.password:
                user = self.target.user
                commands.append(("AUTH", user, self.target.password) if user else ("AUTH", self.target.password))
            if self.target.database.isdigit() and self.target.database != "0":
                commands.append(("SELECT", self.target.database))
            for command in commands:
                writer.write(resp_command(*command))
                await writer.drain()
                reply = await read_simple_reply(reader)
                if reply.startswith(b"-"):
                    if command[0] == "AUTH":
                        raise MemoriesError("remote_auth_failed")
                    raise MemoriesError("remote_error", "The Redis server refused to select the database.")
                if not reply.startswith(b"+"):
                    raise MemoriesError("protocol_error", "Unexpected Redis reply during the proxy handshake.")
            return reader, writer
        except BaseException:
            writer.transport.abort()
            raise

    async def refuse(self, client: Streams, error: MemoriesError) -> None:
        client[1].write(f"-ERR memories proxy: [{error.code}] {error.message}\r\n".encode())
        await client[1].drain()
