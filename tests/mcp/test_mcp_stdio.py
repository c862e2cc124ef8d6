"""The official MCP client over stdio against a real daemon (AG-1, AG-3)."""

from __future__ import annotations

import asyncio

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.helpers import Cli
from tests.mcp.support import READ_TOOLS, READ_WRITE_TOOLS, TOOLS, error_of, grant, result_of, stdio_client


def test_stdio_tools_round_trip(vault: Cli) -> None:
    """AG-1, AG-3: discover (2026-07-28), tools/list is the exact set, write → search → link → recall."""
    vault.sudo()
    token = grant(vault, "claude", "read_write")

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            listed = await client.list_tools()
            # Only what a read_write grant without transcripts can call (no delete, no recall_turn).
            assert {t.name for t in listed.tools} == READ_WRITE_TOOLS
            for tool in listed.tools:
                assert tool.description and len(tool.description) > 40
                assert tool.input_schema["type"] == "object"
                assert tool.input_schema.get("additionalProperties") is False

            first = result_of(
                await client.call_tool(
                    "memory_write", {"title": "Deploy recipe", "body": "Run make release then tag it", "tags": ["ops"]}
                )
            )
            # Short handles, not 32-hex asset IDs.
            assert 8 <= len(first["id"]) < 32 and len(first["revision"]) == 12
            second = result_of(
                await client.call_tool("memory_write", {"title": "Release tags", "body": "Tags are signed with gpg"})
            )
            third = result_of(await client.call_tool("memory_write", {"title": "GPG key", "body": "The key lives on a token"}))

            found = result_of(await client.call_tool("search", {"query": "release"}))
            assert {hit["id"] for hit in found["results"]} >= {first["id"]}

            result_of(await client.call_tool("link", {"source": first["id"], "target": second["id"], "confidence": 0.9}))
            result_of(
                await client.call_tool(
                    "link", {"source": second["id"], "target": third["id"], "relation": "uses", "confidence": 0.8}
                )
            )
            recalled = result_of(await client.call_tool("recall_connected", {"id": first["id"], "hops": 2}))
            ranked = [r["id"] for r in recalled["results"]]
            assert ranked[:2] == [second["id"], third["id"]]
            assert recalled["results"][0]["activation"] > recalled["results"][1]["activation"]
            one_hop = result_of(await client.call_tool("recall_connected", {"id": first["id"], "hops": 1}))
            assert [r["id"] for r in one_hop["results"]] == [second["id"]]

            read = result_of(await client.call_tool("memory_read", {"id": first["id"]}))
            assert read["body"] == "Run make release then tag it"
            updated = result_of(
                await client.call_tool(
                    "memory_write",
                    {"id": first["id"], "base": read["revision"], "title": "Deploy recipe", "body": "make release"},
                )
            )
            assert updated["conflict"] is False
            history = result_of(await client.call_tool("history", {"id": first["id"]}))
            assert len(history["revisions"]) == 2

    asyncio.run(scenario())


def test_stdio_legacy_handshake_locked_vault_and_typed_errors(vault: Cli) -> None:
    """AG-1, AG-3, API-8: the older initialize handshake is served; a locked vault answers `locked`
    until unlocked; bad input gets a typed tool error that names the field, never the value."""
    vault.sudo()
    token = grant(vault, "older", "read")
    vault.ok("lock")

    async def scenario() -> None:
        async with stdio_client(vault, token, mode="legacy") as client:
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            assert client.server_info is not None and client.server_info.name == "memories"
            assert client.instructions and "not instructions" in client.instructions
            listed = await client.list_tools()
            # Locked: the grant cannot be read yet, so every tool is listed (each answers `locked`).
            assert {t.name for t in listed.tools} == TOOLS

            assert error_of(await client.call_tool("memory_list", {}))["code"] == "locked"
            vault.unlock()
            assert result_of(await client.call_tool("memory_list", {}))["total"] == 0
            # Unlocked: a read grant is shown the read tools only.
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS

            bad = error_of(await client.call_tool("memory_list", {"limit": "SECRET-VALUE-123"}))
            assert bad["code"] == "invalid_request" and "limit" in bad["message"]
            assert "SECRET-VALUE-123" not in bad["message"]
            extra = error_of(await client.call_tool("memory_list", {"limit": 1, "surprise": True}))
            assert extra["code"] == "unknown_field"
            missing = error_of(await client.call_tool("memory_read", {"id": "abcdef0123"}))
            assert missing["code"] == "not_found"
            no_tool = await client.call_tool("no_such_tool", {})
            assert no_tool.is_error

    asyncio.run(scenario())


def test_stdio_survives_an_engine_restart(vault: Cli) -> None:
    """AG-1: after the engine restarts, the running MCP server's next call reconnects (no
    spurious `daemon_unavailable`), and no call is ever sent twice."""
    vault.sudo()
    token = grant(vault, "restart", "read_write")

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            first = result_of(await client.call_tool("memory_write", {"title": "before restart", "body": "b"}))
            vault.stop()
            vault.unlock()  # a new daemon process on the same socket path
            listed = result_of(await client.call_tool("memory_list", {}))
            titles = [item["title"] for item in listed["items"]]
            assert titles.count("before restart") == 1 and first["id"]

    asyncio.run(scenario())


def test_a_grant_revoked_while_its_call_runs_gets_nothing_more(vault: Cli) -> None:
    """AG-2 (issue 27): a grant revoked while its MCP call runs: the call's result is delivered
    only if the engine finished it before the revocation (otherwise `unauthorized`, or, when the
    write was saved just before, `committed_with_errors` naming `unauthorized`), and every
    later call, read or write, is refused; the server keeps answering (no hang)."""
    vault.sudo()
    token = grant(vault, "running", "read_write")

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            # A write the engine takes a while over (a few hundred KB of body to index).
            running = asyncio.create_task(
                client.call_tool("memory_write", {"title": "in flight", "body": "release notes " * 50_000})
            )
            await asyncio.to_thread(vault.ok, "mcp", "revoke", "running")
            outcome = await running
            if outcome.is_error:
                # Refused before it ran, or saved just before the revocation was seen: then the
                # agent is told so (and not to repeat it) without the result.
                error = error_of(outcome)
                assert error["code"] == "unauthorized" or (
                    error["code"] == "committed_with_errors" and "(unauthorized)" in error["message"]
                ), error
            else:
                assert result_of(outcome)["id"]
            for name, arguments in (
                ("memory_list", {}),
                ("search", {"query": "release"}),
                ("memory_write", {"title": "after revoke", "body": "x"}),
            ):
                assert error_of(await client.call_tool(name, arguments))["code"] == "unauthorized", name
        titles = [item["title"] for item in vault.ok("list")["items"]]
        assert "after revoke" not in titles

    asyncio.run(scenario())
