"""AG-9: the extraction cycle and agent conclusions, against a loopback server speaking the
OpenAI chat-completions wire format (tests/search/fake_openai.py), recorded replies, and MCP."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from tests.helpers import Cli
from tests.mcp.support import ipc, result_of, stdio_client
from tests.search.fake_openai import FakeOpenAI, ServerThread
from tests.transcripts import agent_eval

SHOP = "5b1e6a3c-2f40-4c8e-9d7a-61f0c2b4e8a1"


def _reply(*conclusions: dict[str, Any]) -> str:
    return "```json\n" + json.dumps({"conclusions": list(conclusions)}) + "\n```"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    thread = ServerThread(server)
    thread.start()
    yield server
    thread.stop()


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[Cli, Path]]:
    """A vault with the first half of the shop session imported (its file grows later)."""
    source = next(agent_eval.DATA.rglob(f"{SHOP}.jsonl"))
    lines = source.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "Run the migrations on staging" in line)
    live = tmp_path / "sessions" / source.name
    live.parent.mkdir()
    live.write_text("".join(lines[:cut]))
    cli = Cli(home=tmp_path / "home")
    cli.init()
    cli.ok("transcript", "import", str(live))
    yield cli, live
    shutil.copyfile(source, live)  # (the test may have grown it already)
    cli.stop()


def _seat(cli: Cli, port: int, *, after_import: bool = True) -> None:
    (cli.home / "config.toml").write_text(
        f'[rag.extraction]\nkind = "openai"\nurl = "http://127.0.0.1:{port}/v1/chat/completions"\nmodel = "local-llama"\n'
        + ("" if after_import else "after_import = false\n")
    )


def _memory(cli: Cli, title: str) -> dict[str, Any]:
    found = [i for i in cli.ok("list", "--limit", "100")["items"] if i["title"] == title]
    assert len(found) == 1, title
    return cli.ok("get", found[0]["id"])


def test_cycle_without_a_seat_names_both_options(shop: tuple[Cli, Path]) -> None:
    """AG-9: no model seat and no recorded replies: an error naming both, nothing written."""
    cli, _live = shop
    error = cli.err("memory", "cycle", "once")
    assert error["code"] == "provider_not_configured"
    assert "[rag.extraction]" in error["message"] and "--replies" in error["message"]
    assert cli.ok("list")["items"] == []


def test_cycle_distils_points_at_turns_and_supersedes(shop: tuple[Cli, Path], fake: FakeOpenAI) -> None:
    """AG-9: conclusions from the seat point at their turn_uids; a later cycle's update with the same
    key marks the old one superseded (valid_till), never deletes it; search ranks the new one first;
    a seat failure writes nothing and leaves the watermark, so the next run reads the same turns."""
    cli, live = shop
    _seat(cli, fake.port, after_import=False)  # each run here is `memory cycle once`, none after an import
    fake.answers.append(
        _reply(
            {
                "kind": "fact",
                "key": "staging-db-port",
                "title": "Staging Postgres listens on port 5432",
                "body": "The staging database is Postgres 16 on port 5432.",
                "turns": ["t2"],
            },
            {"kind": "decision", "title": "Checkout retries inventory locks with backoff", "turns": ["t3"]},
        )
    )
    first = cli.ok("memory", "cycle", "once")
    assert first["turns_read"] == 5 and first["written"] == 2 and first["pending_turns"] == 0
    (path, body, _headers) = fake.requests[-1]
    assert path == "/v1/chat/completions" and body["model"] == "local-llama"
    assert "[t2]" in body["messages"][1]["content"] and "turn 2" in body["messages"][1]["content"]
    old = _memory(cli, "Staging Postgres listens on port 5432")
    owner = ipc(cli)
    try:
        turn = owner.request({"op": "recall_turn", "turn": old["id"], "before": 0, "after": 0})["turns"][0]
    finally:
        owner.close()
    assert turn["seq"] == 2 and turn["events"][0]["text"].startswith("What port is the staging Postgres")
    assert old["meta"]["source"] == f"turn:{turn['turn_uid']}" and "conclusion" in old["tags"]
    assert cli.ok("memory", "cycle", "once")["turns_read"] == 0  # nothing new past the watermark

    shutil.copyfile(next(agent_eval.DATA.rglob(f"{SHOP}.jsonl")), live)
    cli.ok("transcript", "import", str(live))
    fake.fail_statuses.extend([500] * 4)
    assert cli.err("memory", "cycle", "once")["code"] == "provider_error"
    fake.answers.append("not json at all")
    assert cli.err("memory", "cycle", "once")["code"] == "provider_error"
    assert len(cli.ok("list", "--limit", "100")["items"]) == 2  # neither failure wrote anything
    fake.answers.append(
        _reply(
            {
                "kind": "fact",
                "key": "staging-db-port",
                "title": "Staging Postgres moved to port 5433",
                "body": "After the 5d9e migration the staging database listens on 5433.",
                "turns": ["t2"],
            }
        )
    )
    second = cli.ok("memory", "cycle", "once")
    assert second["superseded"] == 1 and second["turns_read"] >= 7
    new = _memory(cli, "Staging Postgres moved to port 5433")
    again = cli.ok("get", old["id"])  # kept, and says what replaced it
    assert again["meta"]["superseded_by"] == new["id"] and again["meta"]["valid_till"]
    hits = cli.ok("search", "staging postgres port", "--kind", "memory")["results"]
    assert [h["id"] for h in hits[:2]] == [new["id"], old["id"]]
    assert hits[1]["superseded_by"] == new["id"]


def test_recorded_replies_replay(shop: tuple[Cli, Path], tmp_path: Path) -> None:
    """AG-9: --replies FILE replays recorded seat replies; when they run out the rest waits."""
    cli, _live = shop
    replies = tmp_path / "replies.jsonl"
    conclusion = {"kind": "preference", "title": "Logs at DEBUG while chasing payment callbacks", "turns": ["t1"]}
    replies.write_text(json.dumps({"conclusions": [conclusion]}) + "\n")
    done = cli.ok("memory", "cycle", "once", "--replies", str(replies), "--limit", "4")
    assert done["written"] == 1 and done["stopped"] == "replies_exhausted" and done["pending_turns"] == 1
    replies.write_text("{oops\n")
    assert cli.err("memory", "cycle", "once", "--replies", str(replies))["code"] == "invalid_input"


def test_agent_records_a_conclusion_citing_handles(shop: tuple[Cli, Path]) -> None:
    """AG-9: the connected agent records a conclusion with memory_conclude, citing a turn handle
    it got from recall_turn; a grant without transcripts cannot cite turns."""
    cli, _live = shop
    cli.sudo()
    token = cli.ok("mcp", "grant", "--name", "writer", "--scope", "read_write", "--transcripts")["token"]
    plain = cli.ok("mcp", "grant", "--name", "plain", "--scope", "read_write")["token"]

    async def scenario() -> dict[str, Any]:
        async with stdio_client(cli, token) as client:
            hit = result_of(await client.call_tool("recall_turn", {"query": "checkout test fail intermittently"}))
            done = result_of(
                await client.call_tool(
                    "memory_conclude",
                    {
                        "title": "Checkout flakiness was an inventory lock race",
                        "body": "Fixed with a retry and exponential backoff in reserve_items().",
                        "kind": "decision",
                        "turns": [hit["hit"]],
                        "key": "checkout-flaky",
                    },
                )
            )
            return {"hit": hit, "done": done}

    out = asyncio.run(scenario())
    target = next(t for t in out["hit"]["turns"] if t["handle"] == out["hit"]["hit"])
    assert out["done"]["turns"][0]["turn_uid"] == target["turn_uid"]
    memory = _memory(cli, "Checkout flakiness was an inventory lock race")
    assert memory["meta"]["source"] == f"turn:{target['turn_uid']}" and memory["meta"]["conclusion_key"] == "checkout-flaky"
    owner = ipc(cli)
    try:
        with pytest.raises(MemoriesError) as exc:
            owner.request(
                {
                    "op": "mcp_call",
                    "token": plain,
                    "request": {"op": "conclusion_write", "title": "x", "turns": [target["turn_uid"]]},
                }
            )
        assert exc.value.code == "scope_denied"
    finally:
        owner.close()


def test_watch_runs_the_cycle_after_imports(shop: tuple[Cli, Path], fake: FakeOpenAI) -> None:
    """AG-9: the turns `transcript watch` imports are distilled, without the user running anything."""
    import subprocess
    import time

    cli, live = shop
    _seat(cli, fake.port)
    fake.answers.append(_reply({"kind": "entity", "title": "The shop backend runs on docker compose", "turns": ["t1"]}))
    proc = subprocess.Popen(
        cli.command("transcript", "watch", str(live.parent), "--interval", "0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.environ(),
        text=True,
    )
    try:
        shutil.copyfile(next(agent_eval.DATA.rglob(f"{SHOP}.jsonl")), live)  # the session goes on: new turns
        deadline = time.monotonic() + 60
        titles: list[str] = []
        while time.monotonic() < deadline and "The shop backend runs on docker compose" not in titles:
            titles = [i["title"] for i in cli.ok("list")["items"]]
            time.sleep(0.2)
        assert "The shop backend runs on docker compose" in titles
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert [p for p, _b, _h in fake.requests].count("/v1/chat/completions") == 1


def _wait(probe: Any, what: str, timeout: float = 90) -> Any:
    """Poll ``probe`` until it returns something truthy (events here are engine jobs and commits)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _cycle_jobs(cli: Cli) -> list[dict[str, Any]]:
    return [j for j in cli.ok("status")["jobs"] if j["name"] == "memory-cycle"]


