"""Unix-socket IPC server and lean client against real sockets (SPEC API-2, API-8).

The server runs in a background thread's event loop; clients are plain blocking sockets
or :class:`engine.ipc.client.IpcClient` in the test thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import CODES, MemoriesError
from engine.ipc.client import IpcClient
from engine.ipc.framing import MAX_FRAME_BYTES, encode_frame, make_request, read_frame_sync
from engine.ipc.peer import Peer
from engine.ipc.server import INTERNAL_MESSAGE, IpcServer
from tests.helpers import require

CANARY = "secret-canary"
_MEETINGS: dict[str, list[Any]] = {}
_GATES: dict[str, tuple[threading.Event, asyncio.Event]] = {}


async def handler(body: dict[str, Any], peer: Peer) -> dict[str, Any]:
    op = body.get("op")
    if op == "echo":
        return {"echo": body.get("value"), "uid": peer.uid}
    if op == "sleep":
        await asyncio.sleep(float(body["seconds"]))
        return {"slept": True}
    if op == "meet":
        # Answers once ``n`` requests with this key are inside the handler at the same time
        # ({"met": false} after 10 s): requests served one after another can never meet.
        group = _MEETINGS.setdefault(str(body["key"]), [0, asyncio.Event()])
        group[0] += 1
        if group[0] >= int(body["n"]):
            group[1].set()
        try:
            async with asyncio.timeout(10):
                await group[1].wait()
        except TimeoutError:
            return {"met": False}
        return {"met": True}
    if op == "gate":
        # Entered (the test waits for that), then answers once the test opens the gate.
        entered, gate = _GATES.setdefault(str(body["key"]), (threading.Event(), asyncio.Event()))
        entered.set()
        await gate.wait()
        return {"opened": True}
    if op == "fail":
        raise MemoriesError(str(body["code"]), "Failed on purpose.")
    if op == "boom":
        raise RuntimeError(CANARY)
    if op == "nan":
        return {"x": float("nan"), "hint": CANARY}
    if op == "big":
        return {"blob": "x" * int(body["size"])}
    if op == "list":
        return [CANARY]  # type: ignore[return-value]
    raise MemoriesError("unknown_op")


class ServerThread:
    """An IpcServer running on its own event loop in a daemon thread."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        self.path = path
        self.kwargs = kwargs
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: IpcServer | None = None

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        self.server = IpcServer(self.path, handler, **self.kwargs)
        await self.server.start()

    def start(self) -> ServerThread:
        self.thread.start()
        try:
            self.run(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def active(self) -> int:
        async def get() -> int:
            assert self.server is not None
            return self.server.active_connections

        return int(self.run(get()))

    def stop(self) -> None:
        if self.server is not None:
            self.run(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextlib.contextmanager
def running(path: Path, **kwargs: Any) -> Iterator[ServerThread]:
    srv = ServerThread(path, **kwargs).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "engine.sock"


@pytest.fixture
def server(sock_path: Path) -> Iterator[ServerThread]:
    with running(sock_path, frame_read_timeout=2.0, idle_timeout=10.0) as srv:
        yield srv


def raw(path: Path, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def send_payload(s: socket.socket, payload: bytes) -> None:
    s.sendall(struct.pack(">I", len(payload)) + payload)


def send_obj(s: socket.socket, obj: dict[str, Any]) -> None:
    s.sendall(encode_frame(obj))


def recv(s: socket.socket) -> dict[str, Any]:
    return read_frame_sync(s, MAX_FRAME_BYTES)


def assert_closed(s: socket.socket) -> None:
    try:
        data = s.recv(1)
    except ConnectionResetError:
        return
    assert data == b""


def echo_ok(path: Path, value: object = "hi") -> None:
    with IpcClient(path, timeout=5) as client:
        assert client.request({"op": "echo", "value": value}) == {"echo": value, "uid": os.getuid()}


# ------------------------------------------------------------------ round trips


def test_several_requests_on_one_connection(server: ServerThread, sock_path: Path) -> None:
    """API-2: many requests on one connection, answered in order with matching ids."""
    with IpcClient(sock_path, timeout=5) as client:
        for i in range(20):
            assert client.request({"op": "echo", "value": i}) == {"echo": i, "uid": os.getuid()}
    # Pipelined on a raw socket: responses come back in request order.
    with raw(sock_path) as s:
        s.sendall(b"".join(encode_frame(make_request(i, {"op": "echo", "value": i})) for i in range(10)))
        for i in range(10):
            resp = recv(s)
            assert resp == {"v": 1, "id": i, "ok": True, "result": {"echo": i, "uid": os.getuid()}}


def test_unicode_and_large_payloads_round_trip(server: ServerThread, sock_path: Path) -> None:
    """API-2: UTF-8 bodies and multi-megabyte frames under the bound."""
    echo_ok(sock_path, "héllo 漢字 \U0001f600")
    echo_ok(sock_path, "z" * (3 * 1024 * 1024))


def test_sixteen_concurrent_connections_and_seventeenth_is_busy(server: ServerThread, sock_path: Path) -> None:
    """API-2: 16 concurrent connections are served; the 17th gets `busy` and is closed."""
    clients = [IpcClient(sock_path, timeout=5) for _ in range(16)]
    try:
        # Each of the 16 has a request in flight at the same time (the handler sleeps).
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda c: c.request({"op": "meet", "key": "sixteen", "n": 16}, timeout=20), clients))
        assert results == [{"met": True}] * 16  # all 16 were inside the handler at once
        assert server.active() == 16
        # The 17th: one busy frame with a null id, then EOF.
        with raw(sock_path) as s:
            resp = recv(s)
            assert resp["ok"] is False and resp["id"] is None and resp["error"]["code"] == "busy"
            assert_closed(s)
        with pytest.raises(MemoriesError) as err:
            IpcClient(sock_path, timeout=5).request({"op": "echo"})
        assert err.value.code == "busy"
        # Everyone admitted is still served.
        assert all(c.request({"op": "echo", "value": 1})["echo"] == 1 for c in clients)
        # Freeing one slot admits a new client.
        clients.pop().close()
        deadline = time.monotonic() + 120
        while server.active() > 15 and time.monotonic() < deadline:
            time.sleep(0.01)
        echo_ok(sock_path)
    finally:
        for c in clients:
            c.close()


# ------------------------------------------------------------------ hostile frames


def test_oversized_frame_is_refused_while_others_are_served(server: ServerThread, sock_path: Path) -> None:
    """API-2: a 1 GiB announcement gets frame_too_large and a close, without the server
    reading (or waiting for) the body; a concurrent client is unaffected."""
    with IpcClient(sock_path, timeout=5) as other, raw(sock_path) as bad:
        assert other.request({"op": "echo", "value": "before"})["echo"] == "before"
        bad.sendall(struct.pack(">I", 1 << 30) + b"{" * 1000)  # no EOF, body never completes
        resp = recv(bad)
        assert resp["id"] is None and resp["error"]["code"] == "frame_too_large"
        assert_closed(bad)
        assert other.request({"op": "echo", "value": "after"})["echo"] == "after"


def test_truncated_frame_closes_only_that_connection(server: ServerThread, sock_path: Path) -> None:
    """API-2: EOF in the middle of a frame closes that connection silently."""
    with raw(sock_path) as bad:
        bad.sendall(struct.pack(">I", 100) + b'{"v": 1')
        bad.shutdown(socket.SHUT_WR)
        assert_closed(bad)
    with raw(sock_path) as bad:
        bad.sendall(b"\x00\x00")
        bad.shutdown(socket.SHUT_WR)
        assert_closed(bad)
    echo_ok(sock_path)


def test_slow_loris_does_not_delay_others(sock_path: Path) -> None:
    """API-2: a client that sends 2 header bytes and stalls neither delays another
    client's round trip nor keeps its connection past frame_read_timeout."""
    # A frame deadline far beyond the client's timeout: an echo stuck behind the loris would time out.
    with running(sock_path, frame_read_timeout=60.0, idle_timeout=120.0), raw(sock_path) as loris:
        loris.sendall(b"\x00\x00")
        with raw(sock_path) as other:  # the loris's bytes reached the server before this connection
            send_obj(other, make_request(1, {"op": "echo", "value": "beside the loris"}))
            assert recv(other)["result"]["echo"] == "beside the loris"
        echo_ok(sock_path)
    # The loris itself is cut off once frame_read_timeout has elapsed (a socket timeout, not a clock check).
    with running(sock_path, frame_read_timeout=0.5, idle_timeout=120.0), raw(sock_path, timeout=30) as loris:
        loris.sendall(b"\x00\x00")
        assert_closed(loris)


def test_idle_connection_is_closed(sock_path: Path) -> None:
    """API-2: a connection that never starts a frame is closed after idle_timeout."""
    with running(sock_path, frame_read_timeout=5.0, idle_timeout=0.5), raw(sock_path, timeout=30) as idle:
        # Not closed at once: a request right away is served (the idle clock restarts after it).
        send_obj(idle, make_request(1, {"op": "echo", "value": "awake"}))
        assert recv(idle)["result"]["echo"] == "awake"
        assert_closed(idle)  # then, with nothing more sent, closed (a socket timeout bounds the wait)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"\xff\xfe\xfd", "invalid_json"),
        (b"[1, 2, 3]", "invalid_json"),
        (b'{"v": 2, "id": 1, "body": {}}', "unsupported_wire_version"),
        (b'{"v": 1, "body": {"op": "echo"}}', "invalid_request"),
        (b'{"v": 1, "id": true, "body": {}}', "invalid_request"),
        (b'{"v": 1, "id": 1, "body": []}', "invalid_request"),
        (b'{"v": 1, "id": 1, "body": {}, "x": 1}', "invalid_request"),
        (b"", "invalid_json"),
    ],
)
def test_bad_frames_get_typed_errors_and_connection_stays_usable(
    server: ServerThread, sock_path: Path, payload: bytes, code: str
) -> None:
    """API-8: invalid JSON, a JSON array, a wrong wire version, a missing id... each get a
    typed error frame (id null) and the same connection serves the next request."""
    with raw(sock_path) as s:
        send_payload(s, payload)
        resp = recv(s)
        assert resp["v"] == 1 and resp["ok"] is False and resp["id"] is None
        assert resp["error"]["code"] == code
        assert isinstance(resp["error"]["message"], str) and resp["error"]["message"]
        send_obj(s, make_request(5, {"op": "echo", "value": "still here"}))
        assert recv(s) == {"v": 1, "id": 5, "ok": True, "result": {"echo": "still here", "uid": os.getuid()}}


