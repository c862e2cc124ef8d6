"""DT-7 through a real daemon: the change feed, the save that refuses to overwrite, attention."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.helpers import Cli, raw, raw_error

SECRETISH = "Zebra-title-7731"


def _events(cli: Cli, after: int | None, stream: str | None = None, wait_ms: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"op": "events", "wait_ms": wait_ms}
    if after is not None:
        body["after"] = after
    if stream is not None:
        body["stream"] = stream
    with IpcClient(Paths(cli.home).socket, timeout=wait_ms / 1000 + 30) as client:
        return client.request(body, timeout=wait_ms / 1000 + 30)


def _until(cli: Cli, cursor: dict[str, Any], pred: Any, timeout: float = 60) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read the feed from ``cursor`` until ``pred(events so far)`` holds (bounded)."""
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        feed = _events(cli, cursor["seq"], cursor["stream"], wait_ms=2000)
        assert not feed["resync"], feed
        seen.extend(feed["events"])
        cursor = feed
        if pred(seen):
            return seen, cursor
    raise AssertionError(f"the feed never showed it: {seen}")


def test_dt7_feed_names_items_created_changed_deleted_without_content(vault: Cli) -> None:
    start = _events(vault, None)
    put = vault.put(SECRETISH, "body words 5521", "tagword")
    seen, cursor = _until(vault, start, lambda ev: any(e["type"] == "item" for e in ev))
    item = next(e for e in seen if e["type"] == "item")
    assert (item["change"], item["id"], item["kind"], item["revision"]) == ("created", put["id"], "memory", put["revision"])
    assert item["vault"] and item["conflict"] is False
    assert any(e["type"] == "counts" for e in seen)
    text = json.dumps(seen)
    for word in (SECRETISH, "5521", "tagword"):
        assert word not in text  # IDs and kinds only, never content
    vault.ok("edit", put["id"], "--title", "renamed")
    seen, cursor = _until(vault, cursor, lambda ev: any(e.get("change") == "changed" for e in ev))
    vault.ok("delete", put["id"])
    seen, cursor = _until(vault, cursor, lambda ev: any(e.get("change") == "deleted" for e in ev))
    assert next(e for e in seen if e.get("change") == "deleted")["id"] == put["id"]


def test_dt7_import_is_one_bulk_event(vault: Cli, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for n in range(120):
        (notes / f"n{n}.md").write_text(f"# Note {n}\n\nimported body {n}\n")
    start = _events(vault, None)
    assert vault.ok("import", str(notes))["created"] == 120
    seen, _ = _until(vault, start, lambda ev: sum(e.get("count", 0) for e in ev if e["type"] == "items") >= 120)
    assert not [e for e in seen if e["type"] == "item"]  # one event per commit, not 120


def test_dt7_a_waiting_reader_wakes_at_once_on_a_change_and_at_lock(vault: Cli) -> None:
    start = _events(vault, None)
    box: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: box.append(_events(vault, start["seq"], start["stream"], wait_ms=25_000)))
    reader.start()
    vault.put("wakes the reader")
    reader.join(60)
    assert box and box[0]["events"], box
    cursor = box[0]
    box.clear()
    reader = threading.Thread(target=lambda: box.append(_events(vault, cursor["seq"], cursor["stream"], wait_ms=25_000)))
    reader.start()
    time.sleep(0)  # the lock below may come before or after the read starts waiting: both must end it
    vault.ok("lock")
    reader.join(60)
    assert not reader.is_alive()
    # The engine re-executed at the lock (ST-12): the old cursor belongs to the old process.
    after = _events(vault, cursor["seq"], cursor["stream"])
    assert after["resync"] or any(e.get("state") == "locked" for e in (box[0]["events"] if box else []))
    vault.unlock()


def test_dt7_a_window_save_never_overwrites_a_change_made_elsewhere(vault: Cli) -> None:
    put = vault.put("Shared", "v1")
    vault.ok("edit", put["id"], "--body", "from the cli")
    stale = {"op": "edit", "id": put["id"], "base": put["revision"], "body": "from the window", "current_only": True}
    err = raw_error(vault, stale)
    assert err.code == "stale_base" and "changed elsewhere" in err.message
    got = vault.ok("get", put["id"])
    assert got["body"] == "from the cli" and got["conflict"] is False  # nothing was written
    current = got["revision"]
    ok = raw(vault, {"op": "edit", "id": put["id"], "base": current, "body": "window on the latest", "current_only": True})
    assert vault.ok("get", put["id"])["revision"] == ok["revision"]


def test_dt7_attention_lists_a_conflict_and_search_names_it(vault: Cli) -> None:
    base = vault.put("Quokka plans", "the first draft")
    vault.ok("edit", base["id"], "--body", "laptop draft")
    vault.ok("edit", base["id"], "--body", "phone draft", "--base", base["revision"])  # a real conflict (HI-4)
    status = vault.ok("status")
    assert status["attention"] is True and status["attention_reasons"] == ["conflicts"]
    attention = raw(vault, {"op": "attention"})
    [conflict] = attention["conflicts"]
    assert (conflict["id"], conflict["title"], conflict["versions"], conflict["resolve_here"]) == (
        base["id"],
        "Quokka plans",
        2,
        True,
    )
    assert attention["reasons"] == ["conflicts"] and attention["quarantine"]["count"] == 0
    # Not searchable while in conflict (seed 001), and the engine says which item that is.
    assert vault.ok("search", "quokka")["results"] == []
    found = raw(vault, {"op": "search_conflicts", "query": "Quokka"})
    assert [i["id"] for i in found["items"]] == [base["id"]]
    assert raw(vault, {"op": "search_conflicts", "query": "phone"})["count"] == 1  # a body word
    assert raw(vault, {"op": "search_conflicts", "query": "walrus"})["count"] == 0
    vault.ok("edit", base["id"], "--resolve", "--body", "merged")
    assert raw(vault, {"op": "attention"})["conflicts"] == []
    assert vault.ok("status")["attention_reasons"] == []


def test_dt7_feed_is_not_for_agents(vault: Cli) -> None:
    import engine.service.handlers  # noqa: F401  (registers the ops)
    from engine.service.registry import OPS

    for name in ("events", "attention", "search_conflicts"):
        assert OPS[name].mcp_allowed is False
