"""Chunks that arrive whole in one commit go to a pack file (issue 32), on real store files.

Sync bundles, cloud objects and a restore's batches hand the store a large file's sealed
chunks in one commit; from ``PACK_MIN_BYTES`` of chunks of at least ``PACKED_ROW_MIN`` on they
are written to a pack, synced, and named by rows of the same transaction. What is proved
here: rows and chunks read back in order, small rows stay rows, a failed commit leaves no pack
and no row, a pack name already taken keeps the chunks as rows, a store from before packs gets
its table, and erasing the chunks removes the pack.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from engine.crypto.kdf import calibrate
from engine.errors import MemoriesError
from engine.store.database import StoreFile, create_store
from engine.store.packs import PACK_MIN_BYTES, PACKED_ROW_MIN, packs_path

PASSWORD = "commit packs"
CHUNK = 256 * 1024 + 40  # a full sealed chunk of a large file


def _store(tmp_path: Path) -> StoreFile:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [])
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    store.load()
    return store


def _content(store: StoreFile, sizes: list[int]) -> list[tuple[int, bytes]]:
    seqs = store.reserve_content(len(sizes))
    return [(seq, os.urandom(size)) for seq, size in zip(seqs, sizes, strict=True)]


def _tables(store: StoreFile) -> tuple[list[int], list[int]]:
    with sqlite3.connect(store.path) as conn:
        rows = [seq for (seq,) in conn.execute("SELECT seq FROM content ORDER BY seq")]
        has = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'content_packed'").fetchone()
        packed = [seq for (seq,) in conn.execute("SELECT seq FROM content_packed ORDER BY seq")] if has else []
    return rows, packed


def _packs(store: StoreFile) -> list[str]:
    folder = packs_path(store.path)
    return sorted(p.name for p in folder.glob("*.pack")) if folder.is_dir() else []


def test_a_commits_large_chunks_go_to_one_pack_and_small_rows_stay_rows(tmp_path: Path) -> None:
    """FI-1, ST-5: five full chunks and a short last chunk and a note body: the five to a pack named
    by the first of them, the rest rows; everything reads back in the order asked, also after the
    store is opened again."""
    store = _store(tmp_path)
    content = _content(store, [CHUNK] * 5 + [900, 3000])
    store.commit([{"t": "note", "n": 1}], content)
    rows, packed = _tables(store)
    assert packed == [seq for seq, _ in content[:5]] and rows == [seq for seq, _ in content[5:]]
    assert _packs(store) == [f"{content[0][0]:016x}.pack"]
    seqs = [seq for seq, _ in content]
    mixed = [seqs[6], seqs[0], seqs[5], seqs[4]]
    assert store.read_content(mixed) == [dict(content)[seq] for seq in mixed]
    store.close()
    again = StoreFile.open(tmp_path / "store.db")
    again.install_master(again.check_password(PASSWORD))
    again.load()
    assert again.read_content(seqs) == [blob for _, blob in content]


def test_less_than_a_pack_of_chunks_stays_rows(tmp_path: Path) -> None:
    """Below PACK_MIN_BYTES of large rows (or only small rows however many) nothing is packed."""
    store = _store(tmp_path)
    few = _content(store, [PACKED_ROW_MIN] * (PACK_MIN_BYTES // PACKED_ROW_MIN - 1))
    store.commit([{"t": "note", "n": 1}], few)
    many_small = _content(store, [PACKED_ROW_MIN - 1] * (2 * PACK_MIN_BYTES // PACKED_ROW_MIN))
    store.commit([{"t": "note", "n": 2}], many_small)
    assert _tables(store)[1] == [] and _packs(store) == []


def test_a_commit_that_fails_leaves_no_pack_and_no_row(tmp_path: Path) -> None:
    """ST-5: a content row number already taken fails the transaction after the pack was written:
    a typed error, the pack removed, not one row of the commit written, the cursor unchanged."""
    store = _store(tmp_path)
    first = _content(store, [100])
    store.commit([{"t": "note", "n": 1}], first)
    state_before, rows_before = store.last_seq, _tables(store)
    clash = [(first[0][0] + 1 + n, os.urandom(CHUNK)) for n in range(5)] + [(first[0][0], b"again")]
    with pytest.raises(MemoriesError) as caught:
        store.commit([{"t": "note", "n": 2}], clash)
    assert caught.value.code == "io_error" and "nothing was changed" in caught.value.message
    assert _packs(store) == [] and _tables(store) == rows_before and store.last_seq == state_before
    store.commit([{"t": "note", "n": 3}], _content(store, [CHUNK] * 5))  # the next commit packs as usual
    assert len(_packs(store)) == 1


def test_a_pack_name_already_there_keeps_the_chunks_as_rows(tmp_path: Path) -> None:
    """A file of the pack's name (a leftover no row names, for the unlock's sweep) is never
    replaced by a commit: its chunks are written as rows instead."""
    store = _store(tmp_path)
    content = _content(store, [CHUNK] * 5)
    folder = packs_path(store.path)
    folder.mkdir(mode=0o700)
    leftover = folder / f"{content[0][0]:016x}.pack"
    leftover.write_bytes(b"left over")
    store.commit([{"t": "note", "n": 1}], content)
    assert _tables(store) == ([seq for seq, _ in content], [])
    assert leftover.read_bytes() == b"left over"
    assert store.read_content([seq for seq, _ in content]) == [blob for _, blob in content]


def test_a_store_from_before_packs_gets_its_table_with_its_first_packed_commit(tmp_path: Path) -> None:
    """Format compatibility: no ``content_packed`` table until the first packed chunks, then one."""
    _store(tmp_path).close()
    with sqlite3.connect(tmp_path / "store.db") as conn:
        conn.execute("DROP TABLE content_packed")  # as a store written before packs has it
    store = StoreFile.open(tmp_path / "store.db")
    store.install_master(store.check_password(PASSWORD))
    store.load()
    store.commit([{"t": "note", "n": 1}], _content(store, [500]))
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'content_packed'").fetchone() is None
    content = _content(store, [CHUNK] * 4)
    store.commit([{"t": "note", "n": 2}], content)
    assert _tables(store)[1] == [seq for seq, _ in content]


def test_erasing_a_commits_chunks_removes_its_pack(tmp_path: Path) -> None:
    """AG-13: when the last chunk a pack holds is erased, the pack file goes with it."""
    store = _store(tmp_path)
    content = _content(store, [CHUNK] * 5)
    store.commit([{"t": "note", "n": 1}], content)
    seqs = [seq for seq, _ in content]
    store.erase_content(seqs[:2])
    assert len(_packs(store)) == 1
    store.erase_content(seqs[2:])
    assert _packs(store) == [] and _tables(store) == ([], [])
