"""Wire v1 framing and envelopes for local IPC (SPEC API-2, API-8).

A frame is a 4-byte big-endian unsigned length followed by exactly that many bytes of
UTF-8 JSON, and the JSON must be an object. Envelopes::

    request   {"v": 1, "id": <int>, "body": {...}}
    success   {"v": 1, "id": <same int>, "ok": true, "result": {...}}
    failure   {"v": 1, "id": <int or null>, "ok": false, "error": {"code": ..., "message": ...}}

A frame may carry a binary part (file chunks, FI-1) so bulk bytes need neither base64 nor
JSON: the top bit of the length word (:data:`PAYLOAD_FLAG`) says that the JSON is followed
by a second 4-byte big-endian length and exactly that many raw bytes (at most
:data:`MAX_PAYLOAD_BYTES`, checked before a byte of them is read). The JSON part keeps
every rule above, and the operation's JSON names how the bytes divide (e.g. ``"sizes"`` of
file chunks). Only a peer that sends a binary part sets the flag, so older peers are
unaffected; an older reader sees a length above the frame limit (``frame_too_large``). In
a request the bytes reach the operation as ``body["payload"]``; an answer whose
``result["payload"]`` is ``bytes`` sends them as its binary part.

This module is imported by the lean CLI client, so it must stay stdlib-only and must not
import :mod:`asyncio` at module level (the async reader imports it lazily).
"""

from __future__ import annotations

import time

from engine.errors import MemoriesError
from engine.ipc import json_codec

# `typing`, `socket`, `re` and `json` stay off the CLI's start path (issue 20): the sync
# reader only calls methods of the socket it is given, and JSON goes through json_codec.
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only; keeps asyncio off the CLI start path
    import _socket
    import asyncio
    from typing import Any, NoReturn

__all__ = [
    "WIRE_VERSION",
    "MAX_FRAME_BYTES",
    "MAX_PAYLOAD_BYTES",
    "PAYLOAD_FLAG",
    "PAYLOAD_KEY",
    "frame_too_large",
    "size_text",
    "MAX_REQUEST_ID",
    "HEADER_BYTES",
    "TruncatedFrame",
    "PeerClosed",
    "encode_frame",
    "encode_frame_parts",
    "decode_body",
    "read_frame",
    "read_frame_sync",
    "read_message",
    "read_message_sync",
    "make_request",
    "make_ok",
    "make_error",
    "parse_request",
]

WIRE_VERSION = 1
MAX_FRAME_BYTES = 16 * 1024 * 1024
HEADER_BYTES = 4
# Top bit of the length word: a binary part follows the JSON (lengths are at most 16 MiB,
# so a plain frame never has it set).
PAYLOAD_FLAG = 0x8000_0000
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
# Where the binary part appears in a request body / a success result.
PAYLOAD_KEY = "payload"
# Request ids must survive a round trip through JavaScript clients (desktop, web), whose
# numbers are IEEE doubles: keep them within the safe-integer range.
MAX_REQUEST_ID = 2**53 - 1

_REQUEST_KEYS = frozenset({"v", "id", "body"})


class TruncatedFrame(ConnectionError):
    """The peer closed the stream in the middle of a frame (header or body)."""

    def __init__(self, received: int, expected: int | None) -> None:
        self.received = received
        self.expected = expected
        super().__init__("The connection closed in the middle of a frame.")


class PeerClosed(ConnectionError):
    """The peer closed the stream cleanly before sending any byte of a frame (sync reader)."""

    def __init__(self) -> None:
        super().__init__("The connection closed before a frame arrived.")


# --------------------------------------------------------------------------- encoding


def _header(word: int) -> bytes:
    """The 4-byte big-endian length word."""
    return word.to_bytes(HEADER_BYTES, "big")


def encode_frame(obj: dict[str, Any], *, max_bytes: int = MAX_FRAME_BYTES, payload: bytes | bytearray | None = None) -> bytes:
    """One frame as one ``bytes`` (see :func:`encode_frame_parts`)."""
    return b"".join(encode_frame_parts(obj, max_bytes=max_bytes, payload=payload))


