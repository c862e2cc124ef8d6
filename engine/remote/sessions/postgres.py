"""PostgreSQL sessions over the engine's own wire client (RM-4, RM-5).

The upstream leg is the proxy's (:mod:`engine.remote.pg_wire`): TLS with hostname
verification and the optional client certificate, SCRAM-SHA-256-PLUS when offered
over TLS. asyncpg was used before, but it hard-codes SCRAM without channel binding,
and a session should not be weaker than the proxy.

An approved instruction runs through the *simple query* protocol, so a ticket may hold
several statements; the result is the last statement's. Rows are kept up to
``MAX_ROWS`` (all are counted), cells arrive as text and integers/booleans are decoded.
COPY is refused (no stream to carry it).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from engine.errors import MemoriesError
from engine.remote import pg_wire
from engine.remote.sessions.base import (
    CONNECT_TIMEOUT,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    RemoteSession,
    bounded_rows,
    connect_error,
    server_message,
)
from engine.remote.tls import client_context

__all__ = ["PostgresSession", "decode_cell", "parse_row_description", "parse_data_row"]

# A DataRow may be large (a big text cell): bounded, but well above the handshake limit.
MAX_ROW_MESSAGE = 16 * 1024 * 1024
MAX_PRELUDE_MESSAGES = 1000
CANCEL_REQUEST = 80877102
INT_OIDS = frozenset({20, 21, 23, 26})  # int8, int2, int4, oid
BOOL_OID, BYTEA_OID = 16, 17


def decode_cell(raw: bytes | None, oid: int) -> Any:
    """A text-format cell as JSON-friendly data: NULL → None, ints and bools decoded, bytea as hex."""
    if raw is None:
        return None
    if oid in INT_OIDS:
        try:
            return int(raw)
        except ValueError:
            pass
    elif oid == BOOL_OID and raw in (b"t", b"f"):
        return raw == b"t"
    elif oid == BYTEA_OID and raw.startswith(b"\\x"):
        return raw[2:].decode("ascii", "replace")
    return raw.decode("utf-8", "replace")


def parse_row_description(body: bytes) -> tuple[list[str], list[int]]:
    """(column names, type OIDs); malformed input raises ``protocol_error``."""
    try:
        (count,) = struct.unpack_from("!h", body, 0)
        pos, names, oids = 2, [], []
        for _ in range(count):
            end = body.index(b"\x00", pos)
            names.append(body[pos:end].decode("utf-8", "replace"))
            _table, _attr, oid, _size, _mod, _fmt = struct.unpack_from("!IhIhih", body, end + 1)
            oids.append(oid)
            pos = end + 1 + 18
    except (struct.error, ValueError) as exc:
        raise MemoriesError("protocol_error", "Malformed PostgreSQL row description.") from exc
    return names, oids


def parse_data_row(body: bytes) -> list[bytes | None]:
    try:
        (count,) = struct.unpack_from("!h", body, 0)
        pos, cells = 2, list[bytes | None]()
        for _ in range(count):
            (length,) = struct.unpack_from("!i", body, pos)
            pos += 4
            if length < 0:
                cells.append(None)
                continue
            if pos + length > len(body):
                raise ValueError("short cell")
            cells.append(body[pos : pos + length])
            pos += length
    except (struct.error, ValueError) as exc:
        raise MemoriesError("protocol_error", "Malformed PostgreSQL data row.") from exc
    return cells


class _Result:
    """One statement's result while it streams in: rows kept up to the bounds, all counted."""

    def __init__(self, columns: list[str], oids: list[int]) -> None:
        self.columns, self.oids = columns, oids
        self.rows: list[list[Any]] = []
        self.count = 0
        self.used = 0

    def add(self, cells: list[bytes | None]) -> None:
        self.count += 1
        if len(self.rows) >= MAX_ROWS or self.used > MAX_RESULT_BYTES:
            return  # counted, not kept: memory stays bounded however many rows arrive
        self.used += sum(len(c) for c in cells if c is not None)
        self.rows.append([decode_cell(c, self.oids[i] if i < len(self.oids) else 0) for i, c in enumerate(cells)])

    def view(self, status: str) -> dict[str, Any]:
        out = bounded_rows(self.columns, self.rows)
        out["row_count"] = self.count
        out["truncated"] = bool(out["truncated"] or self.count > len(out["rows"]))
        out["status"] = status
        return out


