"""Stored revisions do not hold their signed bytes (issue 32): they are read back from the
sealed state row when a summary, a body, a signature check or a sync needs them.

In-process on a real store in a temp home (a real SQLite file, real AEAD rows): what is read
back equals what was signed, its signature verifies, a row changed on disk is refused, and a
lock ends every read (ST-10).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from engine.store.database import StoreFile
from engine.vault.revision import Revision, held, holding
from tests.helpers import PASSWORD

CALLER = Caller("cli:readback")


def _service(home: Path) -> Service:
    service = Service(Paths(home), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
    return service


def _put(service: Service, title: str) -> Revision:
    result = service.dispatch({"op": "put", "title": title, "body": f"body of {title}"}, CALLER)
    return service.require_unlocked().index.revisions[bytes.fromhex(result["revision"])]


def _stored_signed(path: Path, password_unlocked: Service) -> dict[bytes, tuple[bytes, bytes]]:
    """rev ID -> (signed, sig) straight from the store's records (an independent read of every row)."""
    store = password_unlocked.require_store()
    loaded = store.load()
    return {hashlib.sha256(r["signed"]).digest(): (r["signed"], r["sig"]) for _, r in loaded.records if r.get("t") == "revision"}


def test_signed_bytes_read_back_equal_the_stored_ones_and_verify(tmp_path: Path) -> None:
    service = _service(tmp_path / "home")
    committed = _put(service, "first")
    _put(service, "second")
    # Let go once committed: the new revision's bytes are read back from its row from then on.
    assert not committed.signed_kept
    service.lock_now("test")
    service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
    # The background signature check holds a batch while it checks it: wait for its end.
    assert service.verifier.done.wait(120)
    state = service.require_unlocked()
    revisions = list(state.index.revisions.values())
    assert revisions and not any(rev.signed_kept for rev in revisions)
    stored = _stored_signed(service.paths.store, service)
    for rev in revisions:
        assert rev.signed_pair() == stored[rev.rev_id]
        assert hashlib.sha256(rev.signed).digest() == rev.rev_id
        rev.verify_signature()
        assert not rev.signed_kept  # a single read is not kept either
    # Summaries and bodies open from the read-back bytes.
    titles = {i["title"] for i in service.dispatch({"op": "list", "limit": 100}, CALLER)["items"]}
    assert {"first", "second"} <= titles
    got = service.dispatch({"op": "get", "id": committed.asset_id.hex()}, CALLER)
    assert got["body"] == "body of first"


def test_held_reads_a_batch_and_lets_it_go(tmp_path: Path) -> None:
    service = _service(tmp_path / "home")
    for i in range(7):
        _put(service, f"note {i}")
    revisions = list(service.require_unlocked().index.revisions.values())
    with held(revisions):
        assert all(rev.signed_kept for rev in revisions)
        assert all(hashlib.sha256(rev.signed).digest() == rev.rev_id for rev in revisions)
    assert not any(rev.signed_kept for rev in revisions)
    seen = []
    for rev in holding(revisions, batch=3):
        assert rev.signed_kept
        seen.append(rev.rev_id)
    assert seen == [rev.rev_id for rev in revisions]
    assert not any(rev.signed_kept for rev in revisions)


def test_a_row_changed_on_disk_is_refused_when_read_back(tmp_path: Path) -> None:
    """A stored revision's row replaced by another revision's sealed row: the AEAD (bound to the
    row's number) refuses it, so no other bytes are ever taken for this revision."""
    service = _service(tmp_path / "home")
    first = _put(service, "first")
    second = _put(service, "second")
    with sqlite3.connect(service.paths.store) as conn:
        (blob,) = conn.execute("SELECT blob FROM state WHERE seq = ?", (second.seq,)).fetchone()
        conn.execute("UPDATE state SET blob = ? WHERE seq = ?", (blob, first.seq))
    with pytest.raises(MemoriesError) as caught:
        first.verify_signature()
    assert caught.value.code == "store_corrupt"


def test_read_records_refuses_a_record_of_another_revision(tmp_path: Path) -> None:
    """The row authenticates but is another revision's record (moved with its number): the
    revision ID, the hash of the bytes loaded at unlock, does not match."""
    service = _service(tmp_path / "home")
    first = _put(service, "first")
    second = _put(service, "second")
    store: StoreFile = service.require_store()
    assert store.read_records([second.seq])[second.seq]["signed"] == second.signed
    # ``second`` pretends to live at ``first``'s row.
    second.seq = first.seq
    with pytest.raises(MemoriesError) as caught:
        second.signed_pair()
    assert caught.value.code == "store_corrupt"


def test_after_a_lock_nothing_is_read_back_and_unlock_reads_again(tmp_path: Path) -> None:
    """ST-10: a revision object kept past a lock reads nothing (the store's key is gone)."""
    service = _service(tmp_path / "home")
    rev = _put(service, "kept")
    service.lock_now("test")
    with pytest.raises(MemoriesError) as caught:
        rev.signed_pair()
    assert caught.value.code == "locked"
    service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
    again = service.require_unlocked().index.revisions[rev.rev_id]
    assert hashlib.sha256(again.signed).digest() == rev.rev_id
    again.verify_signature()


def test_body_rows_read_back_as_they_were_set(tmp_path: Path) -> None:
    """``body_seqs`` is kept compact (one int, a range, a tuple) but reads as the list it was."""
    service = _service(tmp_path / "home")
    rev = _put(service, "rows")
    for seqs in ([5], [5, 6, 7], [9, 3], [4, 4], []):
        rev.body_seqs = list(seqs)
        assert rev.body_seqs == seqs
        assert rev.to_record()["body_seqs"] == seqs