def encode_frame_parts(
    obj: dict[str, Any], *, max_bytes: int = MAX_FRAME_BYTES, payload: bytes | bytearray | None = None
) -> list[bytes | bytearray]:
    """Serialize ``obj`` as one frame (header + compact UTF-8 JSON [+ binary part]).

    With ``payload`` the frame carries it as its binary part (see the module docstring);
    a payload above :data:`MAX_PAYLOAD_BYTES` is ``frame_too_large``.

    Raises ``MemoriesError("frame_too_large")`` when the body exceeds ``max_bytes`` and
    ``MemoriesError("invalid_input")`` when ``obj`` is not representable as strict JSON
    (non-JSON types, NaN/Infinity, lone surrogates).
    """
    if not isinstance(obj, dict):
        raise MemoriesError("invalid_input", "A frame must carry a JSON object.")
    try:
        text = json_codec.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        # ValueError covers NaN/Infinity and circular references.
        raise MemoriesError("invalid_input", "The message cannot be encoded as JSON.") from None
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: on POSIX, bytes of an argument or file name that are not UTF-8.
        raise MemoriesError(
            "invalid_input",
            "The text holds characters that are not valid Unicode (bytes of another encoding?); nothing was sent.",
        ) from None
    if len(body) > max_bytes:
        raise frame_too_large(len(body), max_bytes)
    if payload is None:
        return [_header(len(body)) + body]
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise frame_too_large(len(payload), MAX_PAYLOAD_BYTES, "The binary part")
    # The binary part is not copied: a sender writes the parts one after the other.
    return [b"".join((_header(PAYLOAD_FLAG | len(body)), body, _header(len(payload)))), payload]


def size_text(size: int) -> str:
    """A byte count as people read it: ``900 bytes``, ``3.5 KiB``, ``17.2 MiB``."""
    if size < 1024:
        return f"{size} bytes"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    raise AssertionError("unreachable")


def frame_too_large(size: int, limit: int, what: str = "The message") -> MemoriesError:
    """``frame_too_large`` that says how big, and the limit (the sentence and ``details``)."""
    shown, cap = size_text(size), size_text(limit)
    if shown == cap:  # 16.02 MiB would read as "16 MiB; at most 16 MiB"
        shown, cap = f"{size:,} bytes", f"{limit:,} bytes"
    return MemoriesError("frame_too_large", f"{what} is {shown}; one message may carry at most {cap}.", size=size, limit=limit)


# --------------------------------------------------------------------------- decoding


def _reject_constant(name: str) -> NoReturn:
    # NaN / Infinity / -Infinity are not JSON (RFC 8259); Python would accept them.
    raise ValueError(name)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        # Different parsers keep different duplicates; refuse the ambiguity outright.
        raise ValueError("duplicate key")
    return obj


def _may_escape_a_surrogate(body: bytes | bytearray) -> bool:
    """Whether ``body`` has a ``\\uD800``-``\\uDFFF`` escape: a cheap pre-filter.

    A lone UTF-16 surrogate can only reach a decoded string through such an escape (raw
    surrogates are not valid UTF-8). An escaped backslash before ``u`` may also match; the
    exact check that follows sorts that out.
    """
    at = body.find(b"\\u")
    while at != -1:
        digits = body[at + 2 : at + 4]
        if len(digits) == 2 and digits[0] in b"dD" and digits[1] in b"89abcdefABCDEF":
            return True
        at = body.find(b"\\u", at + 2)
    return False


def decode_body(body: bytes | bytearray) -> dict[str, Any]:
    """Decode a frame body: strict UTF-8, strict JSON, and it must be an object.

    Every failure is ``MemoriesError("invalid_json")``; nothing of the input is echoed.
    """
    try:
        text = body.decode("utf-8")
        obj = json_codec.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys)
        if _may_escape_a_surrogate(body):
            # Escaped lone surrogates decode fine but can never be re-encoded as UTF-8;
            # reject them here so they cannot poison later responses or storage.
            json_codec.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, RecursionError):
        # ValueError includes json.JSONDecodeError and the int-digits limit; RecursionError
        # comes from deeply nested arrays/objects.
        raise MemoriesError("invalid_json") from None
    if not isinstance(obj, dict):
        raise MemoriesError("invalid_json", "The frame must contain a JSON object.")
    return obj


