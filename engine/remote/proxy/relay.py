"""Byte relay after a proxy handshake: two asyncio protocols wired back to back.

Once the handshake is done the proxy no longer parses anything, so each side's
transport gets a tiny protocol that writes straight into the other transport,
with flow control in both directions (a slow reader pauses the fast writer).
This avoids a read/write coroutine round trip per packet (PX benchmarks).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

__all__ = ["relay"]


class _Half(asyncio.Protocol):
    """Attached to transport X: what X receives goes to ``peer``; X's back-pressure pauses ``peer``."""

    def __init__(self, peer: asyncio.Transport, done: asyncio.Future[None]) -> None:
        self.peer = peer
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.peer.write(data)

    def eof_received(self) -> bool | None:
        self._finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def pause_writing(self) -> None:
        if not self.peer.is_closing():
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if not self.peer.is_closing():
            self.peer.resume_reading()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _leftover(reader: asyncio.StreamReader) -> bytes:
    # Bytes the stream reader already buffered past the handshake belong to the relay.
    # StreamReader has no public accessor for them, hence the private attribute.
    buffer: Any = getattr(reader, "_buffer", b"")
    data = bytes(buffer)
    buffer.clear()
    return data


async def relay(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter], upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]
) -> None:
    """Forward both ways until either side closes; then close both."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    # Stream transports are full read/write transports; the StreamWriter API just types them narrowly.
    c_transport = cast(asyncio.Transport, client[1].transport)
    u_transport = cast(asyncio.Transport, upstream[1].transport)
    pending_c, pending_u = _leftover(client[0]), _leftover(upstream[0])
    c_transport.set_protocol(_Half(u_transport, done))
    u_transport.set_protocol(_Half(c_transport, done))
    if pending_c:
        u_transport.write(pending_c)
    if pending_u:
        c_transport.write(pending_u)
    for transport in (c_transport, u_transport):
        if not transport.is_reading():
            transport.resume_reading()
    try:
        await done
    finally:
        c_transport.abort()
        u_transport.abort()
