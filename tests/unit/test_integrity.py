"""The background signature check (engine/service/integrity.py) stops at a lock (ST-10)."""

from __future__ import annotations

from pathlib import Path

from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from tests.helpers import PASSWORD


def _service_with_a_forged_signature(home: Path) -> Service:
    service = Service(Paths(home), EngineConfig())
    caller = Caller("cli:test")
    service.dispatch({"op": "init", "password": PASSWORD}, caller)
    service.dispatch({"op": "put", "title": "note", "body": "body"}, caller)
    store = service.require_store()
    revision = next(record for _, record in reversed(store.load().records) if record.get("t") == "revision")
    store.commit([dict(revision, sig=bytes([revision["sig"][0] ^ 1]) + bytes(revision["sig"][1:]))])
    service.lock_now("test")
    return service


def test_a_lock_stops_the_check_before_it_verifies(tmp_path: Path) -> None:
    service = _service_with_a_forged_signature(tmp_path / "home")
    service.unlock_work.begin()  # a long index build: the check waits behind it
    try:
        service.dispatch({"op": "unlock", "password": PASSWORD}, Caller("cli:test"))
        service.lock_now("test")
    finally:
        service.unlock_work.end()
    assert service.verifier.done.wait(10)
    # It returned without verifying the old state (it would have found the forged signature).
    assert service.verifier.failed is False


def test_the_check_finds_the_forged_signature_and_locks(tmp_path: Path) -> None:
    service = _service_with_a_forged_signature(tmp_path / "home")
    service.dispatch({"op": "unlock", "password": PASSWORD}, Caller("cli:test"))
    assert service.verifier.done.wait(10)
    assert service.verifier.failed is True
    assert service.state is None


def test_a_deferred_row_that_fails_to_open_after_the_unlock_locks_and_the_next_unlock_refuses(tmp_path: Path) -> None:
    """ST-1, issue 20: a search token row is left sealed by the unlock and opened by the index
    build. One with a bad tag under a chain that agrees (only the master key's holder could
    re-seal the checkpoint) locks the vault when the build finds it, and from then on rows of
    that kind are opened before an unlock answers, which refuses with store_corrupt."""
    import sqlite3

    import pytest

    from engine.errors import MemoriesError
    from engine.service.search_runtime import runtime_of
    from tests.integration.test_unlock_prefetch import _reseal_checkpoint_over, _state_rows

    home = tmp_path / "home"
    service = Service(Paths(home), EngineConfig())
    caller = Caller("cli:test")
    service.dispatch({"op": "init", "password": PASSWORD}, caller)
    service.dispatch({"op": "put", "title": "note", "body": "body"}, caller)
    store = service.require_store()
    store.commit([{"t": "search_tokens", "body": "not read before the build"}])
    service.lock_now("test")
    store_path = home / "store.db"
    rows = _state_rows(store_path)
    assert rows[-1][1][:1] == b"\x02"  # written as a deferred row
    seq, blob = rows[-1]
    rows[-1] = (seq, blob[:-1] + bytes([blob[-1] ^ 1]))
    _reseal_checkpoint_over(store_path, store.check_password(PASSWORD), rows)

    service.dispatch({"op": "unlock", "password": PASSWORD}, caller)  # answers: the row is still sealed
    job = runtime_of(service).job
    assert job is not None and job.done.wait(10)
    assert service.state is None  # the build opened it and locked
    with pytest.raises(MemoriesError) as caught:
        service.dispatch({"op": "unlock", "password": PASSWORD}, caller)
    assert caught.value.code == "store_corrupt"
    with sqlite3.connect(store_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM state").fetchone()[0] == len(rows)
