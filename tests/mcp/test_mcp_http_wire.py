"""`memories mcp --http` with raw HTTP requests: JSON-RPC errors that never quote the input, a
size limit the tool schemas agree with, 2025-03-26 batches, and a tool list the grant can use
(issue 27, MCP over HTTP)."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx2

from engine.mcp.jsonrpc import MAX_MESSAGE_BYTES
from tests.helpers import Cli
from tests.mcp.support import READ_TOOLS, TOOLS, grant, http_client, http_server, result_of

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
SECRET = "SECRET-VALUE-7f3a"


def _initialize(version: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }


class Session:
    """One Streamable HTTP session opened with raw requests."""

    def __init__(self, http: httpx2.Client, url: str, token: str, version: str) -> None:
        self.http = http
        self.url = url
        self.headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        opened = self.post(_initialize(version))
        assert opened.status_code == 200 and opened.json()["result"]["protocolVersion"] == version
        self.headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        if version != "2025-03-26":  # clients of 2025-03-26 predate the version header
            self.headers["MCP-Protocol-Version"] = version
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202

    def post(self, body: Any, **headers: str) -> httpx2.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(self.url, content=content, headers={**self.headers, **headers})


def _error(answer: httpx2.Response) -> tuple[int, Any, int, str]:
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert set(body) == {"jsonrpc", "id", "error"}, body
    return answer.status_code, body["id"], body["error"]["code"], body["error"]["message"]


def test_http_errors_are_jsonrpc_and_never_quote_the_input(vault: Cli) -> None:
    """Issue 27, docs/security-mcp.md: a malformed request gets the JSON-RPC error the spec
    names, with its id, and the message does not echo the value (no `input_value=`)."""
    vault.sudo()
    token = grant(vault, "errors", "read_write")
    with http_server(vault, token) as server, httpx2.Client(timeout=60) as http:
        session = Session(http, server.url, token, "2025-06-18")
        cases: list[tuple[Any, int, Any, int]] = [
            ({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": [SECRET]}, 400, 2, -32602),
            ({"jsonrpc": "2.0", "id": 3, "method": 7, "params": {"x": SECRET}}, 400, 3, -32600),
            ({"jsonrpc": "2.0", "id": {"k": SECRET}, "method": "tools/list"}, 400, None, -32600),
            ({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": SECRET + "\ud83d"}}, 400, 4, -32700),
            (b'{"jsonrpc":"2.0","id":5,"method":"' + SECRET.encode(), 400, None, -32700),
            (b"", 400, None, -32700),
        ]
        for body, status, expected_id, code in cases:
            answer = session.post(body)
            got_status, got_id, got_code, _message = _error(answer)
            assert (got_status, got_id, got_code) == (status, expected_id, code), body
            assert SECRET not in answer.text and "input_value" not in answer.text, body
        # Wrong argument types reach the tool, whose typed error names the field only.
        wrong = session.post(
            {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "memory_list", "arguments": {"limit": SECRET}}}
        )
        assert wrong.json()["result"]["isError"] is True and SECRET not in wrong.text
        # A tool name that is not a string: the SDK's own -32602, no value either.
        typed = session.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": 5, "arguments": SECRET}})
        assert typed.json()["error"]["code"] == -32602 and SECRET not in typed.text


def test_http_size_limit_agrees_with_the_schemas_and_answers_jsonrpc(vault: Cli) -> None:
    """Issue 27: a 5 MiB memory_write body (the schema allows 8 Mi characters) reaches the tool;
    a body over the limit is refused with 413 and a JSON-RPC error, before it is read."""
    vault.sudo()
    token = grant(vault, "size", "read_write")
    with http_server(vault, token) as server, httpx2.Client(timeout=120) as http:
        session = Session(http, server.url, token, "2025-06-18")
        # An update without `base`: the tool refuses it without the engine doing the write, which
        # shows the 5 MiB call got through the transport to the tool.
        arguments = {"title": "big", "body": "x" * (5 * 1024 * 1024), "id": "abcd1234"}
        big = session.post(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_write", "arguments": arguments}}
        )
        assert big.status_code == 200
        assert big.json()["result"]["structuredContent"]["error"]["code"] == "invalid_request"

        # Over the limit: answered from the declared length, the body never sent.
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as raw:
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Mcp-Session-Id: {session.headers['Mcp-Session-Id']}\r\nContent-Length: {MAX_MESSAGE_BYTES + 1}\r\n\r\n"
            )
            raw.sendall(head.encode())
            received = b""
            while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
                chunk = raw.recv(65536)
                if not chunk:
                    break
                received += chunk
        status_line, _, rest = received.partition(b"\r\n")
        assert status_line.startswith(b"HTTP/1.1 413")
        headers, _, body = rest.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in headers.lower()
        error = json.loads(body)
        assert error["id"] is None and error["error"]["code"] == -32600


def test_http_batches_on_a_2025_03_26_session(vault: Cli) -> None:
    """Issue 27: MCP 2025-03-26 requires batches: one array answer, one member per request;
    a later version's session is answered -32600."""
    vault.sudo()
    token = grant(vault, "batch", "read_write")
    with http_server(vault, token) as server, httpx2.Client(timeout=60) as http:
        old = Session(http, server.url, token, "2025-03-26")
        batch = [
            {"jsonrpc": "2.0", "id": 10, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "memory_list", "arguments": {}}},
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}},
            {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": [SECRET]},
            {"jsonrpc": "2.0", "id": 13, "method": "initialize", "params": {}},
        ]
        answer = old.post(batch)
        assert answer.status_code == 200 and SECRET not in answer.text
        members = {m["id"]: m for m in answer.json()}
        assert set(members) == {10, 11, 12, 13}
        assert "tools" in members[10]["result"] and members[11]["result"]["structuredContent"]["total"] == 0
        assert members[12]["error"]["code"] == -32602 and members[13]["error"]["code"] == -32600
        notifications_only = old.post(
            [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 2}}]
        )
        assert notifications_only.status_code == 202
        # The version header, when a client sends it, decides.
        assert _error(old.post(batch, **{"MCP-Protocol-Version": "2025-06-18"}))[:3] == (400, None, -32600)

        newer = Session(http, server.url, token, "2025-06-18")
        assert _error(newer.post(batch))[:3] == (400, None, -32600)
        assert _error(newer.post([]))[:3] == (400, None, -32600)


def test_http_lists_only_the_tools_the_grant_can_call(vault: Cli) -> None:
    """Issue 27: a read grant sees the read tools; recall_turn/recall_session only with
    transcripts; allow_all with transcripts sees every tool (official MCP client)."""
    vault.sudo()
    reader = grant(vault, "reader", "read")
    everything = vault.ok("mcp", "grant", "--name", "all", "--scope", "allow_all", "--transcripts")["token"]
    for token, expected in ((reader, READ_TOOLS), (everything, TOOLS)):
        with http_server(vault, token) as server:

            async def listed(url: str = server.url, token: str = token) -> set[str]:
                async with http_client(url, token) as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                    if "memory_list" in names:
                        result_of(await client.call_tool("memory_list", {}))
                    return names

            assert asyncio.run(listed()) == expected
