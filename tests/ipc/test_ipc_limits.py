"""Wire v1 at its exact limits (API-2, API-8): lone low surrogates, a frame of exactly the
maximum length, the largest request id, and the client's whole-frame read deadline.

The neighbouring tests cover a lone *high* surrogate, a 1 GiB announcement and an id one past
the limit; these pin the other side of each boundary, so a check that is loosened by one
(``>`` to ``>=``, a narrower surrogate range, a per-recv instead of a whole-frame deadline)
fails a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from engine.ipc.framing import (
    MAX_REQUEST_ID,
    decode_body,
    encode_frame,
    make_request,
    read_frame,
    read_frame_sync,
)
from tests.ipc.test_ipc_server import raw, recv, running, send_payload

# The largest request id, pinned by value (the largest integer every JSON client represents
# exactly, 2^53-1): imported from engine.ipc.framing, a changed limit would go unnoticed.
LARGEST_ID = 2**53 - 1
LONE_LOW = [b'{"a": "\\udc00"}', b'{"a": "\\uDFFF"}', b'{"a": "x\\ude00y"}', b'{"a": "\\ud83d\\ude00\\ude00"}']


@pytest.mark.parametrize("payload", LONE_LOW)
def test_lone_low_surrogate_is_invalid_json(payload: bytes) -> None:
    """API-8: an escaped lone low surrogate (U+DC00–U+DFFF), alone or after a valid pair,
    is invalid_json like a lone high one: it could never be re-encoded as UTF-8."""
    with pytest.raises(MemoriesError) as err:
        decode_body(payload)
    assert err.value.code == "invalid_json"


def test_lone_low_surrogate_through_the_server(tmp_path: Path) -> None:
    """API-8: the server answers a lone low surrogate with invalid_json and keeps the connection."""
    path = tmp_path / "run" / "engine.sock"
    with running(path, frame_read_timeout=5.0, idle_timeout=10.0), raw(path) as s:
        send_payload(s, b'{"v": 1, "id": 3, "body": {"op": "echo", "value": "\\udfff"}}')
        resp = recv(s)
        assert resp["id"] is None and resp["error"]["code"] == "invalid_json"
        s.sendall(encode_frame(make_request(4, {"op": "echo", "value": "ok"})))
        assert recv(s)["result"]["echo"] == "ok"


def _body_of_length(n: int) -> dict[str, Any]:
    """A JSON object whose compact encoding is exactly ``n`` bytes."""
    obj = {"p": ""}
    obj["p"] = "x" * (n - len(json.dumps(obj, separators=(",", ":"))))
    assert len(json.dumps(obj, separators=(",", ":")).encode()) == n
    return obj


def _read_async(data: bytes, max_bytes: int) -> dict[str, Any] | None:
    async def go() -> dict[str, Any] | None:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader, max_bytes)

    return asyncio.run(go())


def _read_sync(data: bytes, max_bytes: int) -> dict[str, Any]:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        b.settimeout(5)
        return read_frame_sync(b, max_bytes)


def test_a_frame_of_exactly_the_maximum_length_is_accepted_one_more_is_not() -> None:
    """API-2: the bound is inclusive on every side: encoder, async reader and sync reader."""
    limit = 300
    exact, over = _body_of_length(limit), _body_of_length(limit + 1)
    data = encode_frame(exact, max_bytes=limit)
    assert struct.unpack(">I", data[:4])[0] == limit
    assert _read_async(data, limit) == exact
    assert _read_sync(data, limit) == exact
    with pytest.raises(MemoriesError) as err:
        encode_frame(over, max_bytes=limit)
    assert err.value.code == "frame_too_large"
    data_over = encode_frame(over, max_bytes=limit + 1)
    for reader in (_read_async, _read_sync):
        with pytest.raises(MemoriesError) as err:
            reader(data_over, limit)
        assert err.value.code == "frame_too_large"


def test_a_request_of_exactly_the_server_limit_is_served(tmp_path: Path) -> None:
    """API-2: a server with max_frame_bytes N serves an N-byte request and refuses N+1 (then closes)."""
    path = tmp_path / "run" / "engine.sock"
    limit = 4096
    envelope = make_request(9, {"op": "sleep", "seconds": 0, "pad": ""})  # a short answer
    room = limit - len(json.dumps(envelope, separators=(",", ":")).encode())
    with running(path, max_frame_bytes=limit, frame_read_timeout=5.0, idle_timeout=10.0):
        with raw(path) as s:
            frame = encode_frame(make_request(9, {"op": "sleep", "seconds": 0, "pad": "v" * room}), max_bytes=limit)
            assert len(frame) == 4 + limit
            s.sendall(frame)
            assert recv(s) == {"v": 1, "id": 9, "ok": True, "result": {"slept": True}}
        with raw(path) as s:
            s.sendall(encode_frame(make_request(9, {"op": "sleep", "seconds": 0, "pad": "v" * (room + 1)}), max_bytes=limit + 1))
            resp = recv(s)
            assert resp["id"] is None and resp["error"]["code"] == "frame_too_large"


def test_the_largest_request_id_round_trips_and_the_client_wraps_after_it(tmp_path: Path) -> None:
    """API-2: id 2^53-1 is answered with that id; one more is invalid_request; the client's id
    counter wraps from 2^53-1 to 1 instead of sending an id the engine must refuse."""
    assert MAX_REQUEST_ID == LARGEST_ID
    path = tmp_path / "run" / "engine.sock"
    with running(path, frame_read_timeout=5.0, idle_timeout=10.0):
        with raw(path) as s:
            s.sendall(encode_frame(make_request(LARGEST_ID, {"op": "echo", "value": 1})))
            assert recv(s)["id"] == LARGEST_ID
            s.sendall(encode_frame(make_request(LARGEST_ID + 1, {"op": "echo", "value": 1})))
            resp = recv(s)
            assert resp["id"] is None and resp["error"]["code"] == "invalid_request"
        with IpcClient(path, timeout=5) as client:
            client._next_id = LARGEST_ID - 1
            for value in range(4):  # ids 2^53-2, 2^53-1, 1, 2
                assert client.request({"op": "echo", "value": value})["echo"] == value
            assert client._take_id() == 3


class _TricklingEngine:
    """A stalled engine: it reads one request, then sends a valid answer one byte at a time.

    Each byte comes well within the client's timeout, so only a deadline for the whole frame
    can stop the client from waiting for all of them. ``client_hung_up`` is set when a send
    fails because the client closed the connection.
    """

    def __init__(self, path: Path, delay: float) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(os.fspath(path))
        self.listener.listen(1)
        self.delay = delay
        self.client_hung_up = False
        self.sent_everything = False
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(10)
            request = read_frame_sync(conn, 1 << 20)
            answer = encode_frame({"v": 1, "id": request["id"], "ok": True, "result": {"late": "x" * 40}})
            try:
                for i in range(len(answer)):
                    conn.sendall(answer[i : i + 1])
                    if self.stop.wait(self.delay):
                        return
                self.sent_everything = True
            except (BrokenPipeError, ConnectionResetError):
                self.client_hung_up = True

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.listener.close()


def test_client_deadline_bounds_the_whole_answer_from_a_stalled_engine(tmp_path: Path) -> None:
    """API-2/API-8: a request's timeout bounds the whole answer, not each recv: an engine that
    trickles its answer gets `timeout`, and the client hangs up (a late answer can never be
    read as the answer to the next request)."""
    path = tmp_path / "engine.sock"
    engine = _TricklingEngine(path, delay=0.05)  # about 4 s for the whole answer
    try:
        client = IpcClient(path, timeout=5)
        with pytest.raises(MemoriesError) as err:
            client.request({"op": "echo"}, timeout=0.5)
        assert err.value.code == "timeout"
        assert not client.connected
        engine.thread.join(30)  # it stops at its first send after the hang-up
        assert engine.client_hung_up and not engine.sent_everything
    finally:
        engine.close()
