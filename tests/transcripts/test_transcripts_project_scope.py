"""AG-11: `agent connect --transcripts this-project` (the default with --project): the agent reads
only the sessions whose working directory is inside its project, through every transcript path
(recall_turn by query, handle or turn_uid, recall_session, search, retrieve, memory_read,
memory_conclude). Real CLI, real daemon, the official MCP client over stdio.

The session files are written by hand in each client's current format (Claude Code's
``cwd`` on every line, Codex's ``session_meta.payload.cwd``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.helpers import Cli
from tests.mcp.support import error_of, result_of, stdio_client, text_of


def _claude_session(path: Path, session: str, cwd: Path, words: str) -> None:
    lines = [
        {
            "type": "user",
            "cwd": str(cwd),
            "sessionId": session,
            "uuid": f"{session}-u1",
            "parentUuid": None,
            "isSidechain": False,
            "timestamp": "2026-12-01T09:00:00.000Z",
            "message": {"role": "user", "content": f"Where is the {words} config kept?"},
        },
        {
            "type": "assistant",
            "cwd": str(cwd),
            "sessionId": session,
            "uuid": f"{session}-a1",
            "parentUuid": f"{session}-u1",
            "isSidechain": False,
            "timestamp": "2026-12-01T09:00:05.000Z",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": f"The {words} config is in {words}-reply.toml."}],
            },
        },
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _codex_session(path: Path, session: str, cwd: Path, words: str) -> None:
    lines = [
        {"timestamp": "2026-12-01T10:00:00.000Z", "type": "session_meta", "payload": {"id": session, "cwd": str(cwd)}},
        {
            "timestamp": "2026-12-01T10:00:01.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"Explain the {words} job"}],
            },
        },
        {
            "timestamp": "2026-12-01T10:00:02.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"The {words} job runs nightly ({words}-reply)."}],
            },
        },
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _setup(vault: Cli, tmp_path: Path) -> tuple[Path, Path]:
    user_home = tmp_path / "user"
    user_home.mkdir()
    vault.env.update({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config"), "MEMORIES_AGENT_KEYRING": "0"})
    vault.env.pop("CODEX_HOME", None)
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    (alpha / "sub").mkdir(parents=True)
    beta.mkdir()
    sessions = tmp_path / "sessions"
    _claude_session(sessions / "claude" / "a1.jsonl", "aaaa1111-0000-4000-8000-000000000001", alpha, "alphaword")
    _codex_session(
        sessions / "codex" / "rollout-2026-12-01-a2.jsonl", "aaaa2222-0000-4000-8000-000000000002", alpha / "sub", "subword"
    )
    _claude_session(sessions / "claude" / "b1.jsonl", "bbbb1111-0000-4000-8000-000000000003", beta, "betaword")
    # A sibling folder whose name starts like the project's is not inside it.
    (tmp_path / "alpha2").mkdir()
    _claude_session(sessions / "claude" / "c1.jsonl", "cccc1111-0000-4000-8000-000000000004", tmp_path / "alpha2", "siblingword")
    done = vault.ok("transcript", "import", str(sessions))
    assert done["sessions"] == 4
    return alpha, beta


def _token(vault: Cli, name: str) -> str:
    return (vault.home / "agents" / f"{name}.token").read_text().strip()


def test_ag11_this_project_transcripts_only(vault: Cli, tmp_path: Path) -> None:
    """AG-11: a project's grant (default --transcripts this-project) reads its project's sessions
    (sub-folders included) and no other project's, through every tool that reads transcripts."""
    alpha, _beta = _setup(vault, tmp_path)
    vault.sudo()
    connected = vault.ok("agent", "connect", "codex", "--project", str(alpha))
    assert connected["transcripts_scope"] == "this-project"
    token = _token(vault, connected["name"])
    outside = {s["session_uid"]: s for s in vault.ok("transcript", "list")["sessions"]}
    beta_uid = next(uid for uid, s in outside.items() if "betaword" in json.dumps(s))
    beta_turn = vault.ok("transcript", "show", beta_uid)["turns"][0]
    sibling_uid = next(uid for uid, s in outside.items() if "siblingword" in json.dumps(s))

    async def scenario() -> list[str]:
        answers: list[str] = []
        async with stdio_client(vault, token) as client:
            mine = result_of(await client.call_tool("recall_turn", {"query": "alphaword config"}))
            assert mine["hit"] is not None and "alphaword" in json.dumps(mine, ensure_ascii=False)
            sub = result_of(await client.call_tool("recall_turn", {"query": "subword job"}))
            assert sub["hit"] is not None  # a sub-folder of the project is inside it
            found = result_of(await client.call_tool("search", {"query": "alphaword"}))
            assert [r["kind"] for r in found["results"]] == ["transcript"]
            for word in ("betaword", "siblingword"):
                calls = [
                    ("recall_turn", {"query": f"{word} config"}),
                    ("search", {"query": f"{word} config"}),
                    ("retrieve", {"query": f"{word} config"}),
                ]
                for tool, query in calls:
                    answers.append(text_of(await client.call_tool(tool, query)))
                assert result_of(await client.call_tool("recall_turn", {"query": word}))["hit"] is None
                assert result_of(await client.call_tool("search", {"query": word}))["results"] == []
            probes: tuple[tuple[str, dict[str, Any]], ...] = (
                ("recall_session", {"session": beta_uid}),
                ("recall_session", {"session": sibling_uid[:12]}),
                ("recall_turn", {"turn": beta_turn["turn_uid"]}),
                ("recall_turn", {"turn": beta_turn["turn_uid"][:10]}),
                ("memory_read", {"id": beta_turn["id"]}),
                ("history", {"id": beta_turn["id"]}),
                ("memory_conclude", {"title": "leak", "turns": [beta_turn["turn_uid"]]}),
            )
            for name, args in probes:
                call = await client.call_tool(name, args)
                assert error_of(call)["code"] == "not_found", (name, call.structured_content)
                answers.append(text_of(call))
        return answers

    answers = asyncio.run(scenario())
    for text in answers:  # the other sessions' replies never reach the agent (queries echo only the word)
        assert "betaword-reply" not in text and "siblingword-reply" not in text


