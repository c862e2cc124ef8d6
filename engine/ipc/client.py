"""Lean synchronous IPC client for the CLI (SPEC API-2, API-8).

Imported on the CLI's start path, which should cost little more than a bare interpreter
(issue 20; tests/unit/test_cli_imports.py checks what it imports): the C socket module
``_socket``, ``os``, ``sys``, ``time``, :mod:`engine.errors` and :mod:`engine.ipc.framing`
only. Not :mod:`socket` (its enums and :mod:`selectors` cost more than the request), and
no :mod:`asyncio`, :mod:`ctypes`, :mod:`pathlib`, :mod:`typing` or :mod:`engine.ipc.server`.

The client also authenticates the *server*: the CLI sends passwords over this socket, so
on Linux it checks with ``SO_PEERCRED`` that the listening process runs as our own uid;
elsewhere it checks that the socket directory belongs to us (the server only ever binds
inside a 0700 directory it owns).
"""

from __future__ import annotations

import _socket
import os
import sys
import time

from engine.errors import MemoriesError, error_from_wire
from engine.ipc.framing import (
    MAX_FRAME_BYTES,
    MAX_REQUEST_ID,
    PAYLOAD_KEY,
    WIRE_VERSION,
    encode_frame_parts,
    make_request,
    read_message_sync,
    size_text,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from pathlib import Path
    from types import TracebackType
    from typing import Any

__all__ = ["IpcClient"]

_UCRED_SIZE = 12  # struct ucred: pid, uid, gid as C ints


class IpcClient:
    """One connection to the engine; requests are sent and answered one at a time."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        timeout: float = 30.0,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        verify_server: bool = True,
        client_label: str | None = None,
    ) -> None:
        self._path = os.fspath(socket_path)
        # The program's name for itself, sent with every request ("dashboard"): the engine's
        # audit shows it as who acted; it grants nothing (engine/service/caller.py).
        self._client_label = client_label
        self._timeout = timeout
        self._max_frame_bytes = max_frame_bytes
        self._verify_server = verify_server
        self._sock: _socket.socket | None = None
        self._next_id = 1

    @property
    def socket_path(self) -> Path:
        from pathlib import Path  # not on the CLI's start path

        return Path(self._path)

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def drop_if_stale(self) -> None:
        """Close a pooled connection whose engine went away (restart, idle timeout).

        Peeking is safe: between requests the engine never sends anything, so readable
        data or EOF both mean the stream is no longer usable. Checking *before* sending
        lets a caller reconnect without ever risking a request being run twice.
        """
        if self._sock is None:
            return
        # A socket with a timeout would *wait* for data on EAGAIN: peek non-blocking.
        timeout = self._sock.gettimeout()
        self._sock.setblocking(False)
        try:
            self._sock.recv(1, _socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            self._sock.settimeout(timeout)
            return  # nothing to read: still open
        except OSError:
            pass
        self.close()

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> None:
        """Connect (idempotent). ``daemon_unavailable`` if the socket is missing/refused."""
        if self._sock is not None:
            return
        if not hasattr(_socket, "AF_UNIX"):
            raise MemoriesError("daemon_unavailable", "Unix sockets are unavailable; use the named pipe.")
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(self._timeout)
        try:
            sock.connect(self._path)
        except TimeoutError:
            sock.close()
            raise MemoriesError("timeout", "The engine did not accept the connection in time.") from None
        except PermissionError:
            sock.close()
            raise MemoriesError("permission_denied", "The engine socket is not accessible to this user.") from None
        except OSError:
            # FileNotFoundError, ConnectionRefusedError, ENOTDIR, path too long, ...
            sock.close()
            raise MemoriesError("daemon_unavailable") from None
        try:
            if self._verify_server:
                self._check_server(sock)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def _check_server(self, sock: _socket.socket) -> None:
        uid = os.getuid()
        try:
            if sys.platform.startswith("linux"):
                raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _UCRED_SIZE)
                owner = int.from_bytes(raw[4:8], sys.byteorder)  # uid_t: unsigned, native order
            else:
                owner = os.stat(os.path.dirname(self._path)).st_uid
        except OSError:
            owner = -1
        if owner != uid:
            raise MemoriesError("permission_denied", "The socket is not served by this user's engine.")

    def detach(self) -> socket.socket:
        """Connect (verified as by :meth:`connect`) and hand the socket over to the caller.

        For callers that speak the same framing on their own event loop (the MCP server):
        the connection check stays in one place. This client forgets the socket.
        """
        import socket  # the full class for asyncio; not on the CLI's start path

        self.connect()
        sock, self._sock = self._sock, None
        assert sock is not None
        return socket.socket(fileno=sock.detach())

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> IpcClient:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def _take_id(self) -> int:
        req_id = self._next_id
        self._next_id = 1 if req_id >= MAX_REQUEST_ID else req_id + 1
        return req_id

    def request(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request and return its ``result``, or raise its typed error.

        ``timeout`` (default: the client's) bounds the whole exchange; on timeout the
        connection is closed (a late answer must not be mistaken for the next one) and
        ``MemoriesError("timeout")`` is raised. The next request reconnects.

        ``bytes`` under ``body["payload"]`` travel as the frame's binary part, and an
        answer's binary part comes back as ``result["payload"]`` (Wire v1, FI-1).
        """
        if not isinstance(body, dict):
            raise MemoriesError("invalid_input", "A request body must be a JSON object.")
        req_id = self._take_id()
        if self._client_label is not None:
            body = {**body, "client_label": self._client_label}
        payload = body.get(PAYLOAD_KEY)
        if isinstance(payload, bytes | bytearray | memoryview):
            body = {k: v for k, v in body.items() if k != PAYLOAD_KEY}
            payload = bytes(payload) if isinstance(payload, memoryview) else payload
        else:
            payload = None
        try:
            parts = encode_frame_parts(make_request(req_id, body), max_bytes=self._max_frame_bytes, payload=payload)
        except MemoriesError as exc:
            if exc.code == "frame_too_large":
                raise _request_too_large(body, exc, self._max_frame_bytes) from None
            raise
        self.connect()
        sock = self._sock
        assert sock is not None
        limit = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        try:
            sock.settimeout(limit)
            # The engine may have answered (e.g. `busy`) and closed before reading our
            # request; what it sent is still readable, so go on and read it.
            try:
                for part in parts:
                    sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                pass
            response, answer_payload = read_message_sync(sock, self._max_frame_bytes, deadline=deadline)
        except TimeoutError:
            self.close()
            raise MemoriesError("timeout") from None
        except ConnectionError:
            # PeerClosed / TruncatedFrame / reset: no usable answer.
            self.close()
            raise MemoriesError("daemon_unavailable", "The engine closed the connection without answering.") from None
        except MemoriesError:
            self.close()  # a malformed answer leaves the stream in an unknown state
            raise
        except OSError:
            self.close()
            raise MemoriesError("daemon_unavailable") from None
        result = self._unwrap(req_id, response)
        if answer_payload is not None:
            if PAYLOAD_KEY in result:
                raise self._malformed()
            result[PAYLOAD_KEY] = answer_payload
        return result

    def _malformed(self) -> MemoriesError:
        self.close()
        return MemoriesError("internal", "The engine sent a malformed response.")

    def _unwrap(self, req_id: int, response: dict[str, Any]) -> dict[str, Any]:
        version = response.get("v")
        if type(version) is not int or version != WIRE_VERSION:
            self.close()
            raise MemoriesError("unsupported_wire_version")
        ok = response.get("ok")
        resp_id = response.get("id")
        if ok is True:
            result = response.get("result")
            if type(resp_id) is not int or resp_id != req_id or not isinstance(result, dict):
                raise self._malformed()
            return result
        if ok is False:
            if resp_id is None:
                # A connection-level answer (busy, framing trouble): the engine may close
                # this connection, so start afresh next time.
                self.close()
            elif type(resp_id) is not int or resp_id != req_id:
                raise self._malformed()
            raise error_from_wire(response.get("error"))
        raise self._malformed()


def _request_too_large(body: dict[str, Any], exc: MemoriesError, limit: int) -> MemoriesError:
    """Refuse an oversize request before sending it, saying what is too big, the limit
    (:data:`engine.ipc.framing.MAX_FRAME_BYTES` unless the client was given another bound)
    and what to do instead. Only our own field names are named, never their content."""
    size = exc.details.get("size")
    fields = [(len(v.encode("utf-8", "surrogatepass")), k) for k, v in body.items() if isinstance(v, str)]
    field_size, field = max(fields, default=(0, ""))
    if field_size > limit or not isinstance(size, int):
        what, amount = f"The {field or 'request'}", max(field_size, limit + 1)
    else:
        what, amount = "The request", size
    shown, cap = size_text(amount), size_text(limit)
    if shown == cap:
        shown, cap = f"{amount:,} bytes", f"{limit:,} bytes"
    if what == "The request" and field_size > limit // 2:
        shown += f" (its {field}: {size_text(field_size)} of text)"
    return MemoriesError(
        "frame_too_large",
        f"{what} is {shown}; one request to the engine may carry at most {cap}. "
        "Split the text into several notes (storing large files is not available yet).",
        size=size,
        limit=limit,
    )
