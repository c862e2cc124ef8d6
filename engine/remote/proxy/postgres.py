"""PostgreSQL proxy handshake (PX-2, PX-3), written out as explicit steps.

Local leg (plaintext, loopback): answer SSLRequest/GSSENCRequest with ``N``, read
the StartupMessage, keep only harmless session parameters and *replace* user and
database with the credential's. Upstream leg (:mod:`engine.remote.pg_wire`):
SSLRequest, exactly one byte back, TLS with hostname verification and the optional
client certificate, then SCRAM-SHA-256-PLUS (channel binding) or SCRAM-SHA-256 via
scramp, which checks the server nonce and signature. MD5 and cleartext are refused
unless the credential allows them; every other method is refused. The client is
told ``AuthenticationOk`` only after upstream said so, then the proxy forwards the
server's parameters up to ReadyForQuery and starts relaying.
"""

from __future__ import annotations

import ssl
import struct

from engine.errors import MemoriesError
from engine.remote import pg_wire
from engine.remote.pg_wire import PROTOCOL_3, SSL_REQUEST, message, read_message, startup_message
from engine.remote.proxy.listener import MAX_PACKET, ProxyListener, Streams
from engine.remote.tls import client_context

__all__ = ["PostgresProxy", "parse_startup", "startup_message", "error_response"]

GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
# Startup parameters a local client may set; user, database, options and replication never pass.
PASSTHROUGH = frozenset(
    {
        "application_name",
        "client_encoding",
        "datestyle",
        "timezone",
        "extra_float_digits",
        "intervalstyle",
        "search_path",
        "fallback_application_name",
    }
)
MAX_PRELUDE_MESSAGES = 1000


def parse_startup(payload: bytes) -> dict[str, str]:
    """Parse StartupMessage parameters (after the version); malformed input raises ``protocol_error``."""
    if not payload.endswith(b"\x00"):
        raise MemoriesError("protocol_error", "Malformed startup packet.")
    parts = payload[:-1].split(b"\x00")
    if parts and parts[-1] == b"":
        parts = parts[:-1]
    if len(parts) % 2:
        raise MemoriesError("protocol_error", "Malformed startup packet.")
    try:
        pairs = [(parts[i].decode("utf-8"), parts[i + 1].decode("utf-8")) for i in range(0, len(parts), 2)]
    except UnicodeDecodeError as exc:
        raise MemoriesError("protocol_error", "Malformed startup packet.") from exc
    return {k: v for k, v in pairs if k}


def error_response(code: str, text: str) -> bytes:
    fields = b"SFATAL\x00VFATAL\x00C" + code.encode() + b"\x00M" + text.encode() + b"\x00\x00"
    return message(b"E", fields)


class PostgresProxy(ProxyListener):
    _tls: ssl.SSLContext | None

    async def read_startup(self, client: Streams) -> dict[str, str]:
        reader, writer = client
        for _ in range(3):  # at most SSLRequest + GSSENCRequest before the real startup
            head = await reader.readexactly(8)
            length, code = struct.unpack("!II", head)
            if not 8 <= length <= MAX_PACKET:
                raise MemoriesError("protocol_error", "Malformed or oversized startup packet.")
            payload = await reader.readexactly(length - 8)
            if code in (SSL_REQUEST, GSSENC_REQUEST) and length == 8:
                writer.write(b"N")  # PX-3: the local leg stays plaintext on loopback
                await writer.drain()
                continue
            if code == PROTOCOL_3:
                return parse_startup(payload)
            if code == CANCEL_REQUEST and length == 16:
                await self.forward_cancel(head + payload)
                raise MemoriesError("protocol_error", "Cancel request forwarded.")  # ends this connection quietly
            raise MemoriesError("protocol_error", "Unsupported startup request.")
        raise MemoriesError("protocol_error", "Too many startup requests.")

    async def forward_cancel(self, request: bytes) -> None:
        """Pass a query cancel (pid + secret key the client got from BackendKeyData) to the server, over TLS."""
        _, writer = await self.connect_upstream()
        try:
            writer.write(request)
            await writer.drain()
        finally:
            writer.transport.abort()

    def tls_context(self) -> ssl.SSLContext | None:
        """One context per proxy: the client key is loaded once, and dropped with the proxy (PX-4)."""
        if not hasattr(self, "_tls"):
            self._tls = client_context(self.target)
        return self._tls

    async def connect_upstream(self) -> Streams:
        return await pg_wire.connect(self.target, self.host, self.tls_context(), limit=MAX_PACKET * 2)

    async def authenticate(self, upstream: Streams) -> str:
        """Upstream auth until AuthenticationOk (SCRAM-PLUS preferred over TLS); returns the method used."""
        return await pg_wire.authenticate(upstream, self.target)

    async def handshake(self, client: Streams) -> Streams:
        params = await self.read_startup(client)
        upstream = await self.connect_upstream()
        try:
            # PX-3: the local client's user/database never reach upstream.
            startup = {k: v for k, v in params.items() if k.lower() in PASSTHROUGH}
            startup["user"] = self.target.user
            startup["database"] = self.target.database or self.target.user
            upstream[1].write(startup_message(startup))
            await upstream[1].drain()
            await self.authenticate(upstream)
            client[1].write(message(b"R", struct.pack("!I", pg_wire.AUTH_OK)))
            # Forward ParameterStatus/BackendKeyData/notices up to ReadyForQuery, each bounded.
            for _ in range(MAX_PRELUDE_MESSAGES):
                kind, body = await read_message(upstream[0])
                client[1].write(message(kind, body))
                if kind == b"E":
                    raise MemoriesError("remote_error", "The PostgreSQL server ended the session during startup.")
                if kind == b"Z":
                    await client[1].drain()
                    return upstream
            raise MemoriesError("protocol_error", "The server's startup never became ready.")
        except BaseException:
            upstream[1].transport.abort()
            raise

    async def refuse(self, client: Streams, error: MemoriesError) -> None:
        code = {"remote_auth_failed": "28P01", "remote_tls_failed": "08006"}.get(error.code, "08004")
        client[1].write(error_response(code, f"memories proxy: [{error.code}] {error.message}"))
        await client[1].drain()
