"""Redis proxy (PX-2, PX-3): direct TLS upstream, AUTH with the credential, then a filtered relay.

The local client sends nothing first in RESP, so the proxy authenticates upstream
right after accept, reads exactly one bounded reply line per command it sent (a PING
when there is nothing else to send, so a refused client certificate or an unreachable
server is reported to the client as a typed error), and only then relays.

PX-3 for Redis: the upstream identity is the credential's for the whole connection.
Redis lets a client change identity at any point in the stream (``AUTH``, ``HELLO …
AUTH``, ``RESET``), so the client→server direction is parsed as RESP requests for the
connection's lifetime (:class:`RequestFilter`; the server→client direction stays a
plain byte relay). A filtered command is *replaced* in the stream rather than answered
locally, so replies keep their order under pipelining and inside MULTI:

* ``AUTH …`` becomes ``AUTH`` with the credential: the client gets ``+OK`` whatever it
  sent, like the PostgreSQL and MySQL proxies accept any local login. Clients that are
  configured with a password (``redis-cli -a``, connection URLs with a password, most
  libraries) send AUTH on connect and give up on an error, so ``+OK`` keeps them working;
  the identity stays the credential's either way.
* ``HELLO ver AUTH u p [SETNAME n]`` loses its AUTH clause (the protocol switch and name
  still happen); a HELLO Redis would reject as a syntax error is refused.
* ``RESET`` would drop the connection back to the ``default`` user; it is refused with an
  error (see :data:`REFUSED`).

Parsing follows Redis's own request grammar (multibulk and inline, strict integer
syntax) and is bounded: only a command's name is buffered, except for the three
filtered commands, which are held whole up to 64 KiB; bulk payloads stream through.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Callable, Iterable
from typing import Any, cast

from engine.errors import MemoriesError
from engine.remote.proxy.listener import MAX_PACKET, ProxyListener, Streams
from engine.remote.tls import client_context, refusal_after_handshake, tls_error

__all__ = ["RedisProxy", "RequestFilter", "resp_command", "split_inline", "strip_hello_auth", "REFUSED"]

FILTERED = frozenset({b"AUTH", b"HELLO", b"RESET"})
# Redis's own limits: inline requests and length lines (PROTO_INLINE_MAX_SIZE), bulk size
# (proto-max-bulk-len default) and multibulk count (INT_MAX).
MAX_INLINE = 64 * 1024
MAX_BULK = 512 * 1024 * 1024
MAX_COUNT = 2**31 - 1
MAX_HELD = MAX_PACKET  # a held AUTH/HELLO/RESET larger than this is refused
NAME_PEEK = 16  # a command name longer than this cannot be one of FILTERED
# Redis's string2ll: no sign other than '-', no leading zeros, no spaces.
_INTEGER = re.compile(rb"0|-?[1-9][0-9]{0,18}")
# A refused command is replaced by one Redis does not know. Its "unknown command" error
# carries the explanation and arrives in order (and aborts a MULTI, as a refusal should);
# a reply made up by the proxy could overtake replies still on their way.
REFUSED = b"MEMORIES-PROXY-REFUSED"


def resp_command(*args: str) -> bytes:
    return resp_array([a.encode() for a in args])


def resp_array(args: Iterable[bytes]) -> bytes:
    items = list(args)
    out = [b"*%d\r\n" % len(items)]
    for data in items:
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _integer(text: bytes) -> int:
    if not _INTEGER.fullmatch(text):
        raise MemoriesError("protocol_error", "Protocol error: invalid length in the request.")
    return int(text)


_ESCAPES = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_SPACE = frozenset(b" \t\n\r\v\f")
_HEX = frozenset(b"0123456789abcdefABCDEF")


def split_inline(line: bytes) -> list[bytes]:
    """Redis's ``sdssplitargs``: whitespace-separated words, "double" (with \\xHH and \\n-style
    escapes) and 'single' quotes. Unbalanced quotes raise ``protocol_error``, like Redis."""
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _SPACE:
            i += 1
        if i >= n:
            return args
        current = bytearray()
        in_double = in_single = False
        while True:
            c = line[i] if i < n else None
            if in_double:
                if c is None:
                    raise MemoriesError("protocol_error", "Protocol error: unbalanced quotes in request.")
                if c == 0x5C and i + 3 < n and line[i + 1] == ord("x") and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    current.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    current += _ESCAPES.get(line[i], bytes([line[i]]))
                elif c == ord('"'):
                    if i + 1 < n and line[i + 1] not in _SPACE:  # a closing quote must end the word
                        raise MemoriesError("protocol_error", "Protocol error: unbalanced quotes in request.")
                    i += 1
                    break
                else:
                    current.append(c)
            elif in_single:
                if c is None:
                    raise MemoriesError("protocol_error", "Protocol error: unbalanced quotes in request.")
                if c == 0x5C and i + 1 < n and line[i + 1] == ord("'"):
                    i += 1
                    current.append(ord("'"))
                elif c == ord("'"):
                    if i + 1 < n and line[i + 1] not in _SPACE:
                        raise MemoriesError("protocol_error", "Protocol error: unbalanced quotes in request.")
                    i += 1
                    break
                else:
                    current.append(c)
            else:
                if c is None or c in b" \n\r\t":
                    break
                if c == ord('"'):
                    in_double = True
                elif c == ord("'"):
                    in_single = True
                else:
                    current.append(c)
            i += 1
        args.append(bytes(current))


def strip_hello_auth(args: list[bytes]) -> list[bytes]:
    """``HELLO [protover [AUTH user pass] [SETNAME name]]`` without its AUTH clauses.

    The options are read as Redis reads them; where Redis would answer a syntax error
    (and authenticate nobody) the proxy refuses the command instead of guessing.
    """
    out, j = args[:2], 2
    while j < len(args):
        option, more = args[j].upper(), len(args) - j - 1
        if option == b"AUTH" and more >= 2:
            j += 3  # dropped: the upstream identity stays the credential's (PX-3)
        elif option == b"SETNAME" and more >= 1:
            out += args[j : j + 2]
            j += 2
        else:
            return [REFUSED, b"HELLO with an option this proxy cannot check"]
    return out


# Parser states (where in a command the next byte belongs) and modes (what happens to the command).
_START, _BULK_HEAD, _BULK_DATA, _BULK_PASS = range(4)
_NAME, _HOLD, _PASS = range(3)


class RequestFilter:
    """Incremental parser of a client's RESP request stream that rewrites chosen commands.

    ``feed`` takes bytes as they arrive and returns the bytes to forward. Commands whose
    name is not in FILTERED pass through byte for byte (only their name is buffered, and
    only while it is short enough to be a filtered one); a filtered command is held whole
    and replaced by ``rewrite(args)``. Inline commands are parsed like Redis does and
    forwarded re-encoded as multibulk, so what upstream executes is exactly what was
    inspected. Malformed input ends the stream with an error, as in Redis (see ``feed``).
    Each byte is scanned a bounded number of times: a line that trickles in is searched
    only in its new bytes.
    """

    def __init__(self, rewrite: Callable[[list[bytes]], list[bytes]]) -> None:
        self._rewrite = rewrite
        self._buf = bytearray()  # bytes received and not yet consumed
        self._scanned = 0  # leading bytes of _buf already searched for a line end
        self._state = _START
        self._mode = _PASS
        self._args_left = 0  # bulk arguments still to come in the current command
        self._bulk_left = 0  # payload bytes (+2 for CRLF) still to come in the current bulk
        self._held = bytearray()  # raw bytes of the current command while undecided or held
        self._args: list[bytes] = []  # its arguments so far, while undecided or held
        self.error: str | None = None  # set by a protocol error; the stream is over then

    def feed(self, data: bytes) -> bytes:
        """The bytes to forward for ``data``; after a protocol error, the error and a QUIT, then nothing."""
        if self.error is not None:
            return b""
        out = bytearray()
        try:
            return self._feed(data, out)
        except MemoriesError as exc:
            # Like Redis: an error reply, then the connection ends. Both travel *through* the server
            # (an unknown command, then QUIT) so the replies to earlier commands still arrive first.
            # Redis is at a command boundary here, or inside a forwarded command expecting '$', where
            # the '*' below is itself a protocol error that ends the connection: never a smuggled command.
            self.error = exc.message
            self._buf.clear()
            return bytes(out) + resp_array([REFUSED, exc.message.encode()]) + resp_array([b"QUIT"])

    def _feed(self, data: bytes, out: bytearray) -> bytes:
        if not self._buf and self._state == _START:
            # The common case: whole ordinary commands, forwarded as the very same bytes.
            end = self._skip_ordinary(data, 0)
            if end == len(data):
                return data
            out += data[:end]
            data = data[end:]
        buf = self._buf
        buf += data
        pos = 0
        try:
            while pos < len(buf):
                if self._state == _START and not self._scanned:  # (a line trickling in is not rescanned)
                    end = self._skip_ordinary(buf, pos)
                    if end > pos:
                        out += buf[pos:end]
                        pos = end
                        continue
                pos = self._step(buf, pos, out)
                if pos < 0:  # waiting for more bytes; -pos - 1 is where the wait starts
                    pos = -pos - 1
                    break
        finally:
            del buf[:pos]
        return bytes(out)

    @staticmethod
    def _skip_ordinary(buf: bytes | bytearray, pos: int) -> int:
        """The fast path: the end of the complete, well-formed, non-filtered multibulk commands at ``pos``.

        It accepts only what :meth:`_step` accepts too and stops (leaving the rest to it) at
        anything else: an incomplete command, an inline one, a filtered name or an error.
        """
        n, find = len(buf), buf.find
        while pos < n and buf[pos] == 0x2A:
            cr = find(b"\r", pos)
            if cr < 0 or cr + 1 >= n or buf[cr + 1] != 0x0A:
                return pos
            text = buf[pos + 1 : cr]
            # Digits only, no leading zero (so no sign, no spaces: stricter than int()).
            if not text.isdigit() or text[0] == 0x30 or len(text) > 10:
                return pos
            count = int(text)
            if count > MAX_COUNT:
                return pos
            p = cr + 2
            for i in range(count):
                if p >= n or buf[p] != 0x24:
                    return pos
                cr = find(b"\r", p)
                if cr < 0 or cr + 1 >= n or buf[cr + 1] != 0x0A:
                    return pos
                text = buf[p + 1 : cr]
                if not text.isdigit() or (text[0] == 0x30 and len(text) > 1) or len(text) > 10:
                    return pos
                size = int(text)
                if size > MAX_BULK:
                    return pos
                start, p = cr + 2, cr + 4 + size
                if p > n:
                    return pos
                if (
                    i == 0
                    and size <= NAME_PEEK
                    and (buf[p - 2 : p] != b"\r\n" or bytes(buf[start : start + size]).upper() in FILTERED)
                ):
                    return pos
            pos = p
        return pos

    def _wait(self, buf: bytearray, pos: int, scanned: bool) -> int:
        # Everything but the last byte (which may be a '\r' whose '\n' is still to come) is searched.
        self._scanned = max(0, len(buf) - pos - 1) if scanned else 0
        return -pos - 1

    def _line(self, buf: bytearray, pos: int, terminator: bytes) -> int:
        start = pos + self._scanned
        self._scanned = 0
        return buf.find(terminator, start)

    def _step(self, buf: bytearray, pos: int, out: bytearray) -> int:
        """Consume one piece (a line, a bulk or part of a streamed bulk); returns the new position."""
        n = len(buf)
        state = self._state
        if state == _BULK_PASS:
            take = min(self._bulk_left, n - pos)
            out += buf[pos : pos + take]
            self._bulk_left -= take
            if self._bulk_left == 0:
                self._end_arg(out)
            return pos + take
        if state == _BULK_DATA:
            need = self._bulk_left
            if n - pos < need:
                return self._wait(buf, pos, scanned=False)
            chunk = bytes(buf[pos : pos + need])
            if chunk[-2:] != b"\r\n":
                raise MemoriesError("protocol_error", "Protocol error: a bulk string is not followed by CRLF.")
            self._held += chunk
            self._args.append(chunk[:-2])
            if self._mode == _NAME:
                if self._args[0].upper() in FILTERED:
                    self._mode = _HOLD
                else:  # an ordinary command: what was held goes out, the rest streams through
                    out += self._held
                    self._held.clear()
                    self._args.clear()
                    self._mode = _PASS
            self._end_arg(out)
            return pos + need
        if state == _START and buf[pos] != 0x2A:  # not '*': an inline command
            end = self._line(buf, pos, b"\n")
            if end < 0:
                if n - pos > MAX_INLINE:
                    raise MemoriesError("protocol_error", "Protocol error: too big inline request.")
                return self._wait(buf, pos, scanned=True)
            line = bytes(buf[pos:end])
            out += self._inline(line[:-1] if line.endswith(b"\r") else line)
            return end + 1
        cr = self._line(buf, pos, b"\r")
        if cr < 0 or cr + 1 >= n:
            if n - pos > MAX_INLINE:
                raise MemoriesError("protocol_error", "Protocol error: too big length line.")
            return self._wait(buf, pos, scanned=True)
        if buf[cr + 1] != 0x0A:
            raise MemoriesError("protocol_error", "Protocol error: a length line does not end with CRLF.")
        line = bytes(buf[pos : cr + 2])
        if state == _START:
            count = _integer(line[1:-2])
            if count > MAX_COUNT:
                raise MemoriesError("protocol_error", "Protocol error: invalid multibulk length.")
            if count <= 0:
                out += line  # an empty request: Redis ignores it
            else:
                self._held += line
                self._args_left, self._mode, self._state = count, _NAME, _BULK_HEAD
            return cr + 2
        if line[:1] != b"$":
            raise MemoriesError("protocol_error", "Protocol error: expected '$' in the request.")
        size = _integer(line[1:-2])
        if not 0 <= size <= MAX_BULK:
            raise MemoriesError("protocol_error", "Protocol error: invalid bulk length.")
        self._bulk_left = size + 2
        if self._mode == _NAME and size > NAME_PEEK:
            self._mode = _PASS  # too long to be a filtered name: stream the whole command
            out += self._held
            self._held.clear()
        if self._mode == _PASS:
            out += line
            self._state = _BULK_PASS
        else:
            if self._mode == _HOLD and len(self._held) + len(line) + size + 2 > MAX_HELD:
                raise MemoriesError("protocol_error", "Protocol error: an AUTH/HELLO/RESET request is too large.")
            self._held += line
            self._state = _BULK_DATA
        return cr + 2

    def _end_arg(self, out: bytearray) -> None:
        """One bulk argument is complete: next argument, or the end of the command."""
        self._args_left -= 1
        if self._args_left > 0:
            self._state = _BULK_HEAD
            return
        if self._mode == _HOLD:  # a filtered command, now complete
            out += resp_array(self._rewrite(list(self._args)))
            self._held.clear()
            self._args.clear()
        self._state, self._mode = _START, _PASS

    def _inline(self, line: bytes) -> bytes:
        if b"\x00" in line:
            # Redis scans inline requests as C strings and would never run this one.
            raise MemoriesError("protocol_error", "Protocol error: NUL byte in an inline request.")
        args = split_inline(line)
        if not args:
            return b""  # an empty line: Redis ignores it
        if args[0].upper() in FILTERED:
            args = self._rewrite(args)
        return resp_array(args)


class _FilteringTransport(asyncio.Transport):
    """The upstream transport as the relay sees it: bytes written to it pass the request filter first.

    Everything else (flow control, protocol swap, close) is the real transport's, so the
    shared byte relay works unchanged on top of it.
    """

    def __init__(self, inner: asyncio.StreamWriter, request_filter: RequestFilter, client: asyncio.Transport) -> None:
        super().__init__()
        # The original writer is kept alive: a StreamWriter closes its transport when collected.
        self._writer = inner
        # Stream transports are full read/write transports (uvloop's do not subclass asyncio's).
        self._inner = cast(asyncio.Transport, inner.transport)
        self._filter = request_filter
        self._client = client

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        forward = self._filter.feed(bytes(data))
        if forward:
            self._inner.write(forward)
        if self._filter.error is not None and not self._client.is_closing():
            # The server answers and closes (QUIT); meanwhile nothing more is read from this client.
            self._client.pause_reading()
            replies = self._inner.get_protocol()
            if isinstance(replies, asyncio.Protocol) and not isinstance(replies, _QuitReplyDropper):
                # Installed only now, so replies before any error pass without the extra layer.
                self._inner.set_protocol(_QuitReplyDropper(replies, self._filter))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview[Any]]) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def write_eof(self) -> None:
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def abort(self) -> None:
        self._inner.abort()

    def close(self) -> None:
        self._inner.close()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._inner.get_write_buffer_limits()


class _QuitReplyDropper(asyncio.Protocol):
    """Server→client replies, minus the ``+OK`` of the QUIT the filter appends after a protocol error.

    That QUIT is the proxy's, not the client's: Redis itself answers a protocol error with the
    error and a close, nothing after. The QUIT's reply is the very last thing the server sends
    before it closes, so once the filter has failed, a trailing ``+OK\\r\\n`` (or a start of it) is held back until
    more bytes show it was not the last (then it is passed on) or the connection ends (then it
    is dropped). It is put in front of the relay's reply protocol only once the filter failed.
    """

    QUIT_REPLY = b"+OK\r\n"

    def __init__(self, inner: asyncio.Protocol, request_filter: RequestFilter) -> None:
        self._inner = inner
        self._filter = request_filter
        self._held = b""

    def data_received(self, data: bytes) -> None:
        if self._filter.error is None and not self._held:
            self._inner.data_received(data)
            return
        data = self._held + data
        self._held = b""
        # Hold the tail that is (the start of) the QUIT reply: TLS records may split it anywhere.
        for size in range(len(self.QUIT_REPLY), 0, -1):
            if data.endswith(self.QUIT_REPLY[:size]):
                data, self._held = data[:-size], data[-size:]
                break
        if data:
            self._inner.data_received(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


async def read_simple_reply(reader: asyncio.StreamReader) -> bytes:
    """One RESP simple-string or error line, bounded (a bulk reply here is a protocol error)."""
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError as exc:
        raise MemoriesError("protocol_error", "The Redis server sent an oversized reply.") from exc
    if len(line) > MAX_PACKET:
        raise MemoriesError("protocol_error", "The Redis server sent an oversized reply.")
    return line[:-2]


class RedisProxy(ProxyListener):
    _tls: ssl.SSLContext | None

    def tls_context(self) -> ssl.SSLContext | None:
        """One context per proxy: the client key is loaded once, and dropped with the proxy (PX-4)."""
        if not hasattr(self, "_tls"):
            self._tls = client_context(self.target)
        return self._tls

    def auth_args(self) -> list[bytes]:
        """What a client's AUTH becomes: the credential's own login (or the passwordless ``default``)."""
        target = self.target
        if not target.password:
            # No password: the connection is the server's `default` user, which must be `nopass`
            # for the proxy to work at all; AUTH with any password then succeeds and changes nothing.
            return [b"AUTH", b"default", b""]
        if target.user:
            return [b"AUTH", target.user.encode(), target.password.encode()]
        return [b"AUTH", target.password.encode()]

    def rewrite(self, args: list[bytes]) -> list[bytes]:
        """Replace an identity-changing command (see the module docstring)."""
        name = args[0].upper()
        if name == b"AUTH":
            return self.auth_args()
        if name == b"HELLO":
            return strip_hello_auth(args)
        return [REFUSED, b"RESET would drop the credential identity; reconnect instead"]

    async def handshake(self, client: Streams) -> Streams:
        context = self.tls_context()
        try:
            reader, writer = await asyncio.open_connection(
                self.host,
                self.target.port,
                ssl=context,
                server_hostname=self.host if context else None,
                limit=MAX_PACKET * 2,
            )
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise tls_error(exc, self.target) from exc
        except OSError as exc:
            raise MemoriesError("remote_unreachable") from exc
        try:
            try:
                await self._login(reader, writer)
            except ssl.SSLError as exc:
                # TLS 1.3: a refused client certificate arrives as an alert on the first read.
                raise tls_error(exc, self.target) from exc
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                # Closed during the first exchange: maybe that alert was lost with our unread command.
                refusal = await refusal_after_handshake(self.host, self.target.port, self.target) if context else None
                if refusal is not None:
                    raise refusal from exc
                raise
            client_transport = cast(asyncio.Transport, client[1].transport)
            filtered = _FilteringTransport(writer, RequestFilter(self.rewrite), client_transport)
            protocol = writer.transport.get_protocol()
            return reader, asyncio.StreamWriter(filtered, protocol, reader, asyncio.get_running_loop())
        except BaseException:
            writer.transport.abort()
            raise

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        commands: list[tuple[str, ...]] = []
        if self.target.password:
            user = self.target.user
            commands.append(("AUTH", user, self.target.password) if user else ("AUTH", self.target.password))
        if self.target.database.isdigit() and self.target.database != "0":
            commands.append(("SELECT", self.target.database))
        if not commands:
            commands.append(("PING",))  # one round trip, so a refused connection is reported, not a silent close
        for command in commands:
            writer.write(resp_command(*command))
            await writer.drain()
            reply = await read_simple_reply(reader)
            if reply.startswith(b"-"):
                if command[0] == "AUTH" or reply.startswith(b"-NOAUTH"):
                    raise MemoriesError("remote_auth_failed")
                raise MemoriesError("remote_error", "The Redis server refused to select the database.")
            if not reply.startswith(b"+"):
                raise MemoriesError("protocol_error", "Unexpected Redis reply during the proxy handshake.")

    async def refuse(self, client: Streams, error: MemoriesError) -> None:
        client[1].write(f"-ERR memories proxy: [{error.code}] {error.message}\r\n".encode())
        await client[1].drain()
