"""The MCP server's own plumbing: the asyncio stdio transport and the daemon bridge (AG-1).

No daemon here: stdio servers run ``run_stdio`` with a bridge whose engine is a function,
and the bridge talks to a small framing server in the test process.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.ipc.framing import encode_frame, make_ok, read_frame
from engine.mcp.bridge import DaemonBridge
from tests.mcp.support import REPO

# A `memories mcp` stdio server whose engine answers every call with its own request, after
# writing to fd 1 and to sys.stdout (as a careless library or child process might).
SERVER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from engine.mcp.bridge import DaemonBridge
    from engine.mcp.server import configure_logging, run_stdio

    class Echo(DaemonBridge):
        async def call(self, inner):
            os.write(1, b"stray bytes on fd 1\\n")
            print("stray print", flush=True)
            return {"echo": inner, "short_id": "abcd1234", "id": "abcd1234" * 4}

    configure_logging()
    run_stdio(Echo(Path("/nonexistent"), "mem_test"))
    """
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
CALL = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_list", "arguments": {"limit": 3}}}


def _exchange(
    send: Callable[[bytes], object], recv: Callable[[], bytes], lines: list[dict[str, Any]], answers: int
) -> list[dict[str, Any]]:
    for line in lines:
        send((json.dumps(line) + "\n").encode())
    received: list[dict[str, Any]] = []
    buffer = b""
    while len(received) < answers:
        chunk = recv()
        assert chunk, f"server closed the stream after {received}"
        buffer += chunk
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            received.append(json.loads(raw))  # every line is JSON-RPC: stray output never reaches the wire
    return received


def _check(answers: list[dict[str, Any]]) -> None:
    assert answers[0]["id"] == 1 and answers[0]["result"]["serverInfo"]["name"] == "memories"
    result = answers[1]["result"]
    assert result["structuredContent"] == {"echo": {"op": "list", "limit": 3, "offset": 0}, "id": "abcd1234"}
    # The text copy is the same JSON (compact, keys sorted).
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def test_stdio_over_pipes_keeps_stray_output_off_the_wire() -> None:
    """AG-1: the asyncio transport serves pipes; writes to fd 1 / sys.stdout while serving go to stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        stdin, stdout = proc.stdin, proc.stdout

        def send(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        _check(_exchange(send, lambda: os.read(stdout.fileno(), 65536), [INITIALIZE, INITIALIZED, CALL], 2))
        stdin.close()  # EOF ends the server cleanly
        assert proc.wait(timeout=30) == 0
        assert b"stray bytes on fd 1" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stdio_over_socketpairs_like_node_clients() -> None:
    """AG-1: clients built on libuv (Node) give the server socketpairs, not pipes, for stdin/stdout."""
    ours_in, theirs_in = socket.socketpair()
    ours_out, theirs_out = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=theirs_in.fileno(),
        stdout=theirs_out.fileno(),
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    theirs_in.close()
    theirs_out.close()
    try:
        ours_out.settimeout(30)
        _check(_exchange(ours_in.sendall, lambda: ours_out.recv(65536), [INITIALIZE, INITIALIZED, CALL], 2))
        ours_in.shutdown(socket.SHUT_WR)
        assert proc.wait(timeout=30) == 0
    finally:
        ours_in.close()
        ours_out.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class FakeDaemon:
    """A framing server on a Unix socket: answers `{"n": k}` with `{"n": k}` after `delay` seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections = 0
        self.delay = 0.0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while (frame := await read_frame(reader, 1 << 20)) is not None:
            await asyncio.sleep(self.delay)
            writer.write(encode_frame(make_ok(frame["id"], {"n": frame["body"]["n"]})))
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


def test_bridge_reuses_connections_and_drops_one_left_mid_answer(tmp_path: Path) -> None:
    """AG-1: a call cancelled while the daemon works never leaves its late answer for the next call."""

    async def scenario() -> None:
        daemon = FakeDaemon(tmp_path / "engine.sock")
        await daemon.start()
        bridge = DaemonBridge(daemon.path, "mem_test", timeout=10)
        try:
            assert await bridge.request({"n": 1}) == {"n": 1}
            assert await bridge.request({"n": 2}) == {"n": 2}
            assert daemon.connections == 1  # pooled, not one connection per call

            daemon.delay = 0.3
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await bridge.request({"n": 3})
            daemon.delay = 0.0
            assert await bridge.request({"n": 4}) == {"n": 4}  # not the late {"n": 3}
            assert daemon.connections == 2
        finally:
            await bridge.aclose()
            await daemon.stop()

    asyncio.run(scenario())


def test_bridge_without_a_daemon_is_daemon_unavailable(tmp_path: Path) -> None:
    async def scenario() -> None:
        bridge = DaemonBridge(tmp_path / "missing.sock", "mem_test")
        with pytest.raises(MemoriesError) as caught:
            await bridge.call({"op": "list"})
        assert caught.value.code == "daemon_unavailable"
        await bridge.aclose()

    asyncio.run(scenario())


def test_native_transport_is_chosen_for_pipes_and_sockets_only(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        """
        import asyncio, sys
        from engine.mcp.stdio import stdio_streams

        async def main():
            async with stdio_streams() as streams:
                sys.stderr.write("native" if streams is not None else "sdk")

        asyncio.run(main())
        """
    )

    def chosen(stdin: int, stdout: int) -> bytes:
        command = [sys.executable, "-c", probe]
        done = subprocess.run(command, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=_env(), timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert chosen(subprocess.PIPE, subprocess.PIPE) == b"native"
    left, right = socket.socketpair()
    with left, right:
        assert chosen(left.fileno(), right.fileno()) == b"native"
        # One socket as both stdin and stdout: the write transport would take incoming data for a hang-up.
        assert chosen(left.fileno(), left.fileno()) == b"sdk"
    file = tmp_path / "in"
    file.write_bytes(b"")
    with file.open("rb") as stdin:
        assert chosen(stdin.fileno(), subprocess.PIPE) == b"sdk"
