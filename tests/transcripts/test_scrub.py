"""AG-10 over what was stored before redaction existed: `memories transcript scrub`.

tests/data/transcripts-pre-redaction/store.db was written by the code just before AG-10
(commit 9852ed1, `git archive` of it run against a fresh home): the `cat .env` session of
tests/transcripts/test_redaction.py imported with the fixture password, its token-shaped
canaries stored, segmented and indexed as plain text.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

from tests.helpers import Cli
from tests.mcp.support import result_of, stdio_client
from tests.transcripts.test_redaction import CANARIES

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "transcripts-pre-redaction" / "store.db"
PASSWORD = "fixture password: not a secret"


def _found(cli: Cli, canary: str) -> list[dict[str, Any]]:
    """The search hits for ``canary`` that show it (the snippet marks matches with ``**``)."""
    hits = cli.ok("search", canary, "--kind", "transcript")["results"]
    return [h for h in hits if canary in json.dumps(h).replace("**", "")]


def _indexed(cli: Cli, canary: str, timeout: float = 90) -> list[dict[str, Any]]:
    """The hits for ``canary`` once the index built after the unlock (a background job) has it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _found(cli, canary)
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("the token never became searchable")


def _settled(cli: Cli) -> None:
    """Wait until no index job runs, so a search answers from the whole index."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not [j for j in cli.ok("status").get("jobs", []) if j["state"] in ("running", "waiting")]:
            return
        time.sleep(0.1)
    raise AssertionError("background jobs never settled")


def test_ag10_scrub_removes_tokens_stored_before_redaction(tmp_path: Path) -> None:
    """AG-10: a token shape stored before redaction is findable; after `transcript scrub` it is in
    no search result, no MCP recall_turn/recall_session/history answer and no revision of the
    store's history as any surface shows it (`get --rev` of the old revision included), also after
    the engine restarts; a second scrub finds nothing; --dry-run writes nothing."""
    cli = Cli(home=tmp_path / "home")
    cli.home.mkdir(mode=0o700)
    shutil.copyfile(FIXTURE, cli.home / "store.db")
    (cli.home / "store.db").chmod(0o600)
    try:
        cli.unlock(PASSWORD)
        github = CANARIES["github_token"]
        assert _indexed(cli, github)  # the fixture holds the token in plain text
        dry = cli.ok("transcript", "scrub", "--dry-run")
        assert dry["dry_run"] and dry["turns_redacted"] == 1 and dry["redacted"] >= 6
        assert _indexed(cli, github)  # a dry run writes nothing

        done = cli.ok("transcript", "scrub")
        assert done["turns_redacted"] == 1 and done["redacted"] == dry["redacted"]
        assert done["kinds"]["github_token"] == 1 and done["kinds"]["aws_access_key"] == 1
        assert cli.ok("transcript", "scrub")["redacted"] == 0
        session = cli.ok("transcript", "list")["sessions"][0]["session_uid"]
        turn = cli.ok("transcript", "show", session)["turns"][0]
        revisions = cli.ok("history", turn["id"])["revisions"]
        assert len(revisions) == 2
        old = next(r for r in revisions if not r["head"])
        shown = [json.dumps(cli.ok("transcript", "show", session)), json.dumps(revisions)]
        shown.append(json.dumps(cli.ok("get", turn["id"], "--rev", old["revision"])))
        assert "[redacted:github_token]" in shown[0] and "[redacted:github_token]" in shown[2]

        cli.sudo(PASSWORD)
        token = cli.ok("mcp", "grant", "--name", "reader", "--scope", "read", "--transcripts")["token"]

        async def agent() -> list[str]:
            async with stdio_client(cli, token) as client:
                recall = result_of(await client.call_tool("recall_turn", {"query": "canary service database env file"}))
                whole = result_of(await client.call_tool("recall_session", {"session": session}))
                past = result_of(await client.call_tool("history", {"id": turn["id"]}))
            assert recall["hit"] is not None
            return [json.dumps(recall), json.dumps(whole), json.dumps(past)]

        shown += asyncio.run(agent())
        _settled(cli)
        for canary in CANARIES.values():
            assert not _found(cli, canary), canary
            for text in shown:
                assert canary not in text, canary
        cli.stop()
        cli.unlock(PASSWORD)  # the index comes back from the store: still without the tokens
        _settled(cli)
        for canary in CANARIES.values():
            assert not _found(cli, canary), canary
    finally:
        cli.stop()
