"""MySQL/MariaDB proxy handshake (PX-2, PX-3).

Upstream first: read the server greeting, send SSLRequest and switch to TLS
(hostname verified, with the credential's client certificate if it names one)
unless the credential disables TLS, then answer with the
credential's user, database and a scramble for the server's plugin
(``mysql_native_password``, ``caching_sha2_password`` or MariaDB's
``client_ed25519``), following at most two auth switches. caching_sha2's full
authentication sends the password itself, so it happens only over TLS.
``mysql_clear_password`` is refused unless the credential allows cleartext.

Local leg (plaintext, loopback): the client gets a greeting that mirrors the
server's capabilities minus TLS and compression; its user, password and
database are read and ignored. It is told OK only after upstream said OK.
"""

from __future__ import annotations

import asyncio
import os
import ssl

from engine.errors import MemoriesError
from engine.remote.mysql_auth import access_denied, caching_sha2_scramble, ed25519_signature, native_scramble
from engine.remote.proxy.listener import MAX_PACKET, ProxyListener, Streams
from engine.remote.tls import client_context, tls_error

__all__ = ["MysqlProxy", "Greeting", "parse_greeting", "build_greeting", "read_packet", "packet", "switch_nonce"]

CLIENT_LONG_PASSWORD = 0x1
CLIENT_CONNECT_WITH_DB = 0x8
CLIENT_COMPRESS = 0x20
CLIENT_PROTOCOL_41 = 0x200
CLIENT_SSL = 0x800
CLIENT_SECURE_CONNECTION = 0x8000
CLIENT_PLUGIN_AUTH = 0x80000
CLIENT_CONNECT_ATTRS = 0x100000
CLIENT_PLUGIN_AUTH_LENENC = 0x200000
CLIENT_ZSTD = 0x4000000
# Capabilities the local leg never offers: TLS (loopback plaintext), compression, attributes.
LOCAL_STRIP = CLIENT_SSL | CLIENT_COMPRESS | CLIENT_ZSTD | CLIENT_CONNECT_ATTRS
# Capabilities that only shape the login exchange, chosen by the proxy for the upstream leg.
LOGIN_ONLY = LOCAL_STRIP | CLIENT_CONNECT_WITH_DB | CLIENT_PLUGIN_AUTH_LENENC | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH

NATIVE, CACHING_SHA2, ED25519, CLEAR = "mysql_native_password", "caching_sha2_password", "client_ed25519", "mysql_clear_password"
ER_ACCESS_DENIED = 1045
MAX_AUTH_ROUNDS = 4


