"""An asyncio-native stdio transport for ``memories mcp``: the SDK's messages, no worker threads.

The SDK's ``stdio_server`` reads stdin and writes stdout through anyio's thread-backed
file wrappers, so every message costs worker-thread hops (a ``readline`` in; a
``write`` and a ``flush`` out) plus a task hop through a memory stream each way. On
this 2-core machine each hop is a wake-up that shows in the latency, and under
callgrind the stdio server with a canned engine answer ran 2.65 M instructions per call
with the SDK's transport against 2.10 M with this one (1.67 M with uvloop). Here stdin
and stdout are asyncio pipe transports registered with the event loop, and the streams
handed to ``Server.run`` parse and serialise in the calling task:

* ``StdinStream.receive`` reads one line and screens it (``engine.mcp.jsonrpc``): a valid
  message goes to the SDK (validated with its own ``jsonrpc_message_adapter``); a line the
  SDK would drop unanswered (invalid JSON, a lone surrogate, a batch, ``params`` of the
  wrong type) is answered here with the JSON-RPC error the spec names, so a client never
  waits for its own timeout (issue 27);
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
serving as both — and the caller then serves the same streams through blocking reads
and writes in worker threads (``threaded_stdio_streams``), as the SDK's transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import BinaryIO, Self

import anyio
import anyio.to_thread
from mcp.shared.message import SessionMessage

from engine.mcp.jsonrpc import MAX_MESSAGE_BYTES, Exchange, error_line, too_large

__all__ = ["StdinStream", "StdoutStream", "stdio_streams", "threaded_stdio_streams", "MAX_LINE_BYTES"]

# The largest message accepted on stdin: every call the tool schemas allow fits (see jsonrpc).
MAX_LINE_BYTES = MAX_MESSAGE_BYTES


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


class _Lines:
    """Where stdin's lines come from: an asyncio pipe, or a blocking file in a worker thread."""

    async def readline(self) -> bytes:
        raise NotImplementedError


class _PipeLines(_Lines):
    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def readline(self) -> bytes:
        """The next line (``b""`` at the end); ``ValueError`` for a line over the limit, which is
        skipped whole (``StreamReader.readline`` would hand its tail on as the next line)."""
        reader = self._reader
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the end of stdin, maybe after a last line
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            await reader.readexactly(exc.consumed)
        while True:  # discard up to and including the newline that ends the oversized line
            try:
                await reader.readuntil(b"\n")
                break
            except asyncio.LimitOverrunError as exc:
                await reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                break
        raise ValueError("line too long")


class _FileLines(_Lines):
    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    async def readline(self) -> bytes:
        line = await anyio.to_thread.run_sync(self._file.readline, MAX_LINE_BYTES + 1, abandon_on_cancel=True)
        if len(line) > MAX_LINE_BYTES:
            while line and not line.endswith(b"\n"):  # skip the rest of the oversized line
                line = await anyio.to_thread.run_sync(self._file.readline, 1 << 20, abandon_on_cancel=True)
            raise ValueError("line too long")
        return line