def _check_length(length: int, max_bytes: int) -> None:
    if length > max_bytes:
        raise frame_too_large(length, max_bytes, "The incoming message")


def _split_header(word: int, max_bytes: int, allow_payload: bool) -> tuple[int, bool]:
    """(JSON length, whether a binary part follows) of a length word, bounds checked."""
    if allow_payload and word & PAYLOAD_FLAG:
        length = word & ~PAYLOAD_FLAG
        _check_length(length, max_bytes)
        return length, True
    _check_length(word, max_bytes)
    return word, False


def _check_payload(length: int, max_payload: int) -> None:
    if length > max_payload:
        raise frame_too_large(length, max_payload, "The incoming binary part")


async def read_frame(
    reader: asyncio.StreamReader,
    max_bytes: int,
    *,
    idle_timeout: float | None = None,
    frame_timeout: float | None = None,
) -> dict[str, Any] | None:
    """Read one frame from ``reader``.

    * Returns ``None`` on a clean EOF before the first byte of a frame.
    * Raises ``MemoriesError("frame_too_large")`` as soon as the header announces more than
      ``max_bytes``, without reading (or buffering) the body.
    * Raises :class:`TruncatedFrame` when the stream ends inside a frame.
    * Raises ``MemoriesError("invalid_json")`` for bad UTF-8, bad JSON or a non-object.
    * Raises :class:`TimeoutError` when the first byte does not arrive within
      ``idle_timeout``, or the rest of the frame (header and body) does not arrive within
      ``frame_timeout`` of the first byte. ``None`` disables either bound.

    A frame with a binary part is refused here (its length word is above any limit);
    readers that accept one use :func:`read_message`.
    """
    message = await _read(reader, max_bytes, 0, idle_timeout, frame_timeout)
    return None if message is None else message[0]


async def read_message(
    reader: asyncio.StreamReader,
    max_bytes: int,
    *,
    max_payload: int = MAX_PAYLOAD_BYTES,
    idle_timeout: float | None = None,
    frame_timeout: float | None = None,
    first: bytes | None = None,
) -> tuple[dict[str, Any], bytes | None] | None:
    """:func:`read_frame` that also accepts a binary part: ``(object, bytes or None)``.

    The binary part's length is checked against ``max_payload`` before a byte of it is
    read (``frame_too_large``); the timeouts cover the binary part as well. ``first``: the
    frame's first byte, already read by the caller (the server waits for it itself).
    """
    return await _read(reader, max_bytes, max_payload, idle_timeout, frame_timeout, first)


async def _read(
    reader: asyncio.StreamReader,
    max_bytes: int,
    max_payload: int,
    idle_timeout: float | None,
    frame_timeout: float | None,
    first: bytes | None = None,
) -> tuple[dict[str, Any], bytes | None] | None:
    import asyncio  # lazy: keeps the sync client free of asyncio

    if first is None:
        try:
            async with asyncio.timeout(idle_timeout):
                first = await reader.readexactly(1)
        except asyncio.IncompleteReadError:
            return None
    received = 1
    length = -1
    payload: bytes | None = None
    try:
        async with asyncio.timeout(frame_timeout):
            rest = await reader.readexactly(HEADER_BYTES - 1)
            received += len(rest)
            word = int.from_bytes(first + rest, "big")
            length, has_payload = _split_header(word, max_bytes, max_payload > 0)
            body = await reader.readexactly(length)
            if has_payload:
                received += length
                size = int.from_bytes(await reader.readexactly(HEADER_BYTES), "big")
                received += HEADER_BYTES
                _check_payload(size, max_payload)
                payload = await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        expected = None if length < 0 else HEADER_BYTES + length
        raise TruncatedFrame(received + len(exc.partial), expected) from None
    return decode_body(body), payload


def _recv_exactly(sock: _socket.socket, n: int, already: int, deadline: float | None) -> bytearray:
    buffer = bytearray(n)  # filled in place: a large binary part is held once, not twice
    view = memoryview(buffer)
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("frame read deadline passed")
            sock.settimeout(remaining)
        count = sock.recv_into(view[got:], min(n - got, 1024 * 1024))
        if not count:
            if already + got == 0:
                raise PeerClosed()
            raise TruncatedFrame(already + got, None)
        got += count
    view.release()
    return buffer


