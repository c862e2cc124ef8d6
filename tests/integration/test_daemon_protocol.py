"""Malformed requests against the real daemon: typed errors, daemon keeps serving (API-1, API-2, API-8)."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.helpers import PASSWORD, Cli


def _raw(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    return sock


def _frame(obj: Any) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def _read(sock: socket.socket) -> dict[str, Any] | None:
    header = b""
    while len(header) < 4:
        chunk = sock.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (length,) = struct.unpack(">I", header)
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            return None
        body += chunk
    result: dict[str, Any] = json.loads(body)
    return result


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"op": "no_such_op"}, "unknown_op"),
        ({"op": "put", "title": "x", "colour": "red"}, "unknown_field"),
        ({"op": "put", "title": 5}, "invalid_request"),
        ({"op": "put"}, "invalid_request"),
        ({"op": "put", "title": "x", "tags": "not-a-list"}, "invalid_request"),
        ({"op": "list", "limit": -1}, "invalid_request"),
        ({"title": "no op"}, "invalid_request"),
        ({"op": 7}, "invalid_request"),
    ],
)
def test_bad_requests_get_typed_errors(vault: Cli, body: dict[str, Any], code: str) -> None:
    """API-1/API-8: unknown ops and fields, wrong types: typed error, nothing changes."""
    with IpcClient(Paths(vault.home).socket) as client:
        with pytest.raises(MemoriesError) as info:
            client.request(body)
        assert info.value.code == code
        assert client.request({"op": "list"})["total"] == 0  # same connection still usable


def test_password_never_echoed_in_errors(vault: Cli) -> None:
    """API-8: an error about a request carrying a password never repeats it."""
    secret = "S3cr3t-" + PASSWORD
    with IpcClient(Paths(vault.home).socket) as client:
        for body in ({"op": "unlock", "password": secret, "extra": 1}, {"op": "sudo", "password": [secret]}):
            with pytest.raises(MemoriesError) as info:
                client.request(body)
            assert secret not in info.value.message


def test_garbage_and_oversized_frames_do_not_stall_others(vault: Cli) -> None:
    """API-2: oversized, truncated and invalid frames are handled per connection."""
    path = str(Paths(vault.home).socket)
    slow = _raw(path)
    slow.sendall(b"\x00\x00")  # a stalled header
    huge = _raw(path)
    huge.sendall(struct.pack(">I", 1 << 30))
    reply = _read(huge)
    assert reply is not None and reply["error"]["code"] == "frame_too_large"
    assert _read(huge) is None  # then closed
    bad_json = _raw(path)
    bad_json.sendall(struct.pack(">I", 5) + b"{nope")
    reply = _read(bad_json)
    assert reply is not None and reply["error"]["code"] == "invalid_json"
    truncated = _raw(path)
    truncated.sendall(struct.pack(">I", 100) + b"{}")
    truncated.close()
    # Meanwhile an ordinary client is served at once.
    with IpcClient(Paths(vault.home).socket, timeout=5) as client:
        assert client.request({"op": "desktop_status"})["state"] == "unlocked"
    bad_wire = _raw(path)
    bad_wire.sendall(_frame({"v": 2, "id": 1, "body": {"op": "list"}}))
    reply = _read(bad_wire)
    assert reply is not None and reply["error"]["code"] == "unsupported_wire_version"
    for sock in (slow, huge, bad_json, bad_wire):
        sock.close()
    assert vault.ok("status")["state"] == "unlocked"
