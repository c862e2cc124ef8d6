"""CL-2 through MCP: an agent with an allow-all grant gets no cloud tool and no S3 key from
any tool it has (the real `memories mcp` process over stdio, the official MCP client)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.cloud.support import ACCESS, SECRET, S3Server, add_account
from tests.helpers import Cli
from tests.mcp.support import TOOLS, TRANSCRIPT_TOOLS, grant, stdio_client, text_of


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


def test_no_cloud_tool_and_no_key_through_mcp(s3: S3Server, vault: Cli) -> None:
    """CL-2: MCP never includes tokens: no tool manages or shows cloud accounts, and no tool's
    result carries the S3 keys."""
    add_account(vault, s3.endpoint, s3.bucket("mcp-canary"))
    vault.put("Cloud notes", "the team bucket is synced")
    vault.ok("cloud", "sync")
    token = grant(vault, "sweep", "allow_all")
    transcripts: list[str] = []

    async def sweep() -> None:
        async with stdio_client(vault, token) as client:
            listed = await client.list_tools()
            names = {t.name for t in listed.tools}
            assert names == TOOLS - TRANSCRIPT_TOOLS and not any("cloud" in n for n in names)
            for query in ("cloud", "bucket", "team", "secret"):
                transcripts.append(text_of(await client.call_tool("search", {"query": query})))
            transcripts.append(text_of(await client.call_tool("memory_list", {"limit": 50})))

    asyncio.run(sweep())
    assert any("Cloud notes" in t for t in transcripts)  # the sweep saw real results
    for text in transcripts:
        assert SECRET not in text and ACCESS not in text