def read_frame_sync(sock: _socket.socket, max_bytes: int, *, deadline: float | None = None) -> dict[str, Any]:
    """Blocking counterpart of :func:`read_frame` for the CLI client.

    Raises :class:`PeerClosed` on a clean EOF before any byte, :class:`TruncatedFrame` on
    EOF inside a frame, ``MemoriesError`` (``frame_too_large`` / ``invalid_json``) as
    :func:`read_frame` does, and lets :class:`TimeoutError` (``socket.timeout``) and other
    :class:`OSError` from the socket propagate. ``deadline`` (a ``time.monotonic()``
    value) bounds the whole frame; without it the socket's own timeout applies per recv.
    """
    return _read_sync(sock, max_bytes, 0, deadline)[0]


def read_message_sync(
    sock: _socket.socket, max_bytes: int, *, max_payload: int = MAX_PAYLOAD_BYTES, deadline: float | None = None
) -> tuple[dict[str, Any], bytes | bytearray | None]:
    """Blocking counterpart of :func:`read_message` (errors as :func:`read_frame_sync`)."""
    return _read_sync(sock, max_bytes, max_payload, deadline)


def _read_sync(
    sock: _socket.socket, max_bytes: int, max_payload: int, deadline: float | None
) -> tuple[dict[str, Any], bytes | bytearray | None]:
    header = _recv_exactly(sock, HEADER_BYTES, 0, deadline)
    word = int.from_bytes(header, "big")
    length, has_payload = _split_header(word, max_bytes, max_payload > 0)
    body = _recv_exactly(sock, length, HEADER_BYTES, deadline)
    payload: bytearray | None = None
    if has_payload:
        size = int.from_bytes(_recv_exactly(sock, HEADER_BYTES, HEADER_BYTES + length, deadline), "big")
        _check_payload(size, max_payload)
        payload = _recv_exactly(sock, size, 2 * HEADER_BYTES + length, deadline)
    return decode_body(body), payload


# --------------------------------------------------------------------------- envelopes


def make_request(id: int, body: dict[str, Any]) -> dict[str, Any]:
    """Build a request envelope."""
    return {"v": WIRE_VERSION, "id": id, "body": body}


def make_ok(id: int, result: dict[str, Any]) -> dict[str, Any]:
    """Build a success response envelope."""
    return {"v": WIRE_VERSION, "id": id, "ok": True, "result": result}


def make_error(id: int | None, error: MemoriesError) -> dict[str, Any]:
    """Build a failure response envelope from a typed error (``id`` is null when unknown)."""
    return {"v": WIRE_VERSION, "id": id, "ok": False, "error": error.to_wire()}


def _is_int(value: object) -> bool:
    # bool is a subclass of int in Python; JSON true/false must not pass as 1/0.
    return type(value) is int


def parse_request(obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Validate a request envelope and return ``(id, body)``.

    ``v`` is checked first (a future version may change every other key):
    a present ``v`` other than 1 is ``unsupported_wire_version``; a missing ``v``, a
    non-integer or out-of-range ``id``, a non-object ``body`` or any extra key is
    ``invalid_request``.
    """
    if not isinstance(obj, dict):
        raise MemoriesError("invalid_request", "The request must be a JSON object.")
    if "v" not in obj:
        raise MemoriesError("invalid_request", "The request has no wire version field `v`.")
    version = obj["v"]
    if not _is_int(version) or version != WIRE_VERSION:
        raise MemoriesError("unsupported_wire_version")
    extra = set(obj) - _REQUEST_KEYS
    if extra:
        raise MemoriesError("invalid_request", "The request envelope has unknown fields.")
    req_id = obj.get("id")
    if not isinstance(req_id, int) or isinstance(req_id, bool) or not 0 <= req_id <= MAX_REQUEST_ID:
        raise MemoriesError("invalid_request", "The request `id` must be an integer from 0 to 2^53-1.")
    body = obj.get("body")
    if not isinstance(body, dict):
        raise MemoriesError("invalid_request", "The request `body` must be a JSON object.")
    return req_id, body