# ------------------------------------------------------------------ handler errors


@pytest.mark.parametrize("code", ["not_found", "locked", "elevation_required", "unknown_field"])
def test_handler_memories_error_reaches_client_with_same_code(server: ServerThread, sock_path: Path, code: str) -> None:
    """API-8: a typed handler error arrives as the same code; the connection stays open."""
    with IpcClient(sock_path, timeout=5) as client:
        with pytest.raises(MemoriesError) as err:
            client.request({"op": "fail", "code": code})
        assert err.value.code == code and err.value.message == "Failed on purpose."
        assert client.connected
        assert client.request({"op": "echo", "value": 2})["echo"] == 2


@pytest.mark.parametrize("op", ["boom", "nan", "list"])
def test_unexpected_handler_failure_is_internal_and_leaks_nothing(
    server: ServerThread, sock_path: Path, op: str, caplog: pytest.LogCaptureFixture
) -> None:
    """API-8: RuntimeError("secret-canary") (or an unencodable / non-dict result) becomes
    `internal` with a fixed sentence; the canary is in neither the response nor the logs."""
    caplog.set_level(logging.DEBUG)
    with raw(sock_path) as s:
        s.sendall(encode_frame(make_request(9, {"op": op})))
        header = s.recv(4)
        (length,) = struct.unpack(">I", header)
        body = b""
        while len(body) < length:
            body += s.recv(length - len(body))
        assert CANARY.encode() not in header + body
        resp = read_frame_sync(_replay(header + body), MAX_FRAME_BYTES)
        assert resp == {"v": 1, "id": 9, "ok": False, "error": {"code": "internal", "message": INTERNAL_MESSAGE}}
    with IpcClient(sock_path, timeout=5) as client:
        with pytest.raises(MemoriesError) as err:
            client.request({"op": op})
        assert err.value.code == "internal" and CANARY not in str(err.value)
        assert client.request({"op": "echo", "value": 3})["echo"] == 3
    assert CANARY not in caplog.text
    if op == "boom":
        assert "RuntimeError" in caplog.text