class StdinStream(_ClosedOnExit):
    """The server's read stream: one JSON-RPC message per line of stdin.

    Lines the SDK would drop are answered through ``out`` (the same wire's write stream) and
    never reach the SDK; a 2025-03-26 batch reaches it as its single messages.
    """

    def __init__(self, lines: asyncio.StreamReader | _Lines, out: StdoutStream, exchange: Exchange) -> None:
        self._lines = _PipeLines(lines) if isinstance(lines, asyncio.StreamReader) else lines
        self._out = out
        self._exchange = exchange
        self._queued: list[SessionMessage] = []
        self._closed = False
        self._first: bytes | None = None

    def prepend_line(self, line: bytes, answered_id: str | int | None) -> None:
        """A line read from stdin before this stream existed (engine/mcp_handshake.py), read
        first; ``answered_id``: the request it answered already, whose second answer is dropped."""
        self._first = line
        self._exchange.answered_early = answered_id

    async def receive(self) -> SessionMessage:
        if self._closed:
            raise anyio.ClosedResourceError
        while not self._queued:
            if self._first is not None:
                line, self._first = self._first, None
            else:
                try:
                    line = await self._lines.readline()
                except ValueError:  # longer than MAX_LINE_BYTES: the reader dropped it
                    await self._answer([error_line(too_large())])
                    continue
            if not line:
                raise anyio.EndOfStream
            messages, answers = self._exchange.inbound(line)
            await self._answer(answers)
            self._queued.extend(messages)
        return self._queued.pop(0)

    async def _answer(self, lines: list[bytes]) -> None:
        for line in lines:
            try:
                await self._out.write_line(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the client went away; reading on will find the end of stdin

    async def aclose(self) -> None:
        self._closed = True

    def __aiter__(self) -> StdinStream:
        return self

    async def __anext__(self) -> SessionMessage:
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

    def __init__(self, transport: asyncio.WriteTransport, protocol: _WriteProtocol, exchange: Exchange) -> None:
        self._transport = transport
        self._protocol = protocol
        self._exchange = exchange

    async def send(self, item: SessionMessage, /) -> None:
        for line in self._exchange.outbound(item.message):  # none while a batch is incomplete
            await self.write_line(line)

    async def write_line(self, line: bytes) -> None:
        if self._protocol.lost.is_set():
            raise anyio.BrokenResourceError  # the client went away
        if self._transport.is_closing():
            raise anyio.ClosedResourceError  # we closed it (aclose)
        self._transport.write(line + b"\n")
        await self._protocol.writable()
        if self._protocol.lost.is_set():
            raise anyio.BrokenResourceError

    async def aclose(self) -> None:
        if not self._transport.is_closing():
            # close() lets the transport flush what is buffered before the pipe closes.
            self._transport.close()
        with anyio.move_on_after(5):
            await self._protocol.lost.wait()


class _FileStdout(StdoutStream):
    """stdout as a blocking file written from a worker thread (a file, a terminal)."""

    def __init__(self, file: BinaryIO, exchange: Exchange) -> None:
        self._file = file
        self._exchange = exchange
        self._lock = anyio.Lock()  # one line at a time: concurrent answers never interleave
        self._closed = False

    def _write(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()

    async def write_line(self, line: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        async with self._lock:
            try:
                await anyio.to_thread.run_sync(self._write, line + b"\n")
            except OSError:
                raise anyio.BrokenResourceError from None

    async def aclose(self) -> None:
        self._closed = True


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
        exchange = Exchange()
        out = StdoutStream(write_transport, protocol, exchange)
        yield StdinStream(reader, out, exchange), out
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


@contextlib.asynccontextmanager
async def threaded_stdio_streams() -> AsyncIterator[tuple[StdinStream, StdoutStream]]:
    """stdin/stdout that cannot join the event loop (a file, a terminal, Windows): the same
    screening and answers, with blocking reads and writes in worker threads."""
    sys.stdout.flush()
    in_fd = _divert(0) if sys.platform != "win32" else os.dup(0)
    try:
        out_fd = _divert(1) if sys.platform != "win32" else os.dup(1)
    except OSError:
        if sys.platform != "win32":
            os.dup2(in_fd, 0)
        os.close(in_fd)
        raise
    # closefd=False: a worker thread may still block on a read after we return.
    reader = os.fdopen(in_fd, "rb", buffering=0, closefd=False)
    writer = os.fdopen(out_fd, "wb", buffering=0, closefd=False)
    try:
        exchange = Exchange()
        out = _FileStdout(writer, exchange)
        yield StdinStream(_FileLines(reader), out, exchange), out
    finally:
        if sys.platform != "win32":
            for fd, private in ((0, in_fd), (1, out_fd)):
                with contextlib.suppress(OSError):
                    os.dup2(private, fd)
        with contextlib.suppress(OSError):
            os.close(out_fd)
