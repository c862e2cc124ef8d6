"""Event-loop-native stdin/stdout for the SDK's ``stdio_server`` (a latency fix, no protocol code).

The SDK reads stdin and writes stdout through ``anyio.wrap_file``: every line read,
write and flush is a hop to a worker thread, which costs a few milliseconds per call
on a busy two-core machine. When stdin and stdout are pipes or sockets (always the
case when an agent client spawns ``memories mcp``), we hand ``stdio_server`` two small
adapters over asyncio pipe transports instead. Framing, JSON-RPC parsing and
validation stay in the SDK: these objects only move lines.

Like the SDK, the wire descriptors are moved to private duplicates and fd 0/1 are
pointed at ``/dev/null`` / stderr while serving, so stray output (a library printing
to stdout) can never corrupt the protocol stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["native_stdio", "usable"]

_LINE_LIMIT = 64 * 1024 * 1024  # one JSON-RPC message per line; requests are bounded far below this


def usable() -> bool:
    """True when fd 0 and fd 1 are pipes or sockets that the event loop can watch."""
    if sys.platform == "win32":
        return False
    try:
        modes = [os.fstat(fd).st_mode for fd in (0, 1)]
    except OSError:
        return False
    return all(stat.S_ISFIFO(m) or stat.S_ISSOCK(m) for m in modes)


class _Lines:
    """``async for line in stdin`` over an asyncio stream reader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


class _Writer:
    """``await stdout.write(text)`` / ``await stdout.flush()`` over an asyncio pipe transport."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _divert(fd: int, target_fd: int) -> int:
    """Move the wire on ``fd`` to a private duplicate and point ``fd`` at ``target_fd``."""
    private = os.dup(fd)
    os.set_inheritable(private, False)
    os.dup2(target_fd, fd)
    return private


@asynccontextmanager
async def native_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """Yield ``(stdin, stdout)`` objects for ``mcp.server.stdio.stdio_server(stdin, stdout)``."""
    loop = asyncio.get_running_loop()
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        wire_in = _divert(0, devnull)
    finally:
        os.close(devnull)
    wire_out = _divert(1, 2)
    reader = asyncio.StreamReader(limit=_LINE_LIMIT)
    in_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
    )
    out_transport, out_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(), os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(out_transport, out_protocol, None, loop)
    try:
        yield _Lines(reader), _Writer(writer)
    finally:
        with contextlib.suppress(Exception):
            await writer.drain()
        in_transport.close()
        out_transport.close()