def test_the_engine_distils_after_imports_only_with_a_seat_and_reports_failures(shop: tuple[Cli, Path], fake: FakeOpenAI) -> None:
    """AG-9: with no seat an import starts no cycle; with one (a loopback server speaking the
    OpenAI chat-completions wire format), every import that wrote turns starts `memory-cycle` in the
    background: the import answers while the seat is still thinking, and the conclusion appears
    after. A seat failure never blocks an import: it is the job's (status: failed, provider_error)
    and the activity log's (memory_cycle, failed), and the watermark stays, so the next run reads
    the same turns."""
    import threading

    cli, live = shop
    full = next(agent_eval.DATA.rglob(f"{SHOP}.jsonl")).read_text().splitlines(keepends=True)
    have = live.read_text().splitlines(keepends=True)
    # No seat: an import that adds a turn starts nothing.
    live.write_text("".join(full[: len(have) + 2]))
    assert cli.ok("transcript", "import", str(live))["events_added"] > 0
    assert _cycle_jobs(cli) == []

    _seat(cli, fake.port)
    fake.hold_chat = threading.Event()
    fake.answers.append(_reply({"kind": "fact", "title": "Checkout runs on the shop backend", "turns": ["t1"]}))
    live.write_text("".join(full[: len(have) + 6]))
    imported = cli.ok("transcript", "import", str(live))  # answers while the seat holds its reply
    assert imported["events_added"] > 0
    # Still waiting for the seat after the import answered (the seat holds its reply up to 30 s).
    _wait(lambda: [j for j in _cycle_jobs(cli) if j["state"] == "running"], "the cycle to run")
    fake.hold_chat.set()
    _wait(lambda: [j for j in _cycle_jobs(cli) if j["state"] == "done"], "the cycle to finish")
    titles = [i["title"] for i in cli.ok("list", "--limit", "100")["items"]]
    assert "Checkout runs on the shop backend" in titles
    fake.hold_chat = None

    # The seat fails: the import still succeeds; status and the activity log say so; nothing written.
    fake.fail_statuses.extend([500] * 8)
    live.write_text("".join(full))
    assert cli.ok("transcript", "import", str(live))["events_added"] > 0
    failed = _wait(lambda: [j for j in _cycle_jobs(cli) if j["state"] == "failed"], "the cycle to fail")
    assert failed[-1]["failure"] == "provider_error"
    shown = cli.run("status")
    assert "memory-cycle: failed (provider_error)" in shown.stdout
    cli.sudo()
    entries = cli.ok("audit", "--op", "memory_cycle")["entries"]
    assert [e.get("outcome") for e in entries].count("failed") == 1, entries
    assert len(cli.ok("list", "--limit", "100")["items"]) == 1
    fake.fail_statuses.clear()
    fake.answers.append(_reply({"kind": "decision", "title": "Staging migrations run before deploys", "turns": ["t1"]}))
    again = cli.ok("memory", "cycle", "once")  # the failed run left the watermark: its turns are read now
    assert again["turns_read"] > 0 and again["written"] == 1
