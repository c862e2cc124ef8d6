"""Unix-domain-socket IPC server (SPEC API-2, API-8).

Security and robustness properties:

* The socket lives in a directory that is ours and mode 0700; the socket is 0600 and is
  created under umask 0o177 so it is never observable with wider permissions.
* Every connection's peer UID (``SO_PEERCRED`` / ``getpeereid``) must equal ours; others
  are closed at once without a byte of response.
* At most ``max_connections`` connections are served; one more gets a ``busy`` frame.
* Each connection is its own task: header+body must arrive within ``frame_read_timeout``
  of the first byte, the next frame must start within ``idle_timeout``, and frames are
  bounded by ``max_frame_bytes`` (checked on the header, before reading the body). A slow,
  stalled or garbage-spewing client therefore only ever costs its own task.
* Handler failures become typed error frames. Unexpected exceptions become ``internal``
  with a fixed sentence; only the exception *type* is logged. Frame contents are never
  logged.
* :meth:`IpcServer.hand_over` (the engine re-executing itself at lock, ST-12) stops
  accepting without closing the listening socket, lets every connection finish the request
  it is serving, and returns duplicates of the listening socket and of every idle
  connection; the successor passes them to :meth:`IpcServer.start` (``adopt``). A client
  therefore never finds the socket missing, and a connection it keeps (the MCP server's
  pool, a CLI command's several requests) goes on working: what it sends meanwhile waits
  in the kernel for the new process.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.home import prepare_runtime_dir
from engine.ipc.framing import (
    MAX_FRAME_BYTES,
    PAYLOAD_KEY,
    TruncatedFrame,
    encode_frame,
    encode_frame_parts,
    frame_too_large,
    make_error,
    make_ok,
    parse_request,
    read_message,
)
from engine.ipc.peer import Peer, peer_of

__all__ = [
    "IpcServer",
    "Handler",
    "Handover",
    "dispatch",
    "dispatch_parts",
    "prepare_socket_dir",
    "INTERNAL_MESSAGE",
]

log = logging.getLogger("memories.ipc")

Handler = Callable[[dict[str, Any], Peer], Awaitable[dict[str, Any]]]

INTERNAL_MESSAGE = "The engine hit an unexpected error; nothing was changed."
# sun_path is 108 bytes on Linux and 104 on macOS/BSD, including the terminating NUL.
_MAX_SUN_PATH = 103
_SOCKET_UMASK = 0o177
_DIR_MODE = 0o700
_SOCKET_MODE = 0o600


def _encode_error(req_id: int | None, error: MemoriesError, max_bytes: int) -> bytes:
    try:
        return encode_frame(make_error(req_id, error), max_bytes=max_bytes)
    except MemoriesError:
        # The error's details were not encodable (or huge): fall back to the bare code.
        bare = MemoriesError(error.code, error.message)
        try:
            return encode_frame(make_error(req_id, bare), max_bytes=max_bytes)
        except MemoriesError:
            fallback = MemoriesError("internal", INTERNAL_MESSAGE)
            return encode_frame(make_error(req_id, fallback))


async def dispatch(req_id: int, body: dict[str, Any], peer: Peer, handler: Handler, max_bytes: int) -> bytes:
    """Run ``handler`` for one parsed request and return the encoded response frame.

    Used by the Windows named-pipe server; see :func:`dispatch_parts`.
    """
    return b"".join(await dispatch_parts(req_id, body, peer, handler, max_bytes))


async def dispatch_parts(
    req_id: int, body: dict[str, Any], peer: Peer, handler: Handler, max_bytes: int
) -> list[bytes | bytearray]:
    """:func:`dispatch` as the frame's parts, written one after the other: an answer's
    binary part (up to 8 MiB of file chunks) is sent as it is, never joined into a copy."""
    try:
        result = await handler(body, peer)
    except MemoriesError as exc:
        return [_encode_error(req_id, exc, max_bytes)]
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the whole point: never crash the daemon
        # Never str(exc): messages may carry secrets. The type name is safe to log.
        log.error("ipc handler failed with %s", type(exc).__name__)
        return [_encode_error(req_id, MemoriesError("internal", INTERNAL_MESSAGE), max_bytes)]
    if not isinstance(result, dict):
        log.error("ipc handler returned %s instead of a dict", type(result).__name__)
        return [_encode_error(req_id, MemoriesError("internal", INTERNAL_MESSAGE), max_bytes)]
    payload = result.get(PAYLOAD_KEY)
    if isinstance(payload, bytes | bytearray):  # the answer's binary part (FI-1 chunks)
        result = {k: v for k, v in result.items() if k != PAYLOAD_KEY}
    else:
        payload = None
    try:
        return encode_frame_parts(make_ok(req_id, result), max_bytes=max_bytes, payload=payload)
    except MemoriesError as exc:
        if exc.code == "frame_too_large":
            # The stream is intact (nothing was written): report it and keep going.
            size = exc.details.get("size")
            too_large = (
                frame_too_large(size, max_bytes, "The answer")
                if isinstance(size, int)
                else MemoriesError("frame_too_large", "The answer exceeds the frame size limit.")
            )
            return [_encode_error(req_id, too_large, max_bytes)]
        log.error("ipc handler returned a result that is not valid JSON")
        return [_encode_error(req_id, MemoriesError("internal", INTERNAL_MESSAGE), max_bytes)]


def prepare_socket_dir(directory: Path) -> None:
    """Create ``directory`` as 0700, or verify an existing one is ours and 0700.

    An existing directory owned by us with a wider mode is tightened; one owned by someone
    else, or a symlink, is refused with ``permission_denied``. Checks and the chmod go
    through one ``O_NOFOLLOW`` descriptor, so the path cannot be swapped in between.
    """
    prepare_runtime_dir(os.fspath(directory / "engine.sock"))  # the shared-/tmp fallback's parent
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        directory.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # lost a race: verify what is there
            os.mkdir(directory, _DIR_MODE)
        st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode):
        raise MemoriesError("permission_denied", "The socket directory is a symbolic link.")
    if not stat.S_ISDIR(st.st_mode):
        raise MemoriesError("io_error", "The socket directory path is not a directory.")
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        # It was a real directory a moment ago: someone swapped it. Refuse.
        raise MemoriesError("permission_denied", "The socket directory changed while being checked.") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise MemoriesError("permission_denied", "The socket directory is owned by another user.")
        if stat.S_IMODE(st.st_mode) != _DIR_MODE:
            os.fchmod(fd, _DIR_MODE)
            if stat.S_IMODE(os.fstat(fd).st_mode) != _DIR_MODE:
                raise MemoriesError("permission_denied", "The socket directory mode could not be set to 0700.")
    finally:
        os.close(fd)


def _remove_stale_socket(path: Path) -> None:
    """Remove a socket file left by a dead engine; refuse a live one or a non-socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise MemoriesError("io_error", "Something that is not a socket occupies the socket path.")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        raise MemoriesError("store_in_use") from None
    finally:
        probe.close()
    raise MemoriesError("store_in_use")