def _replay(data: bytes) -> socket.socket:
    a, b = socket.socketpair()
    a.sendall(data)
    a.close()
    return b


def test_oversized_response_is_a_typed_error(sock_path: Path) -> None:
    """API-2: a result over the frame bound becomes frame_too_large for that id only."""
    with running(sock_path, max_frame_bytes=64 * 1024), IpcClient(sock_path, timeout=5) as client:
        with pytest.raises(MemoriesError) as err:
            client.request({"op": "big", "size": 100_000})
        assert err.value.code == "frame_too_large"
        assert client.request({"op": "big", "size": 10})["blob"] == "x" * 10


# ------------------------------------------------------------------ client behaviour


def test_client_errors_without_daemon(tmp_path: Path) -> None:
    """API-8: missing socket / nobody listening → daemon_unavailable."""
    with pytest.raises(MemoriesError) as err:
        IpcClient(tmp_path / "nope.sock").connect()
    assert err.value.code == "daemon_unavailable"
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))
    s.close()  # a socket file nobody listens on
    with pytest.raises(MemoriesError) as err:
        IpcClient(dead).request({"op": "echo"})
    assert err.value.code == "daemon_unavailable"


def test_client_timeout_then_reconnects(server: ServerThread, sock_path: Path) -> None:
    """API-8: no answer in time → `timeout`; the late answer is not misread later."""
    with IpcClient(sock_path, timeout=5) as client:
        with pytest.raises(MemoriesError) as err:
            client.request({"op": "sleep", "seconds": 0.5}, timeout=0.1)
        assert err.value.code == "timeout"
        assert not client.connected
        assert client.request({"op": "echo", "value": "fresh"})["echo"] == "fresh"


