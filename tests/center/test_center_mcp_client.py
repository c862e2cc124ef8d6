"""CT-1 and saas through the official MCP client (`memories mcp` over stdio), with a real Center:
a ticket-made grant works like any grant until the Center revokes it, then the very next tool
call answers `ticket_revoked`; in saas mode the agent's writes land on the Center."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.center.center_process import running
from tests.center.support_daemon import apply, engine_with
from tests.mcp.support import error_of, result_of, stdio_client

TOKEN_ENV = "MEMORIES_CENTER_TOKEN"


def test_ct1_mcp_agent_with_a_ticket_made_grant(tmp_path: Path) -> None:
    with running(tmp_path / "center") as center:
        cli = engine_with(tmp_path / "engine", center.config("tickets"))
        try:
            token = apply(cli, center.grant("claude", "read_write", "default")["ticket"], "claude")["token"]

            async def scenario() -> None:
                async with stdio_client(cli, token) as client:
                    written = result_of(await client.call_tool("memory_write", {"title": "From the agent", "body": "ok"}))
                    listed = result_of(await client.call_tool("memory_list", {}))
                    assert [i["id"] for i in listed["items"]] == [written["id"]]
                    center.revoke("claude")
                    assert error_of(await client.call_tool("memory_list", {}))["code"] == "ticket_revoked"

            asyncio.run(scenario())
            assert cli.ok("get", cli.ok("list")["items"][0]["id"])["title"] == "From the agent"
        finally:
            cli.stop()


def test_saas_mcp_agent_writes_land_on_the_center(tmp_path: Path) -> None:
    with running(tmp_path / "center") as center:
        daemon_token = center.grant("erin", "read_write", "team")["token"]
        cli = engine_with(tmp_path / "engine", center.config("saas", TOKEN_ENV), env={TOKEN_ENV: daemon_token})
        other = engine_with(tmp_path / "other", center.config("saas", TOKEN_ENV), env={TOKEN_ENV: daemon_token})
        try:
            token = apply(cli, center.grant("erin-agent", "read_write", "team")["ticket"], "erin-agent")["token"]

            async def scenario() -> None:
                async with stdio_client(cli, token) as client:
                    result_of(await client.call_tool("memory_write", {"title": "Hosted by the agent", "body": "on the Center"}))

            asyncio.run(scenario())
            # Another engine of the same team sees it: it is on the Center, not in this device's store.
            assert [i["title"] for i in other.ok("list", "--vault", "team")["items"]] == ["Hosted by the agent"]
        finally:
            other.stop()
            cli.stop()
