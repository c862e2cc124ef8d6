"""Wire v1 binary part (FI-1 file chunks without base64): framing, bounds and a real server.

A frame whose length word has the top bit set carries, after its JSON, a second 4-byte
length and that many raw bytes. These tests drive the readers with real socket pairs and
a real :class:`IpcServer` on a Unix socket.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from engine.ipc.framing import (
    MAX_FRAME_BYTES,
    MAX_PAYLOAD_BYTES,
    PAYLOAD_FLAG,
    TruncatedFrame,
    encode_frame,
    make_request,
    read_frame,
    read_frame_sync,
    read_message,
    read_message_sync,
)
from engine.ipc.peer import Peer
from engine.ipc.server import IpcServer

_U32 = struct.Struct(">I")


def _pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.settimeout(5)
    b.settimeout(5)
    return a, b


def _send(sock: socket.socket, data: bytes) -> threading.Thread:
    """Send from a thread: a frame may be larger than the socket buffer."""
    sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    sender.start()
    return sender


def _flagged(json_part: bytes, payload_len: int, payload: bytes) -> bytes:
    return _U32.pack(PAYLOAD_FLAG | len(json_part)) + json_part + _U32.pack(payload_len) + payload


async def _read_async(data: bytes, **kwargs: Any) -> tuple[dict[str, Any], bytes | None] | None:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await read_message(reader, MAX_FRAME_BYTES, **kwargs)


def test_binary_part_round_trips_sync_and_async() -> None:
    """FI-1: JSON plus raw bytes (including every byte value and an empty part) arrive intact."""
    for payload in (bytes(range(256)) * 1000, b""):
        frame = encode_frame({"k": "v"}, payload=payload)
        assert _U32.unpack(frame[:4])[0] & PAYLOAD_FLAG
        a, b = _pair()
        with a, b:
            sender = _send(a, frame)
            assert read_message_sync(b, MAX_FRAME_BYTES) == ({"k": "v"}, payload)
            sender.join(5)
        assert asyncio.run(_read_async(frame)) == ({"k": "v"}, payload)
    # A plain frame reads as before, with no binary part.
    assert asyncio.run(_read_async(encode_frame({"a": 1}))) == ({"a": 1}, None)


def test_old_readers_refuse_a_binary_frame_as_too_large() -> None:
    """Backward compatibility: a reader without binary support sees a length above the limit."""
    frame = encode_frame({"k": 1}, payload=b"abc")
    a, b = _pair()
    with a, b:
        a.sendall(frame)
        with pytest.raises(MemoriesError) as exc:
            read_frame_sync(b, MAX_FRAME_BYTES)
        assert exc.value.code == "frame_too_large"

    async def old() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(frame)
        reader.feed_eof()
        await read_frame(reader, MAX_FRAME_BYTES)

    with pytest.raises(MemoriesError) as exc:
        asyncio.run(old())
    assert exc.value.code == "frame_too_large"


def test_oversize_binary_part_is_refused_before_reading_it() -> None:
    """The announced binary length is checked before a byte of it is read (no buffering)."""
    json_part = b'{"k":1}'
    a, b = _pair()
    with a, b:
        # Announce 1 byte more than allowed and send none of it: the reader must not wait.
        a.sendall(_flagged(json_part, MAX_PAYLOAD_BYTES + 1, b""))
        with pytest.raises(MemoriesError) as exc:
            read_message_sync(b, MAX_FRAME_BYTES)
        assert exc.value.code == "frame_too_large"
        assert exc.value.details["limit"] == MAX_PAYLOAD_BYTES
    with pytest.raises(MemoriesError) as exc:
        asyncio.run(_read_async(_flagged(json_part, 0xFFFFFFFF, b"")))
    assert exc.value.code == "frame_too_large"
    # A smaller bound given by the reader applies too.
    with pytest.raises(MemoriesError) as exc:
        asyncio.run(_read_async(_flagged(json_part, 11, b"x" * 11), max_payload=10))
    assert exc.value.code == "frame_too_large"
    # The writer refuses an oversize part before anything is sent.
    with pytest.raises(MemoriesError) as exc:
        encode_frame({"k": 1}, payload=bytearray(MAX_PAYLOAD_BYTES + 1))  # calloc: no pages touched
    assert exc.value.code == "frame_too_large"


def test_oversize_json_with_flag_is_refused() -> None:
    """The JSON length of a flagged frame keeps the ordinary frame limit."""
    word = _U32.pack(PAYLOAD_FLAG | (MAX_FRAME_BYTES + 1))
    with pytest.raises(MemoriesError) as exc:
        asyncio.run(_read_async(word))
    assert exc.value.code == "frame_too_large"


@pytest.mark.parametrize(
    "data",
    [
        _flagged(b'{"k":1}', 10, b"12345"),  # 5 of 10 bytes
        _U32.pack(PAYLOAD_FLAG | 7) + b'{"k":1}' + b"\x00\x00",  # cut inside the second length
        _U32.pack(PAYLOAD_FLAG | 7) + b'{"k":1}',  # no second length at all
    ],
)
def test_truncated_binary_part(data: bytes) -> None:
    """A stream that ends inside the binary part or its length is a truncated frame."""
    with pytest.raises(TruncatedFrame):
        asyncio.run(_read_async(data))
    a, b = _pair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        with pytest.raises(TruncatedFrame):
            read_message_sync(b, MAX_FRAME_BYTES)


def test_bad_json_before_a_binary_part_is_invalid_json() -> None:
    with pytest.raises(MemoriesError) as exc:
        asyncio.run(_read_async(_flagged(b"[1]", 2, b"ab")))
    assert exc.value.code == "invalid_json"


# -- a real server -----------------------------------------------------------------------------


async def _handler(body: dict[str, Any], peer: Peer) -> dict[str, Any]:
    payload = body.get("payload")
    if body.get("op") == "reverse":
        assert isinstance(payload, bytes)
        return {"n": len(payload), "payload": payload[::-1]}
    return {"kind": type(payload).__name__}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "run" / "engine.sock"
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    srv = IpcServer(path, _handler, frame_read_timeout=5.0, idle_timeout=10.0)
    asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    try:
        yield path
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_server_passes_binary_parts_both_ways(server: Path) -> None:
    """FI-1: the request's bytes reach the handler as body["payload"]; bytes answered come back."""
    data = bytes(range(256)) * 4096  # 1 MiB
    with IpcClient(server) as client:
        answer = client.request({"op": "reverse", "payload": data})
        assert answer == {"n": len(data), "payload": data[::-1]}
        # A JSON string under "payload" stays a string (JSON cannot make bytes).
        assert client.request({"op": "kind", "payload": "text"}) == {"kind": "str"}
        assert client.request({"op": "kind"}) == {"kind": "NoneType"}


