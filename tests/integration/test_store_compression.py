"""State rows compressed before sealing (issue 32, ST-1): what shrinks, what reads back, and that
the compression flag is bound into the row's authentication.

A real store file through ``StoreFile``: records large and compressible enough are stored as
compressed row versions and come back byte for byte after a reopen; small or incompressible
ones are stored as before; a row whose version byte is switched between "compressed" and
"plain" is refused, so the unlock refuses the store.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from engine.crypto.aead import seal
from engine.crypto.kdf import calibrate
from engine.errors import MemoriesError
from engine.store import database as db
from engine.store.database import StoreFile, create_store

PASSWORD = "compression test password"


def _open(path: Path, deferred: frozenset[str] = frozenset()) -> tuple[StoreFile, list[tuple[int, dict[str, object]]]]:
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    loaded = store.load(deferred)
    return store, loaded.records


def _versions(path: Path) -> dict[int, int]:
    conn = sqlite3.connect(path)
    try:
        return {seq: blob[0] for seq, blob in conn.execute("SELECT seq, blob FROM state")}
    finally:
        conn.close()


def test_compressible_rows_shrink_and_read_back(tmp_path: Path) -> None:
    """Issue 32: a repetitive 8 KB record is stored compressed (row version 3, a fraction of its
    size) and reads back equal; a small one and an incompressible one keep version 1."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    big = {"t": "note", "text": "长期记忆 harbor lantern " * 400}
    small = {"t": "note", "text": "short"}
    noise = {"t": "note", "blob": os.urandom(4096)}
    seqs = store.commit([big, small, noise])
    store.close()
    versions = _versions(path)
    assert [versions[s] for s in seqs] == [3, 1, 1]
    conn = sqlite3.connect(path)
    try:
        stored = conn.execute("SELECT length(blob) FROM state WHERE seq = ?", (seqs[0],)).fetchone()[0]
    finally:
        conn.close()
    assert stored < len("长期记忆 harbor lantern ".encode()) * 400 // 4
    store, records = _open(path)
    store.close()
    by_seq = dict(records)
    assert by_seq[seqs[0]] == big and by_seq[seqs[1]] == small and by_seq[seqs[2]] == noise


def test_deferred_rows_are_compressed_and_opened_by_their_reader(tmp_path: Path) -> None:
    """Issue 32: a compressible record of a deferred kind is stored as row version 4, left sealed
    by the load, and opened (chain, AEAD, decompression) by ``SealedRows.open``."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    store.load(frozenset({"cache"}))  # commits seal records of this kind as deferred rows
    record = {"t": "cache", "words": "harbor lantern meadow " * 200}
    (seq,) = store.commit([record])
    store.close()
    assert _versions(path)[seq] == 4
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    loaded = store.load(frozenset({"cache"}))
    assert loaded.sealed is not None and len(loaded.sealed) == 1
    ((opened_seq, plain),) = loaded.sealed.open()
    store.close()
    assert opened_seq == seq and b"harbor lantern meadow" in plain


@pytest.mark.parametrize(("old", "new"), [(3, 1), (1, 3)])
def test_the_compression_flag_is_authenticated(tmp_path: Path, old: int, new: int) -> None:
    """ST-1: a row whose version byte is switched between compressed and plain is refused, even
    with the hash chain and the sealed checkpoint made to match (here with the real master key,
    which an attacker does not have): the flag is in the row's associated data, and a row read
    the other way could not be decoded either."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    master = store._key()
    record = {"t": "note", "text": "compressible " * 300} if old == 3 else {"t": "note", "text": "tiny"}
    (seq,) = store.commit([record])
    store.close()
    assert _versions(path)[seq] == old
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (blob,) = conn.execute("SELECT blob FROM state WHERE seq = ?", (seq,)).fetchone()
        conn.execute("UPDATE state SET blob = ? WHERE seq = ?", (bytes([new]) + bytes(blob[1:]), seq))
        rows = conn.execute("SELECT seq, blob FROM state ORDER BY seq").fetchall()
        chain = db._CHAIN_START
        for row_seq, row_blob in rows:
            chain = db._chain_next(chain, row_seq, row_blob)
        checkpoint = {"v": 1, "last_seq": rows[-1][0], "count": len(rows), "chain": chain, "last_content_seq": 0}
        sealed = db._ROW_VERSION + seal(master, db.encode_record(checkpoint), db._CHECKPOINT_AAD)
        conn.execute("UPDATE checkpoints SET blob = ? WHERE id = 1", (sealed,))
    finally:
        conn.close()
    with pytest.raises(MemoriesError) as caught:
        _open(path)
    assert caught.value.code == "store_corrupt"
    assert caught.value.message == "A state row failed authentication."
