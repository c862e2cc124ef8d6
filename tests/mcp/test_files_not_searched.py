"""A file's text never reaches an agent (issue 27, AG-2): not through search or retrieve of a read
grant, whether or not the owner made the file searchable for their own searches."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers import Cli
from tests.mcp.support import grant, result_of, stdio_client, text_of

CANARY = "zqfilecanary5521"


def test_file_text_reaches_no_agent_search_or_retrieve(vault: Cli, tmp_path: Path) -> None:
    """Issue 27: with a file's text indexed for the owner (--searchable) and without, a read grant's
    search and retrieve over MCP (the official client, stdio) return neither the file nor its text."""
    plain = tmp_path / "plain.env"
    plain.write_text(f"API_TOKEN={CANARY}\n")
    shown = tmp_path / "shown.env"
    shown.write_text(f"OTHER_TOKEN={CANARY}\n")
    hidden_id = vault.ok("file", "add", str(plain))["id"]
    searchable_id = vault.ok("file", "add", str(shown), "--searchable")["id"]
    note = vault.put("reference note", f"mentions {CANARY} in a note on purpose")
    owner_hits = {hit["id"] for hit in vault.ok("search", CANARY)["results"]}
    assert owner_hits == {searchable_id, note["id"]}  # the owner: only the searchable file, and the note
    vault.sudo()
    token = grant(vault, "reader", "read")
    transcripts: list[str] = []

    async def scenario() -> None:
        async with stdio_client(vault, token) as client:
            for tool in ("search", "retrieve"):
                for query in (CANARY, "API_TOKEN", "OTHER_TOKEN", "plain.env", "shown.env"):
                    call = await client.call_tool(tool, {"query": query})
                    result_of(call)  # an answer, not an error
                    transcripts.append(text_of(call))

    asyncio.run(scenario())
    everything = "\n".join(transcripts)
    assert note["id"][:8] in everything  # the agent does search: it finds the note (short IDs over MCP)
    for file_id in (hidden_id, searchable_id):
        assert file_id[:8] not in everything
    assert "API_TOKEN=" not in everything and "OTHER_TOKEN=" not in everything