def test_client_request_ids_increment(server: ServerThread, sock_path: Path) -> None:
    with IpcClient(sock_path, timeout=5) as client:
        ids = [client._take_id() for _ in range(3)]
        assert ids == [1, 2, 3]
        assert client.request({"op": "echo", "value": 0})["echo"] == 0
        assert client._take_id() == 5


_IMPOSTOR_SCRIPT = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(4)
print("READY", flush=True)
s.settimeout(10)
try:
    conn, _ = s.accept()
    conn.recv(100)
except OSError:
    pass
"""


def test_client_verifies_server_uid() -> None:
    """API-2: the CLI only talks to an engine running as its own user (SO_PEERCRED), so
    an impostor listening as another uid never receives a request (or a password)."""
    runuser = shutil.which("runuser")
    require(os.getuid() == 0 and runuser is not None, "needs root and runuser to listen as another uid")
    assert runuser is not None
    python = _interpreter_for_nobody(runuser)
    require(python is not None, "no Python interpreter is executable by `nobody`")
    assert python is not None
    base = Path(tempfile.mkdtemp(prefix="mem-ipc-"))
    try:
        os.chown(base, 65534, 65534)
        path = base / "impostor.sock"
        proc = subprocess.Popen(
            [runuser, "-u", "nobody", "--", python, "-c", _IMPOSTOR_SCRIPT, str(path)],
            cwd="/",
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
            with pytest.raises(MemoriesError) as err:
                IpcClient(path, timeout=2).request({"op": "unlock", "password": "hunter2"})
            assert err.value.code == "permission_denied"
        finally:
            proc.kill()
            proc.wait(5)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ filesystem


def test_socket_dir_0700_and_socket_0600(server: ServerThread, sock_path: Path) -> None:
    """API-2: the socket directory is 0700 and ours; the socket is 0600."""
    dir_st = os.stat(sock_path.parent)
    assert stat.S_IMODE(dir_st.st_mode) == 0o700 and dir_st.st_uid == os.getuid()
    sock_st = os.lstat(sock_path)
    assert stat.S_ISSOCK(sock_st.st_mode) and stat.S_IMODE(sock_st.st_mode) == 0o600


def test_existing_wide_dir_is_tightened_and_socket_removed_on_close(tmp_path: Path) -> None:
    """API-2: an existing directory we own is fixed to 0700; close() removes the socket."""
    d = tmp_path / "wide"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    with running(d / "e.sock"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert (d / "e.sock").exists()
    assert not (d / "e.sock").exists()


def test_close_drops_open_connections(sock_path: Path) -> None:
    """API-2: close() stops the listener, closes live connections and removes the socket."""
    srv = ServerThread(sock_path).start()
    try:
        with raw(sock_path) as idle, IpcClient(sock_path, timeout=5) as client:
            assert client.request({"op": "echo", "value": 1})["echo"] == 1
            assert srv.server is not None
            srv.run(srv.server.close())
            assert_closed(idle)
            assert not sock_path.exists()
            with pytest.raises(MemoriesError) as err:
                IpcClient(sock_path, timeout=2).connect()
            assert err.value.code == "daemon_unavailable"
    finally:
        srv.stop()


def test_dir_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    """API-2: never serve from a directory another user controls."""
    require(os.getuid() == 0, "needs root to chown a directory to another user")
    d = tmp_path / "foreign"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(MemoriesError) as err:
        asyncio.run(IpcServer(d / "e.sock", handler).start())
    assert err.value.code == "permission_denied"


def test_symlinked_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(MemoriesError) as err:
        asyncio.run(IpcServer(link / "e.sock", handler).start())
    assert err.value.code == "permission_denied"


def test_stale_socket_is_replaced_but_live_one_is_not(sock_path: Path) -> None:
    """API-2: a dead engine's socket file is removed; a live engine's is left alone."""
    sock_path.parent.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))
    stale.close()
    with running(sock_path):
        echo_ok(sock_path)
        with pytest.raises(MemoriesError) as err:
            asyncio.run(IpcServer(sock_path, handler).start())
        assert err.value.code == "store_in_use"
        echo_ok(sock_path)  # the live engine's socket survived
    regular = sock_path.parent / "regular"
    regular.write_text("x")
    with pytest.raises(MemoriesError) as err:
        asyncio.run(IpcServer(regular, handler).start())
    assert err.value.code == "io_error"


# ------------------------------------------------------------------ other UID

_OTHER_UID_SCRIPT = r"""
import socket, struct, sys, json
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("CONNECT-FAILED", type(e).__name__); sys.exit(0)
print("CONNECTED", flush=True)
body = json.dumps({"v": 1, "id": 1, "body": {"op": "echo", "value": "x"}}).encode()
try:
    s.sendall(struct.pack(">I", len(body)) + body)
    data = s.recv(65536)
    print("DATA" if data else "CLOSED", len(data))
