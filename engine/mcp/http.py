"""``memories mcp --http``: Streamable HTTP on 127.0.0.1 only, bearer-authenticated (AG-1).

A guard in front of the SDK's Streamable HTTP app checks, in this order:

1. ``Origin`` — when present it must be a loopback origin on our port, else **403**
   (a web page in the user's browser must not drive the vault: cross-site and DNS
   rebinding requests carry a foreign Origin);
2. ``Host`` — must name the loopback address we bound, else **421**;
3. ``Authorization: Bearer <token>`` (the scheme in any case, as RFC 9110 says schemes
   are case-insensitive; ``Basic`` and every other scheme are refused) with the token
   compared in constant time with the grant token the server was started with, else
   **401** with an empty body and no hint of why.

POST bodies are then screened (``engine.mcp.http_screen``) before the SDK sees them: errors
are JSON-RPC errors that never quote the input, an oversized body gets one too, and a
2025-03-26 session's batches are served.

The same token is then sent with every ``mcp_call``, so a grant revoked while the
server runs fails on its next call, and from then on the guard answers 401 too.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import sys
from pathlib import Path
from typing import Any, cast

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.errors import MemoriesError
from engine.mcp.http_screen import ScreenedPost
from engine.mcp.jsonrpc import MAX_MESSAGE_BYTES
from engine.mcp.listing import GrantView
from engine.mcp.server import DaemonBridge, build_server, check_token, configure_logging, run_loop

__all__ = ["BearerGuard", "McpApp", "build_app", "bind_loopback", "serve_http", "run_http", "LOOPBACK_HOST", "MCP_PATH"]

LOOPBACK_HOST = "127.0.0.1"
MCP_PATH = "/mcp"


async def _plain(send: Send, status: int, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-length", b"0"), (b"cache-control", b"no-store"), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


class BearerGuard:
    """ASGI middleware: Origin, Host and bearer checks before anything reaches the SDK."""

    def __init__(self, app: ASGIApp, token: str, port: int) -> None:
        self.app = app
        self._expected = token.encode()
        self._revoked = False
        self.port = port

    def revoke(self) -> None:
        """The daemon said the token is no longer valid: refuse every later request."""
        self._revoked = True

    def _origin_ok(self, origin: str | None) -> bool:
        if origin is None:
            return True  # not a browser (agent clients send no Origin)
        allowed = {f"http://{host}:{self.port}" for host in (LOOPBACK_HOST, "localhost", "[::1]")}
        return origin.lower() in allowed

    def _host_ok(self, host: str | None) -> bool:
        return host is not None and host.lower() in {f"{LOOPBACK_HOST}:{self.port}", f"localhost:{self.port}"}

    def _token_ok(self, authorization: str | None) -> bool:
        scheme, _, credentials = (authorization or "").partition(" ")
        presented = credentials.strip(" ").encode("utf-8", "replace")
        # The token is compared whatever the scheme (no timing difference between them).
        token_ok = hmac.compare_digest(presented, self._expected)
        return token_ok and scheme.lower() == "bearer" and not self._revoked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # no WebSocket endpoint here
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if not self._origin_ok(headers.get("origin")):
            await _plain(send, 403)
            return
        if not self._host_ok(headers.get("host")):
            await _plain(send, 421)
            return
        if not self._token_ok(headers.get("authorization")):
            await _plain(send, 401, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


def bind_loopback(port: int) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
    # protocol is spelled out, and without it Nagle + delayed ACK add ~40 ms to every answer.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK_HOST, port))
    except OSError as exc:
        sock.close()
        raise MemoriesError("io_error", f"Cannot listen on {LOOPBACK_HOST}:{port} ({exc.strerror}).") from None
    sock.listen(64)
    sock.setblocking(False)
    return sock


class McpApp:
    """The SDK's Streamable HTTP handler for ``/mcp`` and nothing else, without Starlette.

    ``Server.streamable_http_app`` wraps the same handler in a Starlette app (error and
    exception middleware, a router, a lifespan adapter); for one route that only adds
    work to every request. The session manager's lifespan is entered by ``_serve``.
    """

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager
        self._handler = ScreenedPost(StreamableHTTPASGIApp(manager))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan: uvicorn runs with lifespan="off", _serve runs the manager
        if scope["path"] != MCP_PATH:
            await _plain(send, 404)
            return
        await self._handler(scope, receive, send)


def build_app(bridge: DaemonBridge, token: str, port: int, grant: GrantView | None = None) -> BearerGuard:
    guard_box: list[BearerGuard] = []

    def on_unauthorized() -> None:
        for guard in guard_box:
            guard.revoke()

    server = build_server(bridge.call, on_unauthorized=on_unauthorized, grant=grant)
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,  # one JSON answer per POST: no SSE stream to set up for a simple call
        # ScreenedPost applies this limit first (answering a JSON-RPC error); the SDK's own
        # check, which would answer plain text, is set to the same size.
        max_request_body_size=MAX_MESSAGE_BYTES,
        # The SDK's own Host/Origin check, as Server.streamable_http_app sets it up for a
        # loopback host; BearerGuard has already applied the stricter one (our port only).
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{LOOPBACK_HOST}:*", "localhost:*", "[::1]:*"],
            allowed_origins=[f"http://{LOOPBACK_HOST}:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )
    guard = BearerGuard(McpApp(manager), token, port)
    guard_box.append(guard)
    return guard


class _OneSegmentTransport:
    """A transport that sends whatever one event-loop step wrote as one ``send``.

    uvicorn writes an answer's status line and headers, then its body, as two writes; with
    TCP_NODELAY that is two segments, and an agent's client on the other end wakes up for
    the ~110-byte head, parses it, finds no body yet and waits again. Both writes happen in
    the same step of the handler, so holding them until the end of that step (one
    ``call_soon``) joins them. Everything else is the real transport's; ``close`` sends what
    is held first.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(bytes(data))

    def _flush(self) -> None:
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _protocol_class() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol on a :class:`_OneSegmentTransport` (its h11 one if httptools is missing)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # httptools is optional in uvicorn; h11 writes the same way
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class OneSegmentProtocol(Base):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(cast(asyncio.Transport, _OneSegmentTransport(transport, self.loop)))

    return OneSegmentProtocol


