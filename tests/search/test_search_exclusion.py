"""What never enters the index, also right after the edit that excluded it (no stale cache)."""

from __future__ import annotations

from pathlib import Path

from tests.search.conftest import Engine

CANARY = "zebracanary7731"


def _ids(engine: Engine, query: str) -> list[str]:
    result = engine("search", query=query, wait_ms=120_000, limit=50)
    return [r["id"] for r in result["results"]]


def test_tombstoned_private_conflicted_never_appear(engine: Engine) -> None:
    """SR-3, SR-2: deleted, private and conflicted content leaves the index with the edit itself."""
    builds = engine.wait_ready()["build"]["builds"]
    kept = engine("put", title="Kept note", body=f"{CANARY} stays visible")
    doomed = engine("put", title="Doomed note", body=f"{CANARY} will be deleted")
    hidden = engine("put", title="Soon private", body=f"{CANARY} becomes private")
    forked = engine("put", title="Forked note", body=f"{CANARY} gets a conflict")
    assert set(_ids(engine, CANARY)) == {kept["id"], doomed["id"], hidden["id"], forked["id"]}

    engine("delete", id=doomed["id"])
    assert doomed["id"] not in _ids(engine, CANARY)

    engine("edit", id=hidden["id"], base=hidden["revision"], meta={"private": "true"})
    assert hidden["id"] not in _ids(engine, CANARY)

    base = forked["revision"]
    engine("edit", id=forked["id"], base=base, body=f"{CANARY} branch one")
    second = engine("edit", id=forked["id"], base=base, body=f"{CANARY} branch two")
    assert second["conflict"] is True
    assert forked["id"] not in _ids(engine, CANARY)
    assert _ids(engine, CANARY) == [kept["id"]]

    # Resolving the conflict brings it back, at the resolved text.
    engine("edit", id=forked["id"], resolve=True, body=f"{CANARY} resolved")
    result = engine("search", query=CANARY, wait_ms=120_000)
    assert {r["id"] for r in result["results"]} == {kept["id"], forked["id"]}

    status = engine("rag_status")
    assert status["index"]["excluded"].get("deleted") == 1 and status["index"]["excluded"].get("private") == 1
    # Every change above was applied incrementally: no rebuild of the whole index.
    assert status["build"]["builds"] == builds


def test_private_at_creation_and_credentials_never_indexed(engine: Engine) -> None:
    """SR-3: private content is excluded before indexing; other kinds (credentials) never enter."""
    engine("put", title="Diary", body=f"{CANARY} private thoughts", meta={"private": "true"})
    status = engine.wait_ready()
    assert _ids(engine, CANARY) == []
    assert status["index"]["assets"] == 0
    # Also after a rebuild from scratch (unlock path).
    engine.cli.ok("lock")
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    engine.wait_ready()
    assert _ids(engine, CANARY) == []


def test_lock_wipes_index_and_unlock_rebuilds(engine: Engine) -> None:
    """SR-2, ST-10: lock releases the index; the next unlock rebuilds it (from stored tokens, SR-6)."""
    engine("put", title="Lighthouse", body="The guest network is called Lighthouse")
    first = engine.wait_ready()
    assert first["index"]["assets"] == 1
    engine.cli.ok("lock")
    assert engine.cli.err("search", "Lighthouse")["code"] == "locked"
    assert engine.cli.err("rag", "status")["code"] == "locked"
    engine.cli.unlock()
    engine.client.close()
    engine.client.connect()
    status = engine.wait_ready()
    assert status["index"]["assets"] == 1 and status["index"]["chunks"] == 1
    # ST-12: the lock re-executed the engine (a new image, its counters new): one build since.
    assert first["build"]["builds"] >= 1 and status["build"]["builds"] == 1
    # SR-6: the second build reused the token stream written at put time instead of re-segmenting.
    assert status["build"]["reused_tokens"] >= 1
    assert engine.search_titles("lighthouse") == ["Lighthouse"]
    assert engine.search_titles("lighthouse", kind="memory") == ["Lighthouse"]
    assert engine.search_titles("lighthouse", kind="knowledge") == []


def test_canary_not_on_disk_in_plaintext(engine: Engine, tmp_path: Path) -> None:
    """ST-1, ST-2: indexed text and stored token streams never reach the disk or logs in plaintext."""
    engine("put", title="Canary", body=f"{CANARY} 长期记忆库 canarytoken")
    engine.wait_ready()
    engine("search", query=CANARY, wait_ms=120_000)
    engine.cli.ok("lock")
    for path in engine.cli.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert CANARY.encode() not in data, path
            assert "长期记忆库".encode() not in data, path