except socket.timeout:
    print("TIMEOUT")
except OSError as e:
    print("CLOSED", type(e).__name__)
"""


def _interpreter_for_nobody(runuser: str) -> str | None:
    # The venv's interpreter may live under a directory `nobody` cannot enter (/root);
    # the client scripts need only the standard library, so a system Python also works.
    for candidate in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run([runuser, "-u", "nobody", "--", candidate, "-c", "pass"], cwd="/", capture_output=True, timeout=20)
        if probe.returncode == 0:
            return candidate
    return None


def test_other_uid_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """API-2: a client running as another UID is closed without a response. The directory
    is 0711 and the socket 0666 for this test only, so the file modes would let it in: it
    is the SO_PEERCRED UID check that refuses it."""
    runuser = shutil.which("runuser")
    require(os.getuid() == 0 and runuser is not None, "needs root and runuser to run a client as another uid")
    assert runuser is not None
    python = _interpreter_for_nobody(runuser)
    if python is None:
        pytest.fail("no Python interpreter is executable by `nobody`")
    caplog.set_level(logging.WARNING, logger="memories.ipc")
    base = Path(tempfile.mkdtemp(prefix="mem-ipc-"))  # /tmp is traversable; tmp_path is not
    try:
        base.chmod(0o711)
        path = base / "run" / "engine.sock"
        with running(path):
            path.parent.chmod(0o711)
            path.chmod(0o666)
            out = subprocess.run(
                [runuser, "-u", "nobody", "--", python, "-c", _OTHER_UID_SCRIPT, str(path)],
                cwd="/",
                capture_output=True,
                text=True,
                timeout=30,
            )
            lines = out.stdout.split()
            assert "CONNECTED" in lines, out.stdout + out.stderr  # file modes allowed the connect
            assert "DATA" not in lines and "TIMEOUT" not in lines, out.stdout
            assert "CLOSED" in lines, out.stdout
            echo_ok(path)  # our own uid is still served
        assert "refused a connection from uid 65534" in caplog.text
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ property


def test_arbitrary_bytes_never_crash_the_server(sock_path: Path) -> None:
    """API-8 (property): arbitrary bytes on a connection get typed error frames and/or a
    close, never a crash; the server keeps serving afterwards."""
    frames = st.binary(max_size=200).map(lambda b: struct.pack(">I", len(b)) + b)
    near_json = st.sampled_from([b'{"v":1,"id":1,"body":{"op":"echo"}}', b'{"v":1,"id":', b"[]", b"{}", b'{"v":1.5}']).map(
        lambda b: struct.pack(">I", len(b)) + b
    )
    blobs = st.lists(st.binary(max_size=64) | frames | near_json, max_size=5).map(b"".join)

    with running(sock_path, frame_read_timeout=2.0, idle_timeout=5.0):

        @settings(max_examples=150, deadline=None, database=None)
        @given(blobs)
        def check(data: bytes) -> None:
            with raw(sock_path) as s:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                while True:
                    try:
                        resp = recv(s)
                    except (ConnectionError, OSError):
                        break  # closed (cleanly, mid-frame or reset): acceptable
                    assert resp["v"] == 1 and isinstance(resp["ok"], bool)
                    if not resp["ok"]:
                        assert resp["error"]["code"] in CODES

        check()
        echo_ok(sock_path)


def _stop_while_gated(sock_path: Path, key: str, stop: Any) -> socket.socket:
    """A client whose request waits in the handler's gate ``key`` while ``stop(server, gate)``
    runs on the server's loop; the client, to read what it heard."""
    with running(sock_path) as srv:
        client = raw(sock_path, timeout=30)
        send_obj(client, make_request(1, {"op": "gate", "key": key}))
        entered, gate = _GATES.setdefault(key, (threading.Event(), asyncio.Event()))
        assert entered.wait(30), "the request never reached the handler"
        assert srv.server is not None
        srv.run(stop(srv.server, gate), timeout=60)
    return client


def test_a_stop_answers_the_requests_in_flight_before_closing(sock_path: Path) -> None:
    """API-2: ``settle`` lets a request already being served answer before ``close`` cuts the
    connections (the daemon's stop: the `shutdown` request's own answer was lost once when the
    engine closed first); one that takes longer than the bound is cut as before."""

    async def stop_then_open(server: IpcServer, gate: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(server.settle(60))
        await asyncio.sleep(0)  # the stop is waiting before the answer exists
        assert not stopping.done()
        gate.set()
        await stopping
        await server.close()

    with _stop_while_gated(sock_path, "answered", stop_then_open) as client:
        assert recv(client)["result"] == {"opened": True}

    async def stop_with_a_short_bound(server: IpcServer, gate: asyncio.Event) -> None:
        await server.settle(0.2)  # the gate never opens: the bound ends the wait
        await server.close()

    with _stop_while_gated(sock_path, "never", stop_with_a_short_bound) as client:
        assert_closed(client)