async def _serve(app: BearerGuard, sock: socket.socket, bridge: DaemonBridge) -> None:
    import uvicorn

    inner = app.app
    assert isinstance(inner, McpApp)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",  # the session manager runs here instead
        server_header=False,
        proxy_headers=False,  # loopback only, never behind a proxy: skip the X-Forwarded-* rewrite
        ws="none",  # no WebSocket endpoint (the guard closes any attempt)
        # Agents call sporadically: keep the client's connection open between calls rather
        # than paying for a new one after uvicorn's default 5 s.
        timeout_keep_alive=120,
        http=_protocol_class(),  # an answer leaves in one segment (see _OneSegmentTransport)
    )
    server = uvicorn.Server(config)
    try:
        async with inner.manager.run():
            await server.serve(sockets=[sock])
    finally:
        await bridge.aclose()


def serve_http(socket_path: Path, token: str, port: int) -> int:
    configure_logging()
    bridge = DaemonBridge(socket_path, token)
    sock = bind_loopback(port)
    try:
        known = check_token(bridge)
        return run_http(bridge, token, sock, GrantView(bridge.whoami_async, known))
    finally:
        sock.close()


def run_http(bridge: DaemonBridge, token: str, sock: socket.socket, grant: GrantView | None = None) -> int:
    """Serve MCP over Streamable HTTP on ``sock`` (from ``bind_loopback``) until stopped."""
    bound = int(sock.getsockname()[1])
    app = build_app(bridge, token, bound, grant)
    print(f"memories mcp: listening on http://{LOOPBACK_HOST}:{bound}{MCP_PATH}", file=sys.stderr, flush=True)
    run_loop(_serve, app, sock, bridge)
    return 0
