"""The daemon's HTTP link to a Center (docs/center.md, HTTP API version 1).

A daemon in tickets mode asks ``GET /v1/tickets/{id}`` before it honours a ticket-made grant;
in saas mode it sends content requests to ``POST /v1/rpc``. Both run on the daemon's worker
threads, so this is a small blocking client on :mod:`http.client`: HTTPS with the system
trust store or the entry's own CA file, plain HTTP only to a loopback address (the config
refuses anything else), a few kept-alive connections per Center, and bounded reads.

Every failure is typed. The Center's own ``{"error": {"code", "message"}}`` passes through
when its code is one this engine knows (the content op ran there and answered as the daemon
would); a message is cut to one printable line, since it comes from another machine. A
connection that fails, times out or answers something that is not the protocol is
``center_unavailable``. Nothing here logs or repeats the bearer token.
"""

from __future__ import annotations

import http.client
import json
import queue
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Final

from engine.errors import CODES, MemoriesError

__all__ = ["CenterLink", "TicketStatus", "MAX_ANSWER_BYTES"]

# The protocol bounds request bodies at 1 MiB; an answer (a page of items) may be larger,
# but never without limit.
MAX_ANSWER_BYTES: Final = 16 * 1024 * 1024
_MAX_SMALL_ANSWER: Final = 64 * 1024
_TIMEOUT_SECONDS: Final = 10.0
_POOL_SIZE: Final = 8
# A kept-alive connection idle longer than this is closed instead of reused: servers close idle
# connections (aiohttp after 75 s), and a POST sent on one the server already closed cannot be
# retried safely (the server may have received it), so it must not be sent there at all.
_MAX_IDLE_SECONDS: Final = 15.0
_MAX_MESSAGE: Final = 300
TICKET_STATUSES: Final = frozenset({"valid", "revoked", "expired", "unknown"})


@dataclass(frozen=True)
class TicketStatus:
    status: str  # valid | revoked | expired | unknown
    generation: int


def _unavailable(why: str) -> MemoriesError:
    return MemoriesError("center_unavailable", f"The Center could not be used ({why}); nothing was changed.")


def _printable(text: object) -> str:
    if not isinstance(text, str):
        return ""
    line = "".join(ch if ch.isprintable() else " " for ch in text)
    return line[:_MAX_MESSAGE].strip()


class CenterLink:
    """One Center: its base URL, TLS context and a small pool of kept-alive connections."""

    def __init__(self, url: str, ca: str | None = None, timeout: float = _TIMEOUT_SECONDS) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._timeout = timeout
        self._context: ssl.SSLContext | None = None
        if self._https:
            # A private CA replaces the system store for this Center only (it pins nothing else).
            self._context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
        self._pool: queue.LifoQueue[tuple[http.client.HTTPConnection, float]] = queue.LifoQueue(maxsize=_POOL_SIZE)

    # -- the routes a daemon uses ----------------------------------------------------------
    def info(self) -> dict[str, Any]:
        answer = self._request("GET", "/v1/info", None, None, _MAX_SMALL_ANSWER)
        if answer.get("service") != "memories-center" or not isinstance(answer.get("key"), str):
            raise _unavailable("the answer is not a Memories Center's")
        return answer

    def ticket_status(self, ticket_id: str) -> TicketStatus:
        answer = self._request("GET", f"/v1/tickets/{ticket_id}", None, None, _MAX_SMALL_ANSWER)
        status, generation = answer.get("status"), answer.get("generation")
        if status not in TICKET_STATUSES or generation.__class__ is not int or generation < 1:
            raise _unavailable("its ticket status answer is malformed")
        return TicketStatus(str(status), int(generation))

    def rpc(self, body: dict[str, Any], token: str) -> Any:
        answer = self._request("POST", "/v1/rpc", body, token, MAX_ANSWER_BYTES)
        if "result" not in answer:
            raise _unavailable("its answer has no result")
        return answer["result"]

    def close(self) -> None:
        while True:
            try:
                self._pool.get_nowait()[0].close()
            except queue.Empty:
                return

    # -- transport -------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        while True:
            try:
                conn, idle_since = self._pool.get_nowait()
            except queue.Empty:
                return self._fresh()
            if time.monotonic() - idle_since < _MAX_IDLE_SECONDS:
                return conn
            conn.close()

    def _release(self, conn: http.client.HTTPConnection) -> None:
        try:
            self._pool.put_nowait((conn, time.monotonic()))
        except queue.Full:
            conn.close()

    def _request(self, method: str, path: str, body: dict[str, Any] | None, token: str | None, limit: int) -> dict[str, Any]:
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8") if body is not None else None
        headers = {"Accept": "application/json", "Host": self._host_header()}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        # A kept-alive connection the Center closed meanwhile fails on first use: one retry on a
        # fresh connection, and only for a connection that came from the pool (never a second
        # send of a request the Center may have received: a reset before any answer byte).
        for attempt in (0, 1):
            conn = self._connection() if attempt == 0 else self._fresh()
            try:
                conn.request(method, path, body=payload, headers=headers)
                response = conn.getresponse()
                raw = response.read(limit + 1)
            except ssl.SSLCertVerificationError:
                conn.close()
                raise _unavailable("its TLS certificate is not trusted") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if attempt == 0 and method == "GET":
                    continue
                raise _unavailable("the connection was closed") from None
            except (OSError, http.client.HTTPException):
                conn.close()
                raise _unavailable("no connection") from None
            if len(raw) > limit:
                conn.close()
                raise _unavailable("its answer is too large")
            if response.will_close:
                conn.close()
            else:
                self._release(conn)
            return self._decode(response.status, raw)
        raise _unavailable("no connection")  # pragma: no cover (the loop returns or raises)

    def _fresh(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _host_header(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return host if self._port is None else f"{host}:{self._port}"

    @staticmethod
    def _decode(status: int, raw: bytes) -> dict[str, Any]:
        try:
            answer = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise _unavailable(f"it answered HTTP {status} without JSON") from None
        if not isinstance(answer, dict):
            raise _unavailable(f"it answered HTTP {status} with an unexpected body")
        if status == 200:
            return answer
        error = answer.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        message = _printable(error.get("message")) if isinstance(error, dict) else ""
        if not isinstance(code, str) or code not in CODES or code == "internal":
            raise _unavailable(f"it answered HTTP {status}")
        raise MemoriesError(code, f"The Center refused: {message}" if message else None)
