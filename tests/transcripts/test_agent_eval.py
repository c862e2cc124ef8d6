"""AG-8/AG-9: turn-level recall over the shipped sample sessions meets its floor on CLI search and MCP recall_turn.

The eval is deterministic (no model, no clock), so this asserts quality, not time: recall@5
at least 0.9 overall on both surfaces and at least 0.75 for every kind of question.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import Cli
from tests.mcp.support import ipc
from tests.transcripts import agent_eval


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, str, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("eval")
    shutil.copytree(agent_eval.DATA, root / "data")
    cli = Cli(home=root / "home")
    cli.init()
    imported = cli.ok("transcript", "import", str(root / "data"))
    cli.sudo()
    token = cli.ok("mcp", "grant", "--name", "eval", "--scope", "read", "--transcripts")["token"]
    yield cli, token, imported
    cli.stop()


def test_import_reports_turns_as_the_user_saw_them(sessions: tuple[Cli, str, dict[str, Any]]) -> None:
    """AG-8: client-written lines (caveats, slash commands, interruptions, compaction summaries,
    Codex's environment context) are events of a turn, not turns; --json reports the real count."""
    cli, _token, imported = sessions
    by_key = {s["session_key"]: s for s in cli.ok("transcript", "list")["sessions"]}
    assert by_key["5b1e6a3c-2f40-4c8e-9d7a-61f0c2b4e8a1"]["main_turns"] == 12
    assert by_key["0199b7e2-41aa-7c3d-9e0f-5a6b7c8d9e10"]["main_turns"] == 6
    assert by_key["8c2d4e6f-1a3b-4c5d-8e9f-0a1b2c3d4e5f"]["main_turns"] == 500
    assert imported["turns"] == 12 + 6 + 500 and imported["sessions"] == 3
    shop = by_key["5b1e6a3c-2f40-4c8e-9d7a-61f0c2b4e8a1"]["session_uid"]
    third = cli.ok("transcript", "show", shop[:12], "--turn", "3")["turns"][0]
    texts = [e["text"] for e in third["events"]]
    assert texts[0].startswith("Why does the checkout test fail")
    second = cli.ok("transcript", "show", shop[:12], "--turn", "2")["turns"][0]
    assert any(t.startswith("Caveat:") for t in (e["text"] for e in second["events"]))
    assert any("<command-name>/model" in e["text"] for e in second["events"])


def test_search_results_name_session_turn_time_and_handle(sessions: tuple[Cli, str, dict[str, Any]]) -> None:
    """AG-8: a hit names the session, the turn as the user saw it, its time and a handle that
    recall_turn accepts; the snippet shows the sentence that matched, not every letter s."""
    cli, _token, _imported = sessions
    client = ipc(cli)
    try:
        hit = client.request({"op": "search", "query": "what's the product catalogue cache ttl", "kind": "transcript"})[
            "results"
        ][0]
        turn = hit["turn"]
        assert turn["seq"] == 11 and turn["thread"] == "main" and turn["ts"].startswith("2026-12-01")
        assert turn["session_title"].startswith("Claude Code session: Set up the staging")
        assert "**catalogue**" in hit["snippet"] and "**s**" not in hit["snippet"]
        again = client.request({"op": "recall_turn", "turn": turn["handle"], "before": 0, "after": 0})
        assert [t["turn_uid"] for t in again["turns"]] == [turn["turn_uid"]]
    finally:
        client.close()


def test_tool_output_is_searchable_but_below_replies(sessions: tuple[Cli, str, dict[str, Any]]) -> None:
    """AG-8: words only a tool printed still find their turn; a reply with the same words ranks above."""
    cli, _token, _imported = sessions
    client = ipc(cli)
    try:
        only_tool = client.request({"op": "search", "query": "alembic 4b1c refund_reason", "kind": "transcript"})["results"]
        assert only_tool and only_tool[0]["turn"]["seq"] == 6
        refund = client.request({"op": "search", "query": "refund provider", "kind": "transcript"})["results"]
        assert refund[0]["turn"]["seq"] == 10  # the reply, not the test run whose output lists test_refund_*
    finally:
        client.close()


def test_recall_floor_on_search_and_recall_turn(sessions: tuple[Cli, str, dict[str, Any]]) -> None:
    """AG-8, AG-9: recall@5 >= 0.9 overall on CLI search and MCP recall_turn, every kind >= 0.75."""
    cli, token, _imported = sessions
    owner = ipc(cli)
    try:

        def agent(inner: dict[str, Any]) -> dict[str, Any]:
            result: dict[str, Any] = owner.request({"op": "mcp_call", "token": token, "request": inner})["result"]
            return result

        scores = agent_eval.run(owner.request, agent)
    finally:
        owner.close()
    text = agent_eval.report(scores)
    for surface in ("search", "recall_turn"):
        assert scores[surface]["all"].recall >= 0.9, text
        for kind in agent_eval.KINDS:
            assert scores[surface][kind].recall >= 0.75, (kind, scores[surface][kind].misses, text)