def test_ag11_transcripts_all_and_none(vault: Cli, tmp_path: Path) -> None:
    """AG-11: --transcripts all reads every session; none reads none; this-project needs --project."""
    alpha, beta = _setup(vault, tmp_path)
    vault.sudo()
    everything = vault.ok("agent", "connect", "claude-code", "--project", str(beta), "--transcripts", "all")
    nothing = vault.ok("agent", "connect", "opencode", "--project", str(alpha), "--transcripts", "none")
    assert vault.err("agent", "connect", "codex", "--transcripts", "this-project")["code"] == "invalid_input"
    grants = {g["name"]: g for g in vault.ok("mcp", "grants")["grants"]}
    assert grants[everything["name"]]["transcripts_project"] is None and grants[everything["name"]]["transcripts"] is True
    assert grants[nothing["name"]]["transcripts"] is False

    async def scenario() -> dict[str, Any]:
        async with stdio_client(vault, _token(vault, everything["name"])) as client:
            hits = {w: result_of(await client.call_tool("recall_turn", {"query": w}))["hit"] for w in ("alphaword", "betaword")}
        async with stdio_client(vault, _token(vault, nothing["name"])) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            refused = error_of(await client.call_tool("recall_turn", {"query": "alphaword"}))["code"]
        return {"hits": hits, "names": names, "refused": refused}

    seen = asyncio.run(scenario())
    assert all(h is not None for h in seen["hits"].values())
    assert "recall_turn" not in seen["names"] and seen["refused"] == "scope_denied"


def test_ag11_assign_gives_a_session_without_a_directory_to_a_project(vault: Cli, tmp_path: Path) -> None:
    """AG-11: a session imported without a working directory (stores from before directories were
    recorded) is outside every project; `transcript assign SESSION --project DIR` records DIR on its
    turns and the project's grant then reads it; a directory the client recorded is never replaced."""
    alpha, _beta = _setup(vault, tmp_path)
    old = tmp_path / "sessions" / "claude" / "old.jsonl"
    _claude_session(old, "dddd1111-0000-4000-8000-000000000005", alpha, "oldword")
    lines = [json.loads(line) for line in old.read_text().splitlines()]
    old.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "cwd"}) + "\n" for line in lines))
    vault.ok("transcript", "import", str(old))
    vault.sudo()
    connected = vault.ok("agent", "connect", "claude-code", "--project", str(alpha))
    token = _token(vault, connected["name"])
    listed = {s["session_uid"]: s for s in vault.ok("transcript", "list")["sessions"]}
    old_uid = next(uid for uid, s in listed.items() if "oldword" in json.dumps(s))
    beta_uid = next(uid for uid, s in listed.items() if "betaword" in json.dumps(s))

    async def seen(word: str) -> bool:
        """Whether the agent reads the session's reply (recall_turn by query)."""
        async with stdio_client(vault, token) as client:
            found = result_of(await client.call_tool("recall_turn", {"query": f"{word} config"}))
        return f"{word}-reply" in json.dumps(found)

    assert not asyncio.run(seen("oldword"))  # no directory: outside the project

    refused = vault.err("transcript", "assign", beta_uid[:12], "--project", str(alpha))
    assert refused["code"] == "invalid_input" and "recorded" in refused["message"]
    assert not asyncio.run(seen("betaword"))  # still beta's

    done = vault.ok("transcript", "assign", old_uid[:12], "--project", str(alpha / ".." / alpha.name))
    assert done == {"session_uid": old_uid, "project": str(alpha.resolve()), "turns_written": 1}
    assert asyncio.run(seen("oldword"))
    again = vault.ok("transcript", "assign", old_uid[:12], "--project", str(alpha))
    assert again["turns_written"] == 0
    turn = vault.ok("transcript", "show", old_uid)["turns"][0]
    assert len(vault.ok("history", turn["id"])["revisions"]) == 2  # a new revision, the first one kept