@dataclass
class Handover:
    """Open descriptors a successor process serves on: the listening socket, and the
    connections that were between requests (no byte of a next request read)."""

    listener: int
    connections: list[int] = field(default_factory=list)

    def fds(self) -> list[int]:
        return [self.listener, *self.connections]


class _HandOver(Exception):
    """Raised inside a connection task: its socket was handed over; end without closing it."""


class IpcServer:
    """Serve Wire v1 requests on a Unix domain socket (SPEC API-2)."""

    def __init__(
        self,
        socket_path: Path,
        handler: Handler,
        *,
        max_connections: int = 16,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        frame_read_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        write_timeout: float = 30.0,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if not 0 < max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError("max_frame_bytes must be in 1..MAX_FRAME_BYTES")
        self._path = Path(socket_path)
        self._handler = handler
        self._max_connections = max_connections
        self._max_frame_bytes = max_frame_bytes
        self._frame_read_timeout = frame_read_timeout
        self._idle_timeout = idle_timeout
        self._write_timeout = write_timeout
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = False
        self._active = 0
        # Requests read and not yet answered, and an event set while there are none: a stop
        # waits for it (``settle``) so that the request that asked to stop hears its answer.
        self._answering = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._inode: tuple[int, int] | None = None
        self._uid = os.getuid()
        self._listener: socket.socket | None = None
        # Hand-over (ST-12): tasks waiting for a next request's first byte, and the
        # descriptors of connections already handed over.
        self._draining = False
        self._idle: set[asyncio.Task[None]] = set()
        self._handed: list[int] = []
        self._kept_listener: int | None = None

    @property
    def socket_path(self) -> Path:
        return self._path

    @property
    def active_connections(self) -> int:
        """Connections currently being served (not counting refused / busy ones)."""
        return self._active

    async def start(self, adopt: Handover | None = None) -> None:
        """Prepare the directory, bind the 0600 socket and start accepting.

        ``adopt``: serve the listening socket and connections a predecessor handed over
        (:meth:`hand_over`) instead of binding a new one.
        """
        if self._server is not None:
            raise RuntimeError("server already started")
        if adopt is not None:
            await self._adopt(adopt)
            return
        if len(os.fsencode(self._path)) > _MAX_SUN_PATH:
            raise MemoriesError("io_error", "The socket path is too long for this platform.")
        prepare_socket_dir(self._path.parent)
        _remove_stale_socket(self._path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # bind() creates the socket file with 0777 & ~umask: set the umask so it is born
            # 0600 (no window where it is wider). umask is process-wide; for this instant
            # other threads would only create files *more* restrictive than intended.
            old_umask = os.umask(_SOCKET_UMASK)
            try:
                sock.bind(os.fspath(self._path))
            finally:
                os.umask(old_umask)
            os.chmod(self._path, _SOCKET_MODE)  # belt and braces; the dir is ours and 0700
            st = os.lstat(self._path)
            self._inode = (st.st_dev, st.st_ino)
            sock.listen(max(64, self._max_connections * 2))
            await self._listen(sock)
        except BaseException:
            sock.close()
            self._unlink_own_socket()
            raise

    async def _listen(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        # 3.13 would unlink the path when the asyncio server closes; the path is ours to
        # remove (_unlink_own_socket), and a hand-over must leave it in place.
        extra: dict[str, Any] = {"cleanup_socket": False} if sys.version_info >= (3, 13) else {}
        self._server = await asyncio.start_unix_server(self._on_connect, sock=sock, **extra)
        self._listener = sock

    async def _adopt(self, handover: Handover) -> None:
        sock = socket.socket(fileno=handover.listener)
        try:
            if sock.family != socket.AF_UNIX or os.fsencode(sock.getsockname()) != os.fsencode(self._path):
                raise MemoriesError("io_error", "The engine was handed a socket that is not its own.")
            st = os.lstat(self._path)
            self._inode = (st.st_dev, st.st_ino)
            await self._listen(sock)
        except BaseException:
            sock.close()
            for fd in handover.connections:
                os.close(fd)
            raise
        loop = asyncio.get_running_loop()
        for fd in handover.connections:
            conn = socket.socket(fileno=fd)
            conn.setblocking(False)
            # What asyncio.start_unix_server does for an accepted socket.
            reader = asyncio.StreamReader(limit=2**16, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, self._on_connect, loop=loop)
            try:
                await loop.connect_accepted_socket(lambda: protocol, sock=conn)  # noqa: B023 (awaited at once)
            except OSError:
                conn.close()  # the client went away meanwhile

    def stop_accepting(self) -> None:
        """Begin a hand-over (idempotent, synchronous): stop accepting and reading next
        requests. Called before the answer that caused it is written, so a client that sends
        its next request at once finds it waiting for the successor, not for this process."""
        if self._draining or self._server is None or self._listener is None:
            return
        self._kept_listener = os.dup(self._listener.fileno())
        self._draining = True
        server, self._server = self._server, None
        server.close()  # asyncio's descriptor only: the duplicate keeps the socket listening
        for task in list(self._idle):
            task.cancel()

    async def hand_over(self, timeout: float) -> Handover:
        """Stop accepting, let each connection finish its request, and give back duplicates
        of the listening socket and of the idle connections (inheritable, for ``exec``).

        Connections still inside a request after ``timeout`` are closed (their client hears
        "closed without answering"). The socket file stays for the successor.
        """
        self.stop_accepting()
        listener = self._kept_listener
        assert listener is not None, "hand_over on a server that was not serving"
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        self._inode = None  # the socket file stays for the successor: close() must not unlink it
        await self.close()  # what is left: requests that did not end in time
        handover = Handover(listener, list(self._handed))
        self._handed.clear()
        for fd in handover.fds():
            os.set_inheritable(fd, True)
        return handover

    async def settle(self, timeout: float) -> None:
        """Wait until every request read so far has been answered, at most ``timeout`` seconds.

        A stop (the `shutdown` op) ends the serving loop while its own answer may still be on
        its way out; :meth:`close` aborts every connection, so without this its client could
        hear "closed without answering" (seen once in a bench run). A request still running
        after ``timeout`` (a long wait) is cut by close() as before."""
        if self._answering:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._settled.wait()

    async def close(self) -> None:
        """Stop listening, close every connection and remove the socket file."""
        self._closing = True
        self._listener = None
        server, self._server = self._server, None
        if server is not None:
            server.close()
        # Abort the transports as well as cancelling: on Python 3.11 a cancellation that
        # races with a completing wait_for()/drain() can be swallowed, and an aborted
        # transport makes every pending read return promptly regardless.
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        if server is not None:
            await server.wait_closed()
        self._unlink_own_socket()

    def _unlink_own_socket(self) -> None:
        # Only remove the file we bound: a newer engine may own the path by now.
        if self._inode is None:
            return
        try:
            st = os.lstat(self._path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self._path)
        except FileNotFoundError:
            pass
        self._inode = None

    # ------------------------------------------------------------------ connections

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if self._closing:
            writer.transport.abort()
            return
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        counted = False
        try:
            sock = writer.get_extra_info("socket")
            try:
                peer = peer_of(sock)
            except MemoriesError:
                log.warning("ipc: refused a connection whose credentials are unavailable")
                return
            if peer.uid != self._uid:
                log.warning("ipc: refused a connection from uid %d", peer.uid)
                return
            if self._active >= self._max_connections:
                log.warning("ipc: refused a connection: %d already open", self._active)
                busy = _encode_error(None, MemoriesError("busy"), self._max_frame_bytes)
                await self._send(writer, busy)
                return
            self._active += 1
            counted = True
            await self._serve(reader, writer, peer)
        except (ConnectionError, TimeoutError):
            pass  # peer went away or stopped reading: nothing to answer
        except _HandOver:
            pass  # the successor serves this connection: its transport was let go, not closed
        except asyncio.CancelledError:
            # Only close() cancels us, and this is the task's top-level coroutine: end
            # normally (3.11's stream callback would otherwise log the cancellation).
            pass
        except OSError as exc:
            log.warning("ipc: connection failed with %s", type(exc).__name__)
        except Exception as exc:  # never let asyncio log a message/traceback
            log.error("ipc: connection task failed with %s", type(exc).__name__)
        finally:
            if counted:
                self._active -= 1
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _send(self, writer: asyncio.StreamWriter, frame: bytes | list[bytes | bytearray]) -> None:
        for part in [frame] if isinstance(frame, bytes) else frame:
            # A view: what the socket does not take at once is copied into the transport's
            # buffer once, not first sliced into a copy of its own.
            writer.write(memoryview(part))
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
        async with asyncio.timeout(self._write_timeout):
            await writer.drain()

    async def _first_byte(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
        """Wait for a next request's first byte (None: clean EOF). While the server hands over,
        a connection with nothing read of a next request is handed over instead (_HandOver)."""
        task = asyncio.current_task()
        assert task is not None
        if not self._draining:
            self._idle.add(task)
            try:
                async with asyncio.timeout(self._idle_timeout):
                    return await reader.readexactly(1)
            except asyncio.IncompleteReadError:
                return None
            except asyncio.CancelledError:
                if not self._draining or self._closing:
                    raise
                task.uncancel()  # hand_over's cancel: a readexactly that was cancelled consumed nothing
            finally:
                self._idle.discard(task)
        if getattr(reader, "_buffer", b""):
            # Bytes of a next request were already read from the socket: serve it here first.
            return await reader.readexactly(1)
        if reader.at_eof():
            return None
        sock = writer.get_extra_info("socket")
        self._handed.append(os.dup(sock.fileno()))
        writer.transport.abort()  # closes our descriptor only; the duplicate keeps the connection
        raise _HandOver

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer) -> None:
        max_bytes = self._max_frame_bytes
        while True:
            try:
                first = await self._first_byte(reader, writer)
                if first is None:
                    return  # clean EOF
                message = await read_message(
                    reader,
                    max_bytes,
                    first=first,
                    frame_timeout=self._frame_read_timeout,
                )
            except (TruncatedFrame, TimeoutError):
                return  # close silently: nobody is there to read an answer
            except MemoriesError as exc:
                await self._send(writer, _encode_error(None, exc, max_bytes))
                if exc.code == "frame_too_large":
                    return  # the body was not read: the stream cannot be resynchronized
                continue  # invalid_json: the frame boundary is intact
            if message is None:
                return  # clean EOF
            obj, payload = message
            try:
                req_id, body = parse_request(obj)
                if payload is not None:
                    if PAYLOAD_KEY in body:
                        raise MemoriesError("invalid_request", "The request has both a binary part and a `payload` field.")
                    body = {**body, PAYLOAD_KEY: payload}
            except MemoriesError as exc:
                await self._send(writer, _encode_error(None, exc, max_bytes))
                continue
            self._answering += 1
            self._settled.clear()
            try:
                response = await dispatch_parts(req_id, body, peer, self._handler, max_bytes)
                await self._send(writer, response)
            finally:
                self._answering -= 1
                if not self._answering:
                    self._settled.set()
