"""Raw bytes on `memories mcp`'s stdin: every request gets an answer (issue 27, item 9).

The real process against a real daemon; lines are written as a client would (including the
broken ones a JavaScript client sends), and each answer is awaited with a bounded wait, so a
request the server leaves unanswered fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.helpers import Cli
from tests.mcp.support import REPO, grant

ANSWER_WAIT = 60.0  # bounded: a missing answer fails here rather than hanging the suite


class RawMcp:
    """`memories mcp` over pipes; answers are read by a thread into a queue."""

    def __init__(self, cli: Cli, token: str, *, stdin: Any = subprocess.PIPE) -> None:
        env = cli.environ()
        env["MEMORIES_MCP_TOKEN"] = token
        self.proc = subprocess.Popen(
            cli.command("mcp"), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=str(REPO)
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> Any:
        try:
            line = self.lines.get(timeout=ANSWER_WAIT)
        except queue.Empty:
            raise AssertionError("no answer from the MCP server") from None
        assert line, "the MCP server closed stdout"
        return json.loads(line)

    def ask(self, raw: bytes) -> Any:
        self.send(raw)
        return self.answer()

    def initialize(self, version: str) -> dict[str, Any]:
        init = {
            "jsonrpc": "2.0",
            "id": "init",
            "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        }
        answer = self.ask(json.dumps(init).encode())
        assert answer["id"] == "init" and answer["result"]["protocolVersion"] == version
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        result: dict[str, Any] = answer["result"]
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _error(answer: Any) -> tuple[Any, int]:
    assert set(answer) == {"jsonrpc", "id", "error"}, answer
    assert answer["jsonrpc"] == "2.0" and isinstance(answer["error"]["message"], str)
    return answer["id"], int(answer["error"]["code"])


BAD_LINES: list[tuple[str, bytes, Any, int]] = [
    # name, raw line, expected id, expected code
    (
        "lone surrogate (half an emoji)",
        b'{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"search","arguments":{"query":"cat \\ud83d"}}}',
        21,
        -32700,
    ),
    ("lone low surrogate in a key", b'{"jsonrpc":"2.0","id":"k","method":"tools/list","params":{"\\ude00":1}}', "k", -32700),
    ("invalid JSON", b'{"jsonrpc":"2.0","id":22,"method":', None, -32700),
    ("not UTF-8", b"\xff\xfe\x00", None, -32700),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000, None, -32700),
    ("params an array", b'{"jsonrpc":"2.0","id":23,"method":"tools/call","params":["search"]}', 23, -32602),
    ("params a string", b'{"jsonrpc":"2.0","id":"s","method":"tools/list","params":"x"}', "s", -32602),
    ("no method", b'{"jsonrpc":"2.0","id":24}', 24, -32600),
    ("method not a string", b'{"jsonrpc":"2.0","id":25,"method":7}', 25, -32600),
    ("wrong jsonrpc", b'{"jsonrpc":"1.0","id":26,"method":"tools/list"}', 26, -32600),
    ("id an object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', None, -32600),
    ("not an object", b"42", None, -32600),
    ("empty batch", b"[]", None, -32600),
    ("batch outside 2025-03-26", b'[{"jsonrpc":"2.0","id":27,"method":"tools/list"}]', None, -32600),
]


def test_every_unparseable_request_is_answered_with_its_jsonrpc_error(vault: Cli) -> None:
    """Issue 27 item 9: each line the SDK would drop gets the JSON-RPC error the spec names and
    the request's id where it can be read; no answer echoes the input; the session goes on."""
    vault.sudo()
    token = grant(vault, "wire", "read_write")
    server = RawMcp(vault, token)
    try:
        server.initialize("2025-06-18")
        for name, raw, expected_id, expected_code in BAD_LINES:
            answer = server.ask(raw)
            assert _error(answer) == (expected_id, expected_code), name
            assert "cat" not in answer["error"]["message"] and "input_value" not in answer["error"]["message"], name
        # A blank line is not a message, and a malformed notification is never answered
        # (JSON-RPC): the next answer is the next request's.
        server.send(b"   ")
        server.send(b'{"jsonrpc":"2.0","method":"notifications/x","params":[1]}')
        listed = server.ask(b'{"jsonrpc":"2.0","id":30,"method":"tools/list"}')
        assert listed["id"] == 30 and {t["name"] for t in listed["result"]["tools"]} >= {"search", "memory_write"}
        # A whole emoji (both halves, escaped or raw) is fine.
        for query in (b'"cat \\ud83d\\ude00"', '"cat 😀"'.encode()):
            head = b'{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"search","arguments":{"query":'
            call = head + query + b"}}}"
            found = server.ask(call)
            assert found["id"] == 31 and found["result"]["isError"] is False
            assert found["result"]["structuredContent"]["query"] == "cat 😀"
    finally:
        server.close()
    assert server.proc.returncode == 0


