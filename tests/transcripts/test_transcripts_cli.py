"""memories transcript import|list|show|watch through the real CLI and daemon (AG-5, issue 18)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.transcripts import claude_code
from tests.helpers import Cli
from tests.mcp.support import ipc

DATA = Path(__file__).resolve().parents[1] / "data" / "transcripts"
LIVE_NAME = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a.jsonl"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cli, Path, dict[str, Any]]]:
    """One daemon for the module: the sample sessions copied to a folder and imported once."""
    root = tmp_path_factory.mktemp("tx")
    shutil.copytree(DATA, root / "data")
    cli = Cli(home=root / "home")
    cli.init()
    first = cli.ok("transcript", "import", str(root / "data"))
    yield cli, root / "data", first
    cli.stop()


def _sessions(cli: Cli) -> dict[str, dict[str, Any]]:
    return {s["title"]: s for s in cli.ok("transcript", "list")["sessions"]}


def _all(cli: Cli) -> list[dict[str, Any]]:
    sessions: list[dict[str, Any]] = cli.ok("transcript", "list")["sessions"]
    return sessions


def _revisions(cli: Cli) -> int:
    client = ipc(cli)
    try:
        total = 0
        for s in client.request({"op": "transcript_list"})["sessions"]:
            shown = client.request({"op": "transcript_show", "session": s["session_uid"], "limit": 1})
            total += len(shown["session"]["revisions"])
        return total
    finally:
        client.close()


def test_import_sessions_threads_and_warnings(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """AG-5: three sessions from four files; the sub-agent file joins its parent session as its own thread."""
    cli, _data, first = imported
    assert first["files"] == 4 and first["imported"] == 4 and first["sessions"] == 3
    assert first["skipped_lines"] == 2 and first["still_being_written"] == 1
    sessions = _sessions(cli)
    cabin = next(s for t, s in sessions.items() if "pytest" in t)
    assert {t["key"] for t in cabin["threads"]} == {"main", "sidechain", "agent:a7f3c2e1"}
    assert cabin["turns"] == 5
    shown = cli.ok("transcript", "show", cabin["session_uid"][:8], "--turn", "1")
    (turn,) = shown["turns"]
    assert turn["seq"] == 1 and turn["events"][0]["text"].startswith("为什么 pytest")
    assert [e["type"] for e in turn["events"]] == ["message", "message", "tool_call", "tool_result", "message"]


def test_reimport_is_idempotent_and_cheap(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """AG-5: importing the same files again reads no events and writes no revision."""
    cli, data, _first = imported
    before = (_sessions(cli), _revisions(cli))
    again = cli.ok("transcript", "import", str(data))
    assert again["unchanged"] == 4 and again["events_added"] == 0 and again["sessions_written"] == 0
    assert (_sessions(cli), _revisions(cli)) == before


def test_growing_file_adds_only_new_turns_with_stable_seq(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """AG-5: the line that was still being written is read once complete; earlier turns keep uid and seq."""
    cli, data, _first = imported
    live = next(data.rglob(LIVE_NAME))
    session = next(s for t, s in _sessions(cli).items() if "release notes" in t)
    before = cli.ok("transcript", "show", session["session_uid"][:10])["turns"]
    text = live.read_bytes()
    cut = text[: text.rfind(b"\n") + 1]
    line: dict[str, Any] = {"type": "user", "sessionId": "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a", "uuid": "l-0003"}
    line |= {"timestamp": "2026-11-30T10:01:00.000Z", "message": {"role": "user", "content": "Add the migration note"}}
    live.write_bytes(cut + json.dumps(line).encode() + b"\n")
    result = cli.ok("transcript", "import", str(live))
    # AG-8: only the new turn is written (it also records the file's new revision_id), however long the session.
    assert result["events_added"] == 1 and result["sessions"] == 1 and result["sessions_written"] == 1
    after = cli.ok("transcript", "show", session["session_uid"][:10])["turns"]
    assert [(t["turn_uid"], t["seq"]) for t in after[: len(before)]] == [(t["turn_uid"], t["seq"]) for t in before]
    assert after[-1]["seq"] == len(before) + 1 and after[-1]["events"][0]["text"] == "Add the migration note"


def test_new_adapter_version_new_revision_id_same_session(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """AG-5: a changed adapter version gives a new revision_id, never a duplicate session."""
    cli, data, _first = imported
    main = next(data.rglob("5f1c2d3e-*.jsonl"))
    raw = main.read_bytes()
    events = [{k: v for k, v in vars(e).items() if v != "" or k in ("text", "native_key")} for e in claude_code.parse(raw).events]
    count = len(_sessions(cli))
    client = ipc(cli)
    try:
        import hashlib

        digest = hashlib.sha256(raw).hexdigest()
        body = {"op": "transcript_import", "adapter": "claude_code", "source_sha256": digest, "events": events}
        result = client.request({**body, "adapter_version": "claude_code/2"})
        assert result["events_added"] == 0 and result["written"] == 1
        v1 = client.request({"op": "transcript_known", "revisions": [result["revision_id"]]})
        assert v1["known"] == [result["revision_id"]]
    finally:
        client.close()
    assert len(_sessions(cli)) == count
    cabin = next(s for t, s in _sessions(cli).items() if "pytest" in t)
    assert result["revision_id"] in cabin["revisions"] and len(cabin["revisions"]) >= 3


def test_bad_requests_are_typed_and_change_nothing(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """API-8: a bad locator, an unknown turn, a malformed import: typed errors, nothing written."""
    cli, _data, _first = imported
    before = _revisions(cli)
    assert cli.err("transcript", "show", "zz-not-hex")["code"] == "invalid_input"
    assert cli.err("transcript", "show", "abcdef0123")["code"] == "not_found"
    uid = next(iter(_sessions(cli).values()))["session_uid"]
    assert cli.err("transcript", "show", uid[:10], "--turn", "999")["code"] == "not_found"
    client = ipc(cli)
    try:
        from engine.errors import MemoriesError

        bad: dict[str, Any] = {"op": "transcript_import", "adapter": "claude_code", "adapter_version": "claude_code/1"}
        bad |= {"source_sha256": "0" * 64, "events": [{"session_key": "s", "thread_key": "main", "native_key": "n"}]}
        with pytest.raises(MemoriesError) as exc:
            client.request(bad)
        assert exc.value.code == "invalid_request"
        with pytest.raises(MemoriesError) as exc:
            client.request({**bad, "adapter": "vim"})
        assert exc.value.code == "invalid_request"
    finally:
        client.close()
    assert _revisions(cli) == before


def test_transcripts_are_searchable_in_chinese_and_english(imported: tuple[Cli, Path, dict[str, Any]]) -> None:
    """AG-5: transcripts are indexed like notes, in both languages."""
    cli, _data, _first = imported
    for query, needle in (("overlap", "pytest"), ("失败", "pytest"), ("修好", "pytest"), ("备份目录", "dry-run")):
        results = cli.ok("search", query)["results"]
        assert any(r["kind"] == "transcript" and needle in r["turn"]["session_title"] for r in results), (query, results)
    assert all(s["kind"] != "transcript" for s in cli.ok("list")["items"])  # `list` shows notes and cards


def test_watch_imports_turns_as_a_file_grows(imported: tuple[Cli, Path, dict[str, Any]], tmp_path: Path) -> None:
    """AG-5: `transcript watch` (polling) picks up a session file that appears and grows."""
    cli, data, _first = imported
    folder = tmp_path / "watched"
    folder.mkdir()
    proc = subprocess.Popen(
        cli.command("transcript", "watch", str(folder), "--interval", "0.2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli.environ(),
        text=True,
    )
    try:
        codex_file = next(data.rglob("rollout-*.jsonl"))
        lines = codex_file.read_text().splitlines(keepends=True)
        meta = json.loads(lines[0])
        meta["payload"]["id"] = "0199ffff-0000-7000-8000-000000000001"
        target = folder / "rollout-watch.jsonl"
        target.write_text(json.dumps(meta) + "\n" + "".join(lines[3:5]))
        deadline = time.monotonic() + 30
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not found:
            found = [s for s in _all(cli) if s["session_key"] == meta["payload"]["id"]]
            time.sleep(0.2)
        assert found and found[0]["turns"] == 1
        with target.open("a") as handle:
            handle.write(lines[14])
        while time.monotonic() < deadline:
            now = [s for s in _all(cli) if s["session_key"] == meta["payload"]["id"]]
            if now[0]["turns"] == 2:
                break
            time.sleep(0.2)
        assert now[0]["turns"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=60)
