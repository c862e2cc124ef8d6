"""Issue 16: the store's WAL checkpoints run on a thread of their own (engine/store/checkpointer.py).

Real store files: commits and streamed content rows append to the write-ahead log without
copying it back themselves; the checkpointer copies it into the database file once a few MiB
have been written, while writes go on; closing the store stops the thread and leaves no log.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.crypto.kdf import calibrate
from engine.store.checkpointer import BACKSTOP_PAGES, THRESHOLD_BYTES
from engine.store.database import StoreFile, create_store

PASSWORD = "checkpoint password"
CHUNK = 256 * 1024


def _store(tmp_path: Path) -> StoreFile:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "note", "n": 0}])
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    store.load()
    return store


def _write_chunks(store: StoreFile, count: int) -> list[tuple[int, bytes]]:
    rows = [(seq, os.urandom(CHUNK)) for seq in store.claim_content(count)]
    store.write_content(rows)
    return rows


def test_commits_leave_the_copy_to_the_checkpointer(tmp_path: Path) -> None:
    """Below the threshold the rows stay in the log (the commit copied nothing back); past it
    the checkpointer's own connection copies them into the database file."""
    store = _store(tmp_path)
    checkpointer = store._checkpointer
    assert checkpointer is not None
    # The store connection checkpoints by itself only as a backstop, far above SQLite's 1,000 pages.
    assert store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES
    db = tmp_path / "store.db"
    size_before = db.stat().st_size
    _write_chunks(store, THRESHOLD_BYTES // CHUNK - 2)
    assert checkpointer.wait_idle(30)
    assert checkpointer.checkpoints == 0
    assert db.stat().st_size == size_before  # all of it still in the log
    _write_chunks(store, 4)  # now past the threshold
    assert checkpointer.wait_idle(30)
    assert checkpointer.checkpoints == 1
    assert db.stat().st_size >= size_before + THRESHOLD_BYTES  # copied into the file
    store.close()


def test_writes_go_on_during_checkpoints_and_all_of_them_are_read_back(tmp_path: Path) -> None:
    """Content and state commits interleaved with background checkpoints: after closing (thread
    stopped, log removed as SQLite does at the last close) a fresh open reads every row."""
    store = _store(tmp_path)
    written: list[tuple[int, bytes]] = []
    for round_ in range(12):
        written += _write_chunks(store, 8)  # 2 MiB a round: a checkpoint every other round
        store.commit([{"t": "note", "n": round_ + 1}])
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer.wait_idle(30) and checkpointer.checkpoints >= 4
    store.close()
    assert not checkpointer._thread.is_alive()
    assert not Path(f"{tmp_path / 'store.db'}-wal").exists()
    again = StoreFile.open(tmp_path / "store.db")
    again.install_master(again.check_password(PASSWORD))
    loaded = again.load()
    assert [r["n"] for _, r in loaded.records] == list(range(13))
    assert again.read_content([seq for seq, _ in written]) == [blob for _, blob in written]
    again.close()
