"""Tiny scripted upstream servers for the cases no real server will produce (tampered SCRAM, caching_sha2)."""

from __future__ import annotations

import asyncio
import base64
import socket
import socketserver
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import scramp

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextmanager
def serve(handler: Handler, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """Run ``handler`` for each connection on a loopback port, in a thread with its own loop."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop = threading.Event()
    ports: list[int] = []

    async def guarded(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            await handler(r, w)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def main() -> None:
        server = await asyncio.start_server(guarded, "127.0.0.1", 0, ssl=tls)
        ports.append(server.sockets[0].getsockname()[1])
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await asyncio.sleep(0)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield ports[0]
    finally:
        stop.set()
        thread.join(10)
        loop.close()


def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


async def _read_msg(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(5)
    return await reader.readexactly(struct.unpack("!I", head[1:])[0] - 4)


def pg_scram_server(password: str, tamper: str) -> Handler:
    """A plaintext PostgreSQL upstream speaking SCRAM-SHA-256; ``tamper`` breaks "nonce" or "signature"."""
    mechanism = scramp.ScramMechanism("SCRAM-SHA-256")
    auth = mechanism.make_auth_info(password, iteration_count=4096)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        length = struct.unpack("!I", await reader.readexactly(4))[0]
        await reader.readexactly(length - 4)
        writer.write(_msg(b"R", struct.pack("!I", 10) + b"SCRAM-SHA-256\x00\x00"))
        body = await _read_msg(reader)
        mech_end = body.index(b"\x00")
        client_first = body[mech_end + 5 :].decode()
        server = mechanism.make_server(lambda _user: auth)
        server.set_client_first(client_first)
        server_first = server.get_server_first()
        if tamper == "nonce":
            attrs = dict(p.split("=", 1) for p in server_first.split(","))
            attrs["r"] = "X" + attrs["r"][1:]  # no longer extends the client's nonce
            server_first = ",".join(f"{k}={v}" for k, v in attrs.items())
        writer.write(_msg(b"R", struct.pack("!I", 11) + server_first.encode()))
        client_final = (await _read_msg(reader)).decode()
        if tamper == "nonce":
            writer.write(_msg(b"R", struct.pack("!I", 0)))
            await writer.drain()
            return
        server.set_client_final(client_final)
        server_final = server.get_server_final()
        if tamper == "signature":
            server_final = "v=" + base64.b64encode(b"\x00" * 32).decode()
        if tamper != "skip_final":
            writer.write(_msg(b"R", struct.pack("!I", 12) + server_final.encode()))
        writer.write(_msg(b"R", struct.pack("!I", 0)))
        writer.write(_msg(b"Z", b"I"))
        await writer.drain()
        await reader.read(1)

    return handle


@contextmanager
def asyncssh_password_server(user: str, password: str) -> Iterator[tuple[int, str]]:
    """An asyncssh server accepting one user/password; exec echoes the command. Yields (port, host key line)."""
    import asyncssh

    host_key = asyncssh.generate_private_key("ssh-ed25519")

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True

        def password_auth_supported(self) -> bool:
            return True

        def validate_password(self, username: str, pw: str) -> bool:
            return username == user and pw == password

    async def process(proc: asyncssh.SSHServerProcess) -> None:  # type: ignore[type-arg]
        proc.stdout.write(f"ran: {proc.command}\n")
        proc.exit(0)

    loop = asyncio.new_event_loop()
    started = threading.Event()
    stop = threading.Event()
    ports: list[int] = []

    async def main() -> None:
        server = await asyncssh.create_server(Server, "127.0.0.1", 0, server_host_keys=[host_key], process_factory=process)
        ports.append(server.sockets[0].getsockname()[1])
        started.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.close()
        await server.wait_closed()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield ports[0], host_key.export_public_key().decode().strip()
    finally:
        stop.set()
        thread.join(10)
        loop.close()


@contextmanager
def serve_blocking(handler: Callable[[socket.socket], None]) -> Iterator[int]:
    """Like ``serve`` but with blocking sockets in threads: ``recv(n)`` never swallows bytes that
    belong to a TLS handshake started right after (a StreamReader would buffer them)."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            try:
                handler(self.request)
            except (OSError, EOFError, ssl.SSLError):
                pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class MysqlFake:
    """A scripted MySQL upstream that speaks caching_sha2_password (MariaDB here has no such plugin).

    ``mode``: "fast" (cached fast path), "full" (full authentication: the password itself is sent,
    which must happen only inside TLS) or "switch" (greets with mysql_native_password, then switches).
    """

    def __init__(self, user: str, password: str, mode: str, tls: ssl.SSLContext | None = None) -> None:
        self.user, self.password, self.mode, self.tls = user, password, mode, tls
        self.plaintext = bytearray()  # every byte the proxy sent outside TLS
        self.logged_in_as: list[str] = []

    def _read(self, sock: socket.socket, in_tls: bool) -> tuple[int, bytes]:
        head = _recv_exactly(sock, 4)
        body = _recv_exactly(sock, int.from_bytes(head[:3], "little"))
        if not in_tls:
            self.plaintext.extend(head + body)
        return head[3], body

    @staticmethod
    def _packet(seq: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload

    def handle(self, sock: socket.socket) -> None:
        import os as _os

        from engine.remote.mysql_auth import caching_sha2_scramble

        sock.settimeout(30)
        nonce = _os.urandom(20)
        caps = 0x1 | 0x8 | 0x200 | 0x8000 | 0x80000 | (0x800 if self.tls else 0)
        first_plugin = b"mysql_native_password" if self.mode == "switch" else b"caching_sha2_password"
        greeting = mysql_greeting(b"8.0.36-fake", nonce, caps, first_plugin)
        sock.sendall(self._packet(0, greeting))
        seq, body = self._read(sock, False)
        in_tls = False
        if len(body) == 32 and int.from_bytes(body[:4], "little") & 0x800 and self.tls:
            sock = self.tls.wrap_socket(sock, server_side=True)
            in_tls = True
            seq, body = self._read(sock, True)
        user = body[32:].split(b"\x00", 1)[0].decode()
        rest = body[32 + len(user) + 1 :]
        auth = rest[1 : 1 + rest[0]]
        if self.mode == "switch":
            nonce = _os.urandom(20)
            seq += 1
            sock.sendall(self._packet(seq, b"\xfecaching_sha2_password\x00" + nonce + b"\x00"))
            seq, auth = self._read(sock, in_tls)
        if user != self.user or auth != caching_sha2_scramble(self.password, nonce):
            sock.sendall(self._packet(seq + 1, b"\xff\x15\x04#28000Access denied"))
            return
        if self.mode == "full":
            sock.sendall(self._packet(seq + 1, b"\x01\x04"))
            seq, clear = self._read(sock, in_tls)
            if clear != self.password.encode() + b"\x00":
                return
            seq -= 1
        else:
            sock.sendall(self._packet(seq + 1, b"\x01\x03"))
            seq += 1
        sock.sendall(self._packet(seq + 1, b"\x00\x00\x00\x02\x00\x00\x00"))
        self.logged_in_as.append(user)
        while True:
            seq, command = self._read(sock, in_tls)
            if command[:1] == b"\x01":
                return
            sock.sendall(self._packet(seq + 1, b"\x00\x00\x00\x02\x00\x00\x00"))


# -- SCRAM-SHA-256-PLUS (channel binding) ------------------------------------------------------
SSL_REQUEST = struct.pack("!II", 8, 80877103)


async def _accept_pg_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext) -> None:
    """The server half of PostgreSQL's in-band TLS: SSLRequest, 'S', then the TLS handshake."""
    if await reader.readexactly(8) != SSL_REQUEST:
        raise ConnectionError("expected SSLRequest")
    writer.write(b"S")
    await writer.drain()
    await writer.start_tls(context)  # server side: this stream came from start_server


def pg_scram_plus_server(password: str, context: ssl.SSLContext, binding_cert_pem: str, seen: list[str]) -> Handler:
    """A TLS PostgreSQL upstream offering *only* SCRAM-SHA-256-PLUS.

    It records what the client chose (``mechanism gs2-header``) in ``seen`` and checks the
    channel binding against ``binding_cert_pem``: its own certificate for an honest server,
    another one to play a server whose TLS peer is not the client (a wrong binding).
    """
    mechanism = scramp.ScramMechanism("SCRAM-SHA-256-PLUS")
    auth = mechanism.make_auth_info(password, iteration_count=4096)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _accept_pg_tls(reader, writer, context)
        length = struct.unpack("!I", await reader.readexactly(4))[0]
        await reader.readexactly(length - 4)
        writer.write(_msg(b"R", struct.pack("!I", 10) + b"SCRAM-SHA-256-PLUS\x00\x00"))
        body = await _read_msg(reader)
        name, _, rest = body.partition(b"\x00")
        client_first = rest[4:].decode()
        seen.append(f"{name.decode()} {client_first.split(',', 2)[0]}")
        server = mechanism.make_server(lambda _user: auth, channel_binding=("tls-server-end-point", binding_cert_pem))
        server.set_client_first(client_first)
        writer.write(_msg(b"R", struct.pack("!I", 11) + server.get_server_first().encode()))
        client_final = (await _read_msg(reader)).decode()
        try:
            server.set_client_final(client_final)
        except scramp.ScramException:
            # What PostgreSQL answers (ERRCODE_PROTOCOL_VIOLATION) when the binding differs.
            writer.write(_msg(b"E", b"SFATAL\x00C08P01\x00MSCRAM channel binding check failed\x00\x00"))
            await writer.drain()
            return
        writer.write(_msg(b"R", struct.pack("!I", 12) + server.get_server_final().encode()))
        writer.write(_msg(b"R", struct.pack("!I", 0)))
        writer.write(_msg(b"Z", b"I"))
        await writer.drain()
        await reader.read(1)

    return handle


def pg_tls_mitm(upstream_port: int, context: ssl.SSLContext, upstream: ssl.SSLContext, strip_plus: bool) -> Handler:
    """A TLS-terminating man in the middle in front of a real PostgreSQL server.

    It presents its own certificate (one the client trusts, as an intercepting proxy with a
    corporate CA would), opens its own TLS connection to the server and relays the rest.
    With ``strip_plus`` it also removes SCRAM-SHA-256-PLUS from the server's offer.
    """

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
        dst.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _accept_pg_tls(reader, writer, context)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        up_writer.write(SSL_REQUEST)
        await up_writer.drain()
        if await up_reader.readexactly(1) != b"S":
            raise ConnectionError("the server refused TLS")
        await up_writer.start_tls(upstream, server_hostname="localhost")
        length = struct.unpack("!I", await reader.readexactly(4))[0]
        up_writer.write(struct.pack("!I", length) + await reader.readexactly(length - 4))  # the startup message
        head = await up_reader.readexactly(5)
        body = await up_reader.readexactly(struct.unpack("!I", head[1:])[0] - 4)
        if strip_plus and head[:1] == b"R" and body[:4] == struct.pack("!I", 10):
            offered = [m for m in body[4:].split(b"\x00") if m and not m.endswith(b"-PLUS")]
            body = struct.pack("!I", 10) + b"".join(m + b"\x00" for m in offered) + b"\x00"
        writer.write(_msg(head[:1], body))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
        up_writer.close()

    return handle


def mysql_greeting(version: bytes, nonce: bytes, caps: int, plugin: bytes) -> bytes:
    """A MySQL protocol-10 handshake packet body, written out by hand (independent of the engine's parser)."""
    return (
        b"\x0a"
        + version
        + b"\x00"
        + b"\x01\x00\x00\x00"
        + nonce[:8]
        + b"\x00"
        + (caps & 0xFFFF).to_bytes(2, "little")
        + b"\x21\x02\x00"
        + (caps >> 16).to_bytes(2, "little")
        + bytes([21])
        + bytes(10)
        + nonce[8:]
        + b"\x00"
        + plugin
        + b"\x00"
    )
