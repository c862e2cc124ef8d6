"""`memories mcp --http`: Streamable HTTP on loopback with bearer auth, via the official client (AG-1, AG-2)."""

from __future__ import annotations

import asyncio

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from tests.helpers import Cli
from tests.mcp.support import READ_WRITE_TOOLS, error_of, grant, http_client, http_server, result_of

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": LATEST_HANDSHAKE_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "0"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _leaves(exc: BaseException) -> list[BaseException]:
    """Every exception inside ``exc``: group members and causes, depth first."""
    found: list[BaseException] = []
    stack = [exc]
    while stack:
        current = stack.pop()
        found.append(current)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None and linked not in found and linked not in stack:
                stack.append(linked)
    return found


def test_http_guard_origin_host_and_bearer(vault: Cli) -> None:
    """AG-1: loopback only; foreign Origin → 403; wrong or missing bearer (or the token under
    another scheme such as Basic) → 401 with no detail; the scheme in any case is accepted."""
    vault.sudo()
    token = grant(vault, "http", "read")
    with http_server(vault, token) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with httpx2.Client(timeout=30) as http:

            def post(headers: dict[str, str]) -> httpx2.Response:
                return http.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers})

            for auth in (
                {},
                {"Authorization": "Bearer mem_wrong"},
                {"Authorization": f"Basic {token}"},
                {"Authorization": f"Bearer {token}x"},
                {"Authorization": f"Basic{token}"},
                {"Authorization": f"Bearer{token}"},
                {"Authorization": token},
            ):
                answer = post(auth)
                assert answer.status_code == 401, auth
                assert answer.content == b""
                assert answer.headers.get("www-authenticate") == "Bearer"
            good = {"Authorization": f"Bearer {token}"}
            for origin in (
                "https://evil.example",
                "http://127.0.0.1.evil.example",
                f"http://localhost:{server.port + 1}",
                "null",
            ):
                answer = post({**good, "Origin": origin})
                assert answer.status_code == 403, origin
                assert answer.content == b""
            assert post({**good, "Host": f"evil.example:{server.port}"}).status_code == 421
            assert post({**good, "Origin": f"http://127.0.0.1:{server.port}"}).status_code == 200
            # Authentication schemes are case-insensitive (RFC 9110 §11.1).
            for scheme in ("bearer", "BEARER", "BeArEr"):
                assert post({"Authorization": f"{scheme} {token}"}).status_code == 200, scheme
            ok = post(good)
            assert ok.status_code == 200
            assert ok.json()["result"]["serverInfo"]["name"] == "memories"
            # Only /mcp is served, and the guard answers first even there.
            other = server.url.rsplit("/", 1)[0] + "/other"
            assert http.post(other, json=INITIALIZE, headers=MCP_HEADERS).status_code == 401
            assert http.post(other, json=INITIALIZE, headers={**MCP_HEADERS, **good}).status_code == 404
        # Nothing listens on other interfaces.
        assert server.url.split("//")[1].startswith("127.0.0.1:")


def test_http_round_trip_and_revocation(vault: Cli) -> None:
    """AG-1, AG-2, AG-3: the official client over Streamable HTTP; a revoked grant fails on its next call."""
    vault.sudo()
    token = grant(vault, "http", "read_write")
    with http_server(vault, token) as server:

        async def scenario() -> None:
            async with http_client(server.url, token) as client:
                assert {t.name for t in (await client.list_tools()).tools} == READ_WRITE_TOOLS
                a = result_of(await client.call_tool("memory_write", {"title": "Coffee", "body": "Espresso, no sugar"}))
                b = result_of(await client.call_tool("memory_write", {"title": "Mornings", "body": "Starts at 7"}))
                hits = result_of(await client.call_tool("search", {"query": "espresso"}))
                assert [h["id"] for h in hits["results"]] == [a["id"]]
                result_of(await client.call_tool("link", {"source": a["id"], "target": b["id"], "relation": "habit"}))
                recalled = result_of(await client.call_tool("recall_connected", {"id": a["id"]}))
                assert [r["id"] for r in recalled["results"]] == [b["id"]]
                # The write scope cannot delete.
                assert error_of(await client.call_tool("memory_delete", {"id": a["id"]}))["code"] == "scope_denied"

                vault.ok("mcp", "revoke", "http")
                assert error_of(await client.call_tool("memory_list", {}))["code"] == "unauthorized"

            async with httpx2.AsyncClient(timeout=30) as http:
                after = await http.post(server.url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
                assert after.status_code == 401

        asyncio.run(scenario())

        statuses: list[int] = []

        async def record(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        async def reconnect() -> None:
            # As http_client(), with a hook that sees the HTTP answers (the SDK reports any
            # refusal as the same generic MCPError, so the exception alone proves nothing).
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx2.AsyncClient(headers=headers, timeout=60, event_hooks={"response": [record]}) as http:
                async with Client(streamable_http_client(server.url, http_client=http), mode="legacy"):
                    pass

        try:
            asyncio.run(reconnect())
        except Exception as exc:  # the SDK wraps the refusal in exception groups
            assert any(isinstance(e, MCPError) for e in _leaves(exc)), exc
        else:
            raise AssertionError("a revoked token still connected")
        assert statuses == [401], statuses  # refused for its token, and nothing else was answered
