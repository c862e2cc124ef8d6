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
