"""A vault's search index stays current across commits to other vaults without a walk over the
vault (issue 20), and is still reconciled when revisions arrived without the commit hook."""

from __future__ import annotations

import os
from pathlib import Path

from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.handlers.assets import make_summary, new_revision
from engine.service.search_runtime import runtime_of
from engine.service.service import Service
from tests.helpers import PASSWORD

CALLER = Caller("cli:test")


def _service(home: Path) -> Service:
    service = Service(Paths(home), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
    service.dispatch({"op": "vault_new", "name": "work"}, CALLER)
    service.dispatch({"op": "put", "title": "zeppelin notes", "body": "airships"}, CALLER)
    assert runtime_of(service).wait_ready(120)
    return service


def _titles(service: Service, query: str) -> list[str]:
    return [r["title"] for r in service.dispatch({"op": "search", "query": query, "wait_ms": 120_000}, CALLER)["results"]]


def test_a_write_to_another_vault_leaves_the_index_current(tmp_path: Path) -> None:
    """Issue 20: after a put into another vault, the default vault's index needs no reconciliation."""
    service = _service(tmp_path / "home")
    try:
        assert _titles(service, "zeppelin") == ["zeppelin notes"]
        service.dispatch({"op": "put", "title": "zeppelin at work", "body": "b", "vault": "work"}, CALLER)
        state = service.require_unlocked()
        index = runtime_of(service).cache.peek(state.default_vault)
        assert index is not None and index.revisions_seen == len(state.index.revisions)
        assert _titles(service, "zeppelin") == ["zeppelin notes"]  # the other vault's note is not here
    finally:
        service.lock_now("test")


def test_revisions_applied_without_the_hook_are_still_reconciled(tmp_path: Path) -> None:
    """SR-2: a revision stored and applied outside the commit hook (as a merge path may) is found
    by the next search even when a commit to another vault came in between."""
    service = _service(tmp_path / "home")
    try:
        assert _titles(service, "zeppelin") == ["zeppelin notes"]
        with service.lock:
            state = service.require_unlocked()
            summary = make_summary("hindenburg", [], {})
            rev, rows = new_revision(
                service, state, asset_id=os.urandom(16), kind="memory", parents=[], summary=summary, body="zeppelin"
            )
            (rev.seq,) = service.vault.require_store().commit([rev.to_record()], rows)
            state.index.apply(rev)
        service.dispatch({"op": "put", "title": "elsewhere", "body": "b", "vault": "work"}, CALLER)
        assert sorted(_titles(service, "zeppelin")) == ["hindenburg", "zeppelin notes"]
    finally:
        service.lock_now("test")