class PostgresSession(RemoteSession):
    _streams: pg_wire.Streams | None = None
    _cancel_key: bytes = b""

    async def connect(self) -> None:
        target = self.target
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                streams = await pg_wire.connect(target, self.host, client_context(target))
                try:
                    await self._login(streams)
                except BaseException:
                    streams[1].transport.abort()
                    raise
        except MemoriesError:
            raise
        except Exception as exc:
            raise connect_error(exc) from exc
        self._streams = streams

    async def _login(self, streams: pg_wire.Streams) -> None:
        reader, writer = streams
        writer.write(
            pg_wire.startup_message(
                {
                    "user": self.target.user,
                    "database": self.target.database or self.target.user,
                    "client_encoding": "UTF8",
                    "DateStyle": "ISO",
                    "application_name": "memories",
                }
            )
        )
        await writer.drain()
        await pg_wire.authenticate(streams, self.target)
        for _ in range(MAX_PRELUDE_MESSAGES):
            kind, body = await pg_wire.read_message(reader)
            if kind == b"K" and len(body) == 8:
                self._cancel_key = body  # process ID + secret key, for cancelling a runaway query
            elif kind == b"E":
                code, text = pg_wire.server_error(body)
                raise MemoriesError("remote_error", server_message(f"{code}: {text}"))
            elif kind == b"Z":
                return
        raise MemoriesError("protocol_error", "The server's startup never became ready.")

    async def execute(self, instruction: dict[str, Any]) -> dict[str, Any]:
        if self._streams is None:
            raise MemoriesError("session_closed")
        text = str(instruction["text"])
        if "\x00" in text:
            raise MemoriesError("invalid_input", "A query cannot contain a NUL character.")
        try:
            async with asyncio.timeout(self.exec_timeout):
                return await self._query(text)
        except TimeoutError:
            await self._cancel()
            await self.close()
            raise MemoriesError("timeout", "The query did not finish in time; it was cancelled and the session closed.") from None
        except (OSError, asyncio.IncompleteReadError) as exc:
            await self.close()
            raise MemoriesError("session_closed", "The PostgreSQL connection was lost.") from exc
        except MemoriesError as exc:
            if exc.code == "protocol_error":
                await self.close()  # the stream position is unknown: the session cannot continue
            raise

    async def _query(self, text: str) -> dict[str, Any]:
        assert self._streams is not None
        reader, writer = self._streams
        writer.write(pg_wire.message(b"Q", text.encode("utf-8") + b"\x00"))
        await writer.drain()
        current: _Result | None = None
        last: dict[str, Any] = {"status": "", "columns": [], "rows": [], "row_count": 0, "truncated": False}
        error: tuple[str, str] | None = None
        while True:
            kind, body = await pg_wire.read_message(reader, MAX_ROW_MESSAGE)
            if kind == b"T":
                current = _Result(*parse_row_description(body))
            elif kind == b"D":
                if current is None:
                    raise MemoriesError("protocol_error", "A data row arrived without a row description.")
                current.add(parse_data_row(body))
            elif kind == b"C":
                status = body.rstrip(b"\x00").decode("utf-8", "replace")
                if current is not None:
                    last = current.view(status)
                else:
                    last = {"status": status, "columns": [], "rows": [], "row_count": 0, "truncated": False}
                current = None
            elif kind == b"I":  # empty query
                last = {"status": "", "columns": [], "rows": [], "row_count": 0, "truncated": False}
            elif kind == b"E":
                error = pg_wire.server_error(body)
            elif kind == b"G":  # COPY FROM STDIN: nothing to send
                writer.write(pg_wire.message(b"f", b"COPY is not supported in remote sessions\x00"))
                await writer.drain()
            elif kind == b"W":  # COPY BOTH (replication): no way to continue sensibly
                raise MemoriesError("protocol_error", "COPY BOTH (replication) is not supported in remote sessions.")
            elif kind == b"Z":
                if error is not None:
                    raise MemoriesError("remote_error", server_message(f"{error[0]}: {error[1]}"))
                return last
            # N (notice), S (parameter), A (notification), H/d/c (COPY TO STDOUT data): skipped

    async def _cancel(self) -> None:
        """Best effort: ask the server (on a fresh TLS connection, like psql) to cancel the running query."""
        if not self._cancel_key:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                _, writer = await pg_wire.connect(self.target, self.host, client_context(self.target))
                writer.write(struct.pack("!II", 16, CANCEL_REQUEST) + self._cancel_key)
                await writer.drain()
                writer.transport.abort()

    @property
    def closed(self) -> bool:
        return self._streams is None

    async def close(self) -> None:
        if self._streams is not None:
            (_, writer), self._streams = self._streams, None
            with contextlib.suppress(Exception):
                writer.write(pg_wire.message(b"X", b""))  # Terminate; no round trip: lock must not wait
            writer.close()
