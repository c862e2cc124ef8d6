"""MCP recall_turn / recall_session (AG-5) through the official MCP client, and the transcript grant gate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from tests.helpers import Cli
from tests.mcp.support import error_of, ipc, result_of, stdio_client

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"


@pytest.fixture(scope="module")
def agent_vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str, str]]:
    """Sample sessions imported; one grant with transcripts, one without (same scope)."""
    cli = Cli(home=tmp_path_factory.mktemp("txmcp") / "home")
    cli.init()
    cli.ok("transcript", "import", str(DATA))
    cli.sudo()
    with_tx = cli.ok("mcp", "grant", "--name", "reader-tx", "--scope", "read", "--transcripts")
    without = cli.ok("mcp", "grant", "--name", "reader", "--scope", "read")
    assert with_tx["transcripts"] is True and without["transcripts"] is False
    yield cli, with_tx["token"], without["token"]
    cli.stop()


def _call(cli: Cli, token: str, inner: dict[str, Any]) -> dict[str, Any]:
    client = ipc(cli)
    try:
        result: dict[str, Any] = client.request({"op": "mcp_call", "token": token, "request": inner})["result"]
        return result
    finally:
        client.close()


def _code(cli: Cli, token: str, inner: dict[str, Any]) -> str:
    with pytest.raises(MemoriesError) as exc:
        _call(cli, token, inner)
    return exc.value.code


def test_grant_without_transcripts_sees_none(agent_vault: tuple[Cli, str, str]) -> None:
    """AG-5: an agent whose grant does not include transcripts cannot recall, read or find them."""
    cli, with_tx, without = agent_vault
    session = cli.ok("transcript", "list")["sessions"][0]
    assert _code(cli, without, {"op": "recall_turn", "query": "overlap"}) == "scope_denied"
    assert _code(cli, without, {"op": "recall_session", "session": session["session_uid"]}) == "scope_denied"
    assert _code(cli, with_tx, {"op": "transcript_list"}) == "permission_denied"  # not on the MCP allowlist
    assert _code(cli, without, {"op": "list", "kind": "transcript"}) == "scope_denied"
    hit = cli.ok("search", "overlap")["results"][0]
    assert hit["kind"] == "transcript"  # the owner finds it
    assert _code(cli, without, {"op": "get", "id": hit["id"]}) == "scope_denied"
    assert _call(cli, without, {"op": "search", "query": "overlap"})["results"] == []
    assert _call(cli, without, {"op": "retrieve", "query": "overlap"})["passages"] == []
    found = _call(cli, with_tx, {"op": "search", "query": "overlap"})["results"]
    assert [r["kind"] for r in found] == ["transcript"]


def test_recall_turn_and_session_with_handles_over_mcp(agent_vault: tuple[Cli, str, str]) -> None:
    """AG-5: recall_turn finds a turn with its neighbours; its handles work in the next call; recall_session pages."""
    cli, with_tx, _without = agent_vault

    async def scenario() -> None:
        async with stdio_client(cli, with_tx) as client:
            hit = result_of(await client.call_tool("recall_turn", {"query": "sub-agent review", "before": 1, "after": 1}))
            assert hit["hit"].startswith("[")
            texts = [e["text"] for t in hit["turns"] for e in t["events"]]
            assert any("sub-agent" in t for t in texts)
            assert 1 <= len(hit["turns"]) <= 3 and all(t["thread"] == "main" for t in hit["turns"])
            target = next(t for t in hit["turns"] if t["handle"] == hit["hit"])
            again = result_of(await client.call_tool("recall_turn", {"turn": hit["hit"], "before": 0, "after": 0}))
            assert [t["turn_uid"] for t in again["turns"]] == [target["turn_uid"]]
            session = hit["session"]["handle"]
            page = result_of(await client.call_tool("recall_session", {"session": session, "limit": 2}))
            assert page["total"] == 5 and page["next_offset"] == 2 and [t["seq"] for t in page["turns"]] == [1, 2]
            last = result_of(await client.call_tool("recall_session", {"session": session, "offset": 4, "limit": 2}))
            # Turn numbers count per thread (the main thread's as the user saw them): the fifth turn
            # of the session in time order is the main thread's third.
            assert last["next_offset"] is None and [(t["thread"], t["seq"]) for t in last["turns"]] == [("main", 3)]
            bad = error_of(await client.call_tool("recall_turn", {"turn": "[999]"}))
            assert bad["code"] == "not_found"
            both = error_of(await client.call_tool("recall_turn", {}))
            assert both["code"] == "invalid_request"

    asyncio.run(scenario())


def test_memory_source_points_at_a_turn(agent_vault: tuple[Cli, str, str]) -> None:
    """AG-5: a memory whose `source` is a turn_uid leads recall_turn back to that turn."""
    cli, with_tx, _without = agent_vault
    session = next(s for s in cli.ok("transcript", "list")["sessions"] if s["source_agent"] == "codex")
    turn = cli.ok("transcript", "show", session["session_uid"][:12], "--turn", "2")["turns"][0]
    owner = ipc(cli)
    try:
        memory = owner.request({"op": "put", "title": "Backups go to /srv/backup", "meta": {"source": turn["turn_uid"]}})
    finally:
        owner.close()
    result = _call(cli, with_tx, {"op": "recall_turn", "turn": memory["id"], "before": 0, "after": 0})
    assert [t["turn_uid"] for t in result["turns"]] == [turn["turn_uid"]]
    assert result["turns"][0]["events"][0]["text"] == "把备份目录改成 /srv/backup"