def test_server_refuses_a_payload_twice_and_keeps_the_stream(server: Path) -> None:
    """A binary part plus a JSON `payload` field is invalid_request; the connection stays usable."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    with s:
        s.connect(str(server))
        s.sendall(encode_frame(make_request(1, {"op": "kind", "payload": "x"}), payload=b"abc"))
        reply, part = read_message_sync(s, MAX_FRAME_BYTES)
        assert part is None
        assert reply["ok"] is False and reply["error"]["code"] == "invalid_request"
        s.sendall(encode_frame(make_request(2, {"op": "reverse"}), payload=b"abc"))
        reply, part = read_message_sync(s, MAX_FRAME_BYTES)
        assert reply["ok"] is True and reply["id"] == 2 and part == b"cba"


def test_server_answers_oversize_binary_part_and_closes(server: Path) -> None:
    """An announced binary part above the limit: frame_too_large, then the engine hangs up."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    with s:
        s.connect(str(server))
        json_part = encode_frame(make_request(1, {"op": "reverse"}))[4:]
        s.sendall(_flagged(json_part, MAX_PAYLOAD_BYTES + 1, b""))
        reply = read_frame_sync(s, MAX_FRAME_BYTES)
        assert reply["ok"] is False and reply["error"]["code"] == "frame_too_large"
        assert s.recv(1) == b""  # closed: the unread part cannot be skipped