def packet(seq: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload


async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readexactly(4)
    length = int.from_bytes(head[:3], "little")
    if length > MAX_PACKET:
        raise MemoriesError("protocol_error", "Oversized MySQL handshake packet.")
    return head[3], await reader.readexactly(length)


class Greeting:
    def __init__(
        self,
        version: bytes,
        conn_id: bytes,
        scramble: bytes,
        caps: int,
        charset: int,
        status: bytes,
        reserved: bytes,
        plugin: str,
    ) -> None:
        self.version, self.conn_id, self.scramble, self.caps = version, conn_id, scramble, caps
        self.charset, self.status, self.reserved, self.plugin = charset, status, reserved, plugin


# Scramble sizes of the methods the proxy answers: an AuthSwitchRequest carries the scramble,
# followed (for the MySQL methods) by a NUL terminator that is not part of it.
NONCE_SIZES = {NATIVE: 20, CACHING_SHA2: 20, ED25519: 32}


def switch_nonce(plugin: str, data: bytes) -> bytes:
    """The scramble in an AuthSwitchRequest's plugin data: its known size where the method has
    one (its bytes may include 0x00), else the data minus one NUL terminator."""
    size = NONCE_SIZES.get(plugin)
    if size is not None and len(data) >= size:
        return data[:size]
    return data[:-1] if data.endswith(b"\x00") else data


def parse_greeting(p: bytes) -> Greeting:
    """Parse a protocol-10 greeting; anything malformed is ``protocol_error`` (an ERR packet is ``remote_error``)."""
    if p[:1] == b"\xff":
        raise MemoriesError("remote_error", "The MySQL server refused the connection.")
    try:
        if p[0] != 10:
            raise ValueError("protocol version")
        end = p.index(b"\x00", 1)
        version = p[1:end]
        i = end + 1
        conn_id, part1 = p[i : i + 4], p[i + 4 : i + 12]
        i += 13
        caps_lo = int.from_bytes(p[i : i + 2], "little")
        charset = p[i + 2]
        status = p[i + 3 : i + 5]
        caps_hi = int.from_bytes(p[i + 5 : i + 7], "little")
        auth_len = p[i + 7]
        reserved = p[i + 8 : i + 18]
        i += 18
        caps = caps_lo | caps_hi << 16
        part2 = b""
        if caps & CLIENT_SECURE_CONNECTION:
            n = max(13, auth_len - 8)
            # The field is the rest of the scramble plus one NUL terminator. Only that terminator
            # goes: a scramble byte may itself be 0x00 (stripping all NULs broke 1 login in ~200).
            part2 = p[i : i + n]
            if part2.endswith(b"\x00"):
                part2 = part2[:-1]
            i += n
        plugin = NATIVE
        if caps & CLIENT_PLUGIN_AUTH:
            plugin = p[i:].split(b"\x00", 1)[0].decode("ascii")
        if len(part1) != 8 or len(reserved) != 10:
            raise ValueError("short greeting")
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise MemoriesError("protocol_error", "Malformed MySQL server greeting.") from exc
    return Greeting(version, conn_id, part1 + part2, caps, charset, status, reserved, plugin)


def build_greeting(upstream: Greeting) -> bytes:
    """The local client's greeting: the server's identity and capabilities, minus TLS/compression/attributes."""
    caps = (upstream.caps & ~LOCAL_STRIP) | CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH
    scramble = os.urandom(20)  # the local password is never checked; the scramble just keeps clients happy
    return (
        b"\x0a"
        + upstream.version
        + b"\x00"
        + upstream.conn_id
        + scramble[:8]
        + b"\x00"
        + (caps & 0xFFFF).to_bytes(2, "little")
        + bytes([upstream.charset])
        + upstream.status
        + (caps >> 16).to_bytes(2, "little")
        + bytes([21])
        + upstream.reserved
        + scramble[8:]
        + b"\x00"
        + NATIVE.encode()
        + b"\x00"
    )


class ClientHello:
    def __init__(self, flags: int, max_packet: bytes, charset: int, filler: bytes) -> None:
        self.flags, self.max_packet, self.charset, self.filler = flags, max_packet, charset, filler


def parse_client_response(p: bytes) -> ClientHello:
    if len(p) < 32:
        raise MemoriesError("protocol_error", "Malformed MySQL login packet.")
    flags = int.from_bytes(p[:4], "little")
    if not flags & CLIENT_PROTOCOL_41:
        raise MemoriesError("protocol_error", "The client speaks a pre-4.1 MySQL protocol.")
    if flags & CLIENT_SSL:
        raise MemoriesError("protocol_error", "The local leg is plaintext on loopback; connect without TLS.")
    # User, auth response, database and attributes follow; PX-3: they are deliberately ignored.
    return ClientHello(flags, p[4:8], p[8], p[9:32])


class _Refused(Exception):
    """The handshake already told the local client why; the listener just closes."""


class MysqlProxy(ProxyListener):
    _tls: ssl.SSLContext | None

    def tls_context(self) -> ssl.SSLContext | None:
        """One context per proxy: the client key is loaded once, and dropped with the proxy (PX-4)."""
        if not hasattr(self, "_tls"):
            self._tls = client_context(self.target)
        return self._tls

    def scramble_for(self, plugin: str, nonce: bytes, tls: bool) -> bytes:
        password = self.target.password
        if plugin == NATIVE:
            return native_scramble(password, nonce)
        if plugin == CACHING_SHA2:
            return caching_sha2_scramble(password, nonce)
        if plugin == ED25519:
            return ed25519_signature(password, nonce)
        if plugin == CLEAR and tls and "cleartext" in self.target.allow_auth:
            return password.encode() + b"\x00"
        raise MemoriesError("protocol_error", "The server asked for an authentication method this proxy refuses.")

    async def open_upstream(self) -> tuple[Streams, Greeting]:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.target.port, limit=MAX_PACKET * 2)
        except OSError as exc:
            raise MemoriesError("remote_unreachable") from exc
        try:
            _, payload = await read_packet(reader)
            return (reader, writer), parse_greeting(payload)
        except BaseException:
            writer.transport.abort()
            raise

    def upstream_flags(self, greeting: Greeting, hello: ClientHello, tls: bool) -> int:
        """The client's session capabilities (they shape every later packet) plus the proxy's login choices."""
        return (
            (hello.flags & greeting.caps & ~LOGIN_ONLY)
            | CLIENT_PROTOCOL_41
            | CLIENT_SECURE_CONNECTION
            | CLIENT_PLUGIN_AUTH
            | (CLIENT_SSL if tls else 0)
            | (CLIENT_CONNECT_WITH_DB if self.target.database else 0)
        )

    async def start_tls(self, upstream: Streams, greeting: Greeting, hello: ClientHello) -> int:
        """SSLRequest, then TLS. The server takes capabilities from *this* packet, so it carries the final ones."""
        context = self.tls_context()
        if context is None:
            return 1
        if not greeting.caps & CLIENT_SSL:
            raise MemoriesError("remote_tls_failed", "The MySQL server does not offer TLS.")
        flags = self.upstream_flags(greeting, hello, True)
        upstream[1].write(packet(1, flags.to_bytes(4, "little") + hello.max_packet + bytes([hello.charset]) + hello.filler))
        await upstream[1].drain()
        try:
            await upstream[1].start_tls(context, server_hostname=self.host)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise tls_error(exc, self.target) from exc
        return 2

    async def login(self, upstream: Streams, greeting: Greeting, seq: int, tls: bool, hello: ClientHello) -> bytes:
        """Authenticate upstream as the credential's user; returns the server's OK payload."""
        reader, writer = upstream
        target = self.target
        flags = self.upstream_flags(greeting, hello, tls)
        plugin = greeting.plugin if greeting.plugin in {NATIVE, CACHING_SHA2} else NATIVE
        auth = self.scramble_for(plugin, greeting.scramble, tls)
        body = (
            flags.to_bytes(4, "little")
            + hello.max_packet
            + bytes([hello.charset])
            + hello.filler
            + target.user.encode()
            + b"\x00"
            + bytes([len(auth)])
            + auth
            + (target.database.encode() + b"\x00" if target.database else b"")
            + plugin.encode()
            + b"\x00"
        )
        writer.write(packet(seq, body))
        await writer.drain()
        for _ in range(MAX_AUTH_ROUNDS):
            seq, reply = await read_packet(reader)
            head = reply[:1]
            if head == b"\x00":
                return reply
            if head == b"\xff":
                code = int.from_bytes(reply[1:3], "little") if len(reply) >= 3 else 0
                if code == ER_ACCESS_DENIED:
                    raise access_denied(target)
                raise MemoriesError("remote_error", f"The MySQL server refused the login ({code}).")
            if head == b"\xfe" and len(reply) > 1:  # AuthSwitchRequest
                name, _, data = reply[1:].partition(b"\x00")
                plugin = name.decode("ascii", "replace")
                response = self.scramble_for(plugin, switch_nonce(plugin, data), tls)
            elif head == b"\x01" and plugin == CACHING_SHA2 and reply[1:] == b"\x03":
                continue  # fast-auth success: the OK packet follows
            elif head == b"\x01" and plugin == CACHING_SHA2 and reply[1:] == b"\x04":
                if not tls:
                    # PX-2: the full exchange sends the password itself; never over plaintext.
                    raise MemoriesError("protocol_error", "caching_sha2 full authentication needs TLS; refused.")
                response = target.password.encode() + b"\x00"
            else:
                raise MemoriesError("protocol_error", "Unexpected MySQL authentication packet.")
            writer.write(packet(seq + 1, response))
            await writer.drain()
        raise MemoriesError("protocol_error", "Too many MySQL authentication rounds.")

    async def handshake(self, client: Streams) -> Streams:
        client_seq = 0
        upstream: Streams | None = None
        try:
            upstream, greeting = await self.open_upstream()
            client[1].write(packet(0, build_greeting(greeting)))
            await client[1].drain()
            client_seq, payload = await read_packet(client[0])
            hello = parse_client_response(payload)
            seq = await self.start_tls(upstream, greeting, hello)
            try:
                ok = await self.login(upstream, greeting, seq, seq == 2, hello)
            except ssl.SSLError as exc:
                # TLS 1.3: a refused client certificate arrives as an alert on the first read.
                raise tls_error(exc, self.target) from exc
            client[1].write(packet(client_seq + 1, ok))
            await client[1].drain()
            return upstream
        except MemoriesError as exc:
            if upstream is not None:
                upstream[1].transport.abort()
            code = ER_ACCESS_DENIED if exc.code == "remote_auth_failed" else 2013
            message = f"memories proxy: [{exc.code}] {exc.message}".encode()
            client[1].write(
                packet(client_seq + 1 if client_seq else 0, b"\xff" + code.to_bytes(2, "little") + b"#28000" + message)
            )
            raise
        except BaseException:
            if upstream is not None:
                upstream[1].transport.abort()
            raise
