"""PostgreSQL proxy handshake (PX-2, PX-3), written out as explicit steps.

Local leg (plaintext, loopback): answer SSLRequest/GSSENCRequest with ``N``, read
the StartupMessage, keep only harmless session parameters and *replace* user and
database with the credential's. Upstream leg: SSLRequest, exactly one byte back,
TLS with hostname verification, then SCRAM-SHA-256 via scramp (which checks the
server nonce extends ours and verifies the server signature). MD5 and cleartext
are refused unless the credential allows them; every other method is refused.
The client is told ``AuthenticationOk`` only after upstream said so, then the
proxy forwards the server's parameters up to ReadyForQuery and starts relaying.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import struct

import scramp

from engine.errors import MemoriesError
from engine.remote.proxy.listener import MAX_PACKET, ProxyListener, Streams
from engine.remote.tls import client_context

__all__ = ["PostgresProxy", "parse_startup", "startup_message", "error_response"]

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
PROTOCOL_3 = 196608
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
AUTH_OK, AUTH_CLEARTEXT, AUTH_MD5, AUTH_SASL, AUTH_SASL_CONTINUE, AUTH_SASL_FINAL = 0, 3, 5, 10, 11, 12


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


def startup_message(params: dict[str, str]) -> bytes:
    body = struct.pack("!I", PROTOCOL_3)
    for key, value in params.items():
        body += key.encode() + b"\x00" + value.encode() + b"\x00"
    body += b"\x00"
    return struct.pack("!I", len(body) + 4) + body


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def error_response(code: str, text: str) -> bytes:
    fields = b"SFATAL\x00VFATAL\x00C" + code.encode() + b"\x00M" + text.encode() + b"\x00\x00"
    return message(b"E", fields)


async def read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    kind, length = head[:1], struct.unpack("!I", head[1:])[0]
    if not 4 <= length <= MAX_PACKET:
        raise MemoriesError("protocol_error", "The upstream sent an oversized or malformed message.")
    return kind, await reader.readexactly(length - 4)


def _server_error(body: bytes) -> tuple[str, str]:
    fields = {}
    for part in body.split(b"\x00"):
        if part:
            fields[part[:1]] = part[1:].decode("utf-8", "replace")
    return fields.get(b"C", ""), fields.get(b"M", "")


class PostgresProxy(ProxyListener):
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

    async def connect_upstream(self) -> Streams:
        context = client_context(self.target)
        try:
            reader, writer = await asyncio.open_connection(self.host, self.target.port, limit=MAX_PACKET * 2)
        except OSError as exc:
            raise MemoriesError("remote_unreachable") from exc
        try:
            if context is None:
                return reader, writer
            writer.write(struct.pack("!II", 8, SSL_REQUEST))
            await writer.drain()
            answer = await reader.readexactly(1)
            if answer != b"S":
                raise MemoriesError("remote_tls_failed", "The PostgreSQL server does not offer TLS.")
            if getattr(reader, "_buffer", b""):
                # Bytes after 'S' but before TLS would be injected plaintext (CVE-2021-23222).
                raise MemoriesError("protocol_error", "The server sent data before the TLS handshake.")
            try:
                await writer.start_tls(context, server_hostname=self.host)
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise MemoriesError("remote_tls_failed") from exc
            return reader, writer
        except BaseException:
            writer.transport.abort()
            raise

    async def authenticate(self, upstream: Streams) -> None:
        """Run the upstream auth exchange until AuthenticationOk; SCRAM must finish with a verified signature."""
        reader, writer = upstream
        target = self.target
        scram: scramp.ScramClient | None = None
        scram_verified = False
        while True:
            kind, body = await read_message(reader)
            if kind == b"E":
                code, _ = _server_error(body)
                if code in {"28P01", "28000"}:
                    raise MemoriesError("remote_auth_failed")
                raise MemoriesError("remote_error", f"The PostgreSQL server refused the login ({code or 'no code'}).")
            if kind == b"N":
                continue
            if kind != b"R" or len(body) < 4:
                raise MemoriesError("protocol_error", "Unexpected message during PostgreSQL authentication.")
            code = struct.unpack("!I", body[:4])[0]
            data = body[4:]
            if code == AUTH_OK:
                if scram is not None and not scram_verified:
                    # A server that skips SASLFinal never proved it knows the password.
                    raise MemoriesError("protocol_error", "The server ended SCRAM without its signature.")
                return
            if code == AUTH_SASL and scram is None:
                mechanisms = [m.decode("ascii", "replace") for m in data.split(b"\x00") if m]
                if "SCRAM-SHA-256" not in mechanisms:
                    raise MemoriesError("protocol_error", "The server offers no SCRAM-SHA-256.")
                scram = scramp.ScramClient(["SCRAM-SHA-256"], target.user, target.password)
                first = scram.get_client_first().encode()
                writer.write(message(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first))
            elif code == AUTH_SASL_CONTINUE and scram is not None and not scram_verified:
                try:
                    scram.set_server_first(data.decode("utf-8"))  # checks the nonce extends ours
                    final = scram.get_client_final().encode()
                except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
                    raise MemoriesError("protocol_error", "The server's SCRAM challenge is invalid.") from exc
                writer.write(message(b"p", final))
            elif code == AUTH_SASL_FINAL and scram is not None and not scram_verified:
                try:
                    scram.set_server_final(data.decode("utf-8"))  # verifies the server signature
                except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
                    raise MemoriesError("protocol_error", "The server's SCRAM signature did not verify.") from exc
                scram_verified = True
                continue
            elif code == AUTH_MD5 and "md5" in target.allow_auth and scram is None and len(data) == 4:
                inner = hashlib.md5((target.password + target.user).encode(), usedforsecurity=False).hexdigest()
                outer = hashlib.md5(inner.encode() + data, usedforsecurity=False).hexdigest()
                writer.write(message(b"p", b"md5" + outer.encode() + b"\x00"))
            elif code == AUTH_CLEARTEXT and "cleartext" in target.allow_auth and scram is None:
                writer.write(message(b"p", target.password.encode() + b"\x00"))
            else:
                raise MemoriesError("protocol_error", "The server asked for an authentication method this proxy refuses.")
            await writer.drain()

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
            client[1].write(message(b"R", struct.pack("!I", AUTH_OK)))
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
