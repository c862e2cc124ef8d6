"""Wire v1 framing and envelopes (SPEC API-2, API-8)."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import CODES, MemoriesError
from engine.ipc.framing import (
    MAX_FRAME_BYTES,
    WIRE_VERSION,
    PeerClosed,
    TruncatedFrame,
    decode_body,
    encode_frame,
    make_error,
    make_ok,
    make_request,
    parse_request,
    read_frame,
    read_frame_sync,
)

ROOT = Path(__file__).resolve().parents[2]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def read_from_bytes(data: bytes, max_bytes: int = MAX_FRAME_BYTES, *, eof: bool = True) -> dict[str, Any] | None:
    async def go() -> dict[str, Any] | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        return await read_frame(reader, max_bytes)

    return asyncio.run(go())


# ---------------------------------------------------------------- constants / encoding


def test_constants() -> None:
    """API-2: wire version 1 and a 16 MiB frame bound."""
    assert WIRE_VERSION == 1
    assert MAX_FRAME_BYTES == 16 * 1024 * 1024


def test_encode_frame_is_compact_utf8_with_big_endian_length() -> None:
    """API-2: 4-byte big-endian length + compact UTF-8 JSON (non-ASCII kept as UTF-8)."""
    data = encode_frame({"a": 1, "b": "é漢"})
    body = '{"a":1,"b":"é漢"}'.encode()
    assert data == struct.pack(">I", len(body)) + body


def test_encode_frame_bounds_and_rejects_non_json() -> None:
    """API-2/API-8: oversize → frame_too_large; NaN / non-JSON / lone surrogate → invalid_input."""
    with pytest.raises(MemoriesError) as err:
        encode_frame({"x": "a" * 100}, max_bytes=50)
    assert err.value.code == "frame_too_large"
    for bad in ({"x": float("nan")}, {"x": object()}, {"x": "\ud800"}):
        with pytest.raises(MemoriesError) as err:
            encode_frame(bad)
        assert err.value.code == "invalid_input"
    # A lone surrogate is what a non-UTF-8 argument or file name becomes: said in words.
    with pytest.raises(MemoriesError) as err:
        encode_frame({"query": "caf\udce9"})
    assert "not valid Unicode" in err.value.message


# ---------------------------------------------------------------- async reader


def test_read_frame_clean_eof_returns_none() -> None:
    """API-2: clean EOF before any byte is not an error."""
    assert read_from_bytes(b"") is None


def test_read_frame_round_trip() -> None:
    obj = {"v": 1, "id": 7, "body": {"op": "x", "n": [1, 2.5, None, True]}}
    assert read_from_bytes(encode_frame(obj)) == obj


def test_read_frame_oversize_is_rejected_without_reading_body() -> None:
    """API-2: the header alone decides; no body bytes are needed (or read)."""
    # Announce 1 GiB and provide no body and no EOF: a reader that tried to read the body
    # would hang; the bound check must fire on the header.
    with pytest.raises(MemoriesError) as err:
        read_from_bytes(struct.pack(">I", 1 << 30), eof=False)
    assert err.value.code == "frame_too_large"
    with pytest.raises(MemoriesError):
        read_from_bytes(frame(b"{}" + b" " * 10), max_bytes=11)


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00", frame(b"{}")[:-1], struct.pack(">I", 10) + b"{}"])
def test_read_frame_truncated(data: bytes) -> None:
    """API-2: EOF inside a header or body → TruncatedFrame."""
    with pytest.raises(TruncatedFrame):
        read_from_bytes(data)


@pytest.mark.parametrize(
    "payload",
    [
        b"{not json",
        b"[1, 2]",
        b'"string"',
        b"42",
        b"",
        b"\xff\xfe{}",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": 1, "a": 2}',
        b'{"a": "\\ud800"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' + b"1" * 5000 + b"}",
    ],
)
def test_read_frame_invalid_json(payload: bytes) -> None:
    """API-8: bad UTF-8, bad JSON, non-objects, NaN, duplicate keys, lone surrogates,
    deep nesting and giant integers are all typed invalid_json (never a crash)."""
    with pytest.raises(MemoriesError) as err:
        read_from_bytes(frame(payload))
    assert err.value.code == "invalid_json"


def test_valid_surrogate_pair_is_accepted() -> None:
    assert decode_body(b'{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


def test_read_frame_timeouts() -> None:
    """API-2: idle_timeout bounds the wait for a first byte; frame_timeout the rest."""

    async def go(data: bytes, **kwargs: float) -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        await read_frame(reader, MAX_FRAME_BYTES, **kwargs)

    with pytest.raises(TimeoutError):
        asyncio.run(go(b"", idle_timeout=0.05))
    with pytest.raises(TimeoutError):
        asyncio.run(go(b"\x00\x00", idle_timeout=10, frame_timeout=0.05))
    with pytest.raises(TimeoutError):
        asyncio.run(go(struct.pack(">I", 10) + b"{", frame_timeout=0.05))


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_objects)
def test_round_trip_arbitrary_json_objects(obj: dict[str, Any]) -> None:
    """API-2 (property): encode_frame → read_frame / read_frame_sync is the identity."""
    data = encode_frame(obj)
    assert read_from_bytes(data) == obj
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        assert read_frame_sync(b, MAX_FRAME_BYTES) == obj


@settings(max_examples=200, deadline=None, database=None)
@given(st.binary(max_size=64) | st.binary(max_size=64).map(frame) | json_values.map(lambda v: frame(json.dumps(v).encode())))
def test_arbitrary_bytes_never_crash_the_parser(data: bytes) -> None:
    """API-8 (property): any byte string yields a dict, None, a typed error or TruncatedFrame."""
    try:
        result = read_from_bytes(data)
    except MemoriesError as exc:
        assert exc.code in ("invalid_json", "frame_too_large")
    except TruncatedFrame:
        pass
    else:
        assert result is None or isinstance(result, dict)


# ---------------------------------------------------------------- sync reader


def test_read_frame_sync_errors() -> None:
    """API-2: the client reader distinguishes clean close, truncation and bad frames."""
    a, b = socket.socketpair()
    with b:
        a.close()
        with pytest.raises(PeerClosed):
            read_frame_sync(b, MAX_FRAME_BYTES)
    a, b = socket.socketpair()
    with b:
        a.sendall(frame(b"{}")[:3])
        a.close()
        with pytest.raises(TruncatedFrame):
            read_frame_sync(b, MAX_FRAME_BYTES)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", 1 << 30))
        with pytest.raises(MemoriesError) as err:
            read_frame_sync(b, MAX_FRAME_BYTES)
        assert err.value.code == "frame_too_large"
        a.sendall(frame(b"[]"))
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame(b"[]"))
        with pytest.raises(MemoriesError) as err:
            read_frame_sync(b, MAX_FRAME_BYTES)
        assert err.value.code == "invalid_json"
    a, b = socket.socketpair()
    with a, b:
        b.settimeout(0.05)
        with pytest.raises(TimeoutError):
            read_frame_sync(b, MAX_FRAME_BYTES)


# ---------------------------------------------------------------- envelopes


def test_envelopes() -> None:
    """API-2: request / ok / error envelope shapes."""
    assert make_request(3, {"op": "x"}) == {"v": 1, "id": 3, "body": {"op": "x"}}
    assert make_ok(3, {"r": 1}) == {"v": 1, "id": 3, "ok": True, "result": {"r": 1}}
    err = make_error(None, MemoriesError("busy"))
    assert err == {"v": 1, "id": None, "ok": False, "error": {"code": "busy", "message": CODES["busy"]}}
    assert parse_request({"v": 1, "id": 0, "body": {}}) == (0, {})
    assert parse_request({"v": 1, "id": 2**53 - 1, "body": {"a": 1}}) == (2**53 - 1, {"a": 1})


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        ({"v": 2, "id": 1, "body": {}}, "unsupported_wire_version"),
        ({"v": "1", "id": 1, "body": {}}, "unsupported_wire_version"),
        ({"v": True, "id": 1, "body": {}}, "unsupported_wire_version"),
        ({"v": 1.0, "id": 1, "body": {}}, "unsupported_wire_version"),
        ({"v": 2, "whatever": 1}, "unsupported_wire_version"),
        ({"id": 1, "body": {}}, "invalid_request"),
        ({"v": 1, "body": {}}, "invalid_request"),
        ({"v": 1, "id": None, "body": {}}, "invalid_request"),
        ({"v": 1, "id": True, "body": {}}, "invalid_request"),
        ({"v": 1, "id": 1.5, "body": {}}, "invalid_request"),
        ({"v": 1, "id": -1, "body": {}}, "invalid_request"),
        ({"v": 1, "id": 2**53, "body": {}}, "invalid_request"),  # one past the limit, by value
        ({"v": 1, "id": "1", "body": {}}, "invalid_request"),
        ({"v": 1, "id": 1}, "invalid_request"),
        ({"v": 1, "id": 1, "body": []}, "invalid_request"),
        ({"v": 1, "id": 1, "body": {}, "extra": 0}, "invalid_request"),
    ],
)
def test_parse_request_rejects(obj: dict[str, Any], code: str) -> None:
    """API-1/API-2: wrong version → unsupported_wire_version; any other malformation → invalid_request."""
    with pytest.raises(MemoriesError) as err:
        parse_request(obj)
    assert err.value.code == code


def test_client_import_is_lean() -> None:
    """API-2: the CLI client pulls in neither asyncio nor ctypes nor the server."""
    code = (
        "import sys, engine.ipc.client\n"
        "bad = [m for m in ('asyncio', 'ctypes', 'engine.ipc.server', 'engine.ipc.peer') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