def test_a_2025_03_26_session_takes_batches_and_answers_them_as_one_array(vault: Cli) -> None:
    """Issue 27: MCP 2025-03-26 requires JSON-RPC batches: the answers come back together, one
    per request (none for a notification), a bad member answered in place, initialize refused."""
    vault.sudo()
    token = grant(vault, "batch", "read_write")
    server = RawMcp(vault, token)
    try:
        server.initialize("2025-03-26")
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "x", "progress": 1}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ["memory_list"]},
            {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {}},
            7,
        ]
        answers = server.ask(json.dumps(batch).encode())
        assert isinstance(answers, list)
        by_id = {a["id"]: a for a in answers if a["id"] is not None}
        assert set(by_id) == {1, 2, 3, 4} and len(answers) == 5
        assert "tools" in by_id[1]["result"] and by_id[2]["result"]["structuredContent"]["total"] == 0
        assert _error(by_id[3]) == (3, -32602) and _error(by_id[4]) == (4, -32600)
        assert [_error(a) for a in answers if a["id"] is None] == [(None, -32600)]
        # A batch of notifications only has nothing to answer; the next request is answered.
        server.send(b'[{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x","progress":2}}]')
        assert server.ask(b'{"jsonrpc":"2.0","id":9,"method":"ping"}')["id"] == 9
    finally:
        server.close()


def test_stdin_from_a_file_is_served_the_same_way(vault: Cli, tmp_path: Path) -> None:
    """A stdin that cannot join the event loop (a file) goes through the threaded streams:
    bad lines are answered there too, and end of file ends the server cleanly."""
    vault.sudo()
    token = grant(vault, "file", "read")
    script = tmp_path / "requests.jsonl"
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "f", "version": "0"}},
    }
    script.write_bytes(
        json.dumps(init).encode()
        + b'\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
        + b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"\\ud83d"}}}\n'
        + b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[]}\n'
        + b"{broken\n"
    )
    with script.open("rb") as stdin:
        server = RawMcp(vault, token, stdin=stdin)
        try:
            answers = [server.answer() for _ in range(4)]
        finally:
            server.close()
    assert answers[0]["id"] == 1
    assert [_error(a) for a in answers[1:]] == [(2, -32700), (3, -32602), (None, -32700)]
    assert server.proc.returncode == 0


def test_a_line_over_the_limit_is_answered_and_the_session_goes_on(vault: Cli) -> None:
    """A message larger than the limit is refused with -32600 (the limit is sized so that every
    call the tool schemas allow fits; see engine.mcp.jsonrpc.MAX_MESSAGE_BYTES)."""
    from engine.mcp.jsonrpc import MAX_MESSAGE_BYTES

    vault.sudo()
    token = grant(vault, "big", "read")
    server = RawMcp(vault, token)
    try:
        server.initialize("2025-06-18")
        oversized = b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"' + b"x" * (MAX_MESSAGE_BYTES + 1) + b'"}}'
        answer = server.ask(oversized)
        assert _error(answer)[1] == -32600
        assert server.ask(b'{"jsonrpc":"2.0","id":6,"method":"ping"}')["id"] == 6
    finally:
        server.close()
    assert server.proc.returncode == 0
