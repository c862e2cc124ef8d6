"""An asyncio-native stdio transport for ``memories mcp``: the SDK's messages, no worker threads.

The SDK's ``stdio_server`` reads stdin and writes stdout through anyio's thread-backed
file wrappers, so every message costs worker-thread hops (a ``readline`` in; a
``write`` and a ``flush`` out) plus a task hop through a memory stream each way. On
this 2-core machine each hop is a wake-up that shows in the latency, and under
callgrind the stdio server with a canned engine answer ran 2.65 M instructions per call
with the SDK's transport against 2.10 M with this one (1.67 M with uvloop). Here stdin
and stdout are asyncio pipe transports registered with the event loop, and the streams
handed to ``Server.run`` parse and serialise in the calling task:

* ``StdinStream.receive`` reads one line and validates it with the SDK's own
  ``jsonrpc_message_adapter`` (a line that does not parse is handed on as an
  ``Exception`` item, as the SDK's transport does);
* ``StdoutStream.send`` dumps the message with ``model_dump_json(by_alias=True,
  exclude_unset=True)`` exactly as the SDK's transport does and writes the line in one
  call, so concurrent answers never interleave; it waits only when the pipe is full.

JSON-RPC routing, sessions and validation stay entirely in the SDK. As in the SDK's
transport, fd 0 and fd 1 are diverted (to the null device and to stderr) while serving,
so stray output from a library or a child process cannot corrupt the protocol stream;
the wire is served from private duplicates and both descriptors are restored on exit.

``stdio_streams`` yields ``None`` where this cannot work — Windows (no pipe transports
on the proactor loop for std handles) or a stdin/stdout that is not a pipe or a socket
(a file, a terminal, the null device cannot be registered with epoll), or one socket
serving as both — and the caller then falls back to the SDK's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

__all__ = ["StdinStream", "StdoutStream", "stdio_streams", "MAX_LINE_BYTES"]

# The largest message accepted on stdin. A memory_write body may hold 8 MiB of text, which
# JSON escaping can grow up to 6× (\u00XX for control characters): stay well above that.
MAX_LINE_BYTES = 128 * 1024 * 1024


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _same_file(a: int, b: int) -> bool:
    # One socket as both stdin and stdout (inetd style): asyncio's write transport watches
    # its fd for reads to notice a hang-up, so incoming requests would close it.
    first, second = os.fstat(a), os.fstat(b)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


class _ClosedOnExit:
    """``async with stream:`` closes it, as the SDK's anyio streams do."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class StdinStream(_ClosedOnExit):
    """The server's read stream: one JSON-RPC message per line of stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            line = await self._reader.readline()
        except ValueError as exc:  # longer than MAX_LINE_BYTES: the reader dropped it
            return exc
        if not line:
            raise anyio.EndOfStream
        try:
            # Decoded like the SDK's transport (UTF-8, undecodable bytes replaced) so a bad
            # byte gives the same parse error rather than a different one.
            message = types.jsonrpc_message_adapter.validate_json(line.decode("utf-8", "replace"), by_name=False)
        except Exception as exc:
            return exc
        return SessionMessage(message)

    async def aclose(self) -> None:
        self._closed = True

    def __aiter__(self) -> StdinStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _WriteProtocol(asyncio.BaseProtocol):
    """Flow control for the stdout pipe: ``send`` waits while the pipe is full."""

    def __init__(self) -> None:
        self._writable = asyncio.Event()
        self._writable.set()
        self.lost = asyncio.Event()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        self._writable.set()  # wake a waiting sender: it will find the stream broken

    async def writable(self) -> None:
        await self._writable.wait()


class StdoutStream(_ClosedOnExit):
    """The server's write stream: each message is one line on stdout."""

    def __init__(self, transport: asyncio.WriteTransport, protocol: _WriteProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    async def send(self, item: SessionMessage, /) -> None:
        if self._protocol.lost.is_set():
            raise anyio.BrokenResourceError  # the client went away
        if self._transport.is_closing():
            raise anyio.ClosedResourceError  # we closed it (aclose)
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        self._transport.write(data.encode("utf-8") + b"\n")
        await self._protocol.writable()
        if self._protocol.lost.is_set():
            raise anyio.BrokenResourceError

    async def aclose(self) -> None:
        if not self._transport.is_closing():
            # close() lets the transport flush what is buffered before the pipe closes.
            self._transport.close()
        with anyio.move_on_after(5):
            await self._protocol.lost.wait()


def _dup(fd: int) -> int:
    """A close-on-exec duplicate above the standard range (children never inherit the wire)."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _divert(fd: int) -> int:
    """Serve ``fd``'s wire from a private duplicate; point ``fd`` at a harmless target."""
    private = _dup(fd)
    try:
        target = os.open(os.devnull, os.O_RDONLY) if fd == 0 else os.dup(2)
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)
    except OSError:
        os.close(private)
        raise
    return private


@contextlib.asynccontextmanager
async def stdio_streams() -> AsyncIterator[tuple[StdinStream, StdoutStream] | None]:
    """The process's stdin/stdout as SDK read/write streams, or ``None`` (use the SDK's transport)."""
    if sys.platform == "win32" or not (_is_pipe_or_socket(0) and _is_pipe_or_socket(1)) or _same_file(0, 1):
        yield None
        return
    loop = asyncio.get_running_loop()
    sys.stdout.flush()  # nothing written before serving may end up after the diversion
    in_fd = _divert(0)
    try:
        out_fd = _divert(1)
    except OSError:
        os.dup2(in_fd, 0)
        os.close(in_fd)
        raise
    read_transport: asyncio.ReadTransport | None = None
    write_transport: asyncio.WriteTransport | None = None
    try:
        # The transports get their own duplicates (they close them); in_fd/out_fd are kept
        # to put the wire back on fd 0/1 afterwards, as the SDK's transport does.
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(_dup(in_fd), "rb", buffering=0)
        )
        write_transport, protocol = await loop.connect_write_pipe(_WriteProtocol, os.fdopen(_dup(out_fd), "wb", buffering=0))
        yield StdinStream(reader), StdoutStream(write_transport, protocol)
    finally:
        if write_transport is not None and not write_transport.is_closing():
            write_transport.close()
        if read_transport is not None:
            read_transport.close()
        for fd, private in ((0, in_fd), (1, out_fd)):
            with contextlib.suppress(OSError):
                os.dup2(private, fd)
            with contextlib.suppress(OSError):
                os.close(private)
