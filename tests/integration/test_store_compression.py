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


# -- dictionary compression (issue 32) ---------------------------------------------------------


def _notes(count: int, start: int = 0, kind: str = "revision") -> list[dict[str, object]]:
    """Records that share a vocabulary, as the notes of one vault do, each different."""
    words = ["harbor", "lantern", "meadow", "长期", "记忆", "passport", "marathon", "kyoto", "budget", "garden"]
    return [
        {"t": kind, "n": i, "text": " ".join(words[(i * 7 + j * 3) % len(words)] + str(j % 5) for j in range(120))}
        for i in range(start, start + count)
    ]


def _rows(path: Path) -> dict[int, bytes]:
    conn = sqlite3.connect(path)
    try:
        return {seq: bytes(blob) for seq, blob in conn.execute("SELECT seq, blob FROM state")}
    finally:
        conn.close()


def _reseal(path: Path, master: bytes, rows: dict[int, bytes]) -> None:
    """Make the state exactly ``rows`` and re-seal the checkpoint over their chain (with the real
    master key, which an attacker does not have): only each row's own checks are left."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("DELETE FROM state")
        conn.executemany("INSERT INTO state (seq, blob) VALUES (?, ?)", sorted(rows.items()))
        chain = db.chain_over(sorted(rows.items()))
        last = max(rows)
        checkpoint = {"v": 1, "last_seq": last, "count": len(rows), "chain": chain, "last_content_seq": 0}
        sealed = db._ROW_VERSION + seal(master, db.encode_record(checkpoint), db._CHECKPOINT_AAD)
        conn.execute("UPDATE checkpoints SET blob = ? WHERE id = 1", (sealed,))
    finally:
        conn.close()


def test_a_large_commit_makes_a_dictionary_and_later_rows_use_it(tmp_path: Path) -> None:
    """Issue 32: a commit of 64+ records of one kind writes that kind's dictionary as a sealed
    state row (version 5) before them; the records are stored dictionary-compressed (version 6,
    naming the dictionary's row), smaller than compressed alone, and come back equal after a
    reopen; a later commit of that kind uses the same dictionary (no second one), and so does a
    commit after the next unlock. The dictionary row is never handed out as a record."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    alone = store.commit(_notes(3))  # too few yet for a dictionary: compressed alone (version 3)
    first = store.commit(_notes(100, 3))  # 103 since the unlock: the dictionary comes first
    later = store.commit(_notes(2, 103))
    store.close()
    rows = _rows(path)
    assert [rows[s][0] for s in alone] == [3, 3, 3]
    (book,) = [seq for seq, blob in rows.items() if blob[0] == 5]
    assert book == first[0] - 1  # written just before the first row that uses it
    for seq in [*first, *later]:
        assert rows[seq][0] == 6 and int.from_bytes(rows[seq][1:5], "big") == book
    alone_size = sum(len(rows[s]) for s in alone) / len(alone)
    with_dict = sum(len(rows[s]) for s in first) / len(first)
    assert with_dict < alone_size * 0.7
    store, records = _open(path)
    again = store.commit(_notes(1, 105))
    store.close()
    assert _rows(path)[again[0]][0] == 6 and int.from_bytes(_rows(path)[again[0]][1:5], "big") == book
    store, records = _open(path)
    store.close()
    assert [record for _, record in records] == [{"t": "identity-ish", "n": 0}, *_notes(106)]


def test_rows_with_a_dictionary_read_back_by_sequence(tmp_path: Path) -> None:
    """Issue 32: ``read_records`` (how a revision's signed bytes come back once they are no longer
    held) opens dictionary-compressed rows, those of this unlock's new dictionary and, after a
    reopen, of the stored one; a lock ends it."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    seqs = store.commit(_notes(100))
    assert all(_rows(path)[seq][0] == 6 for seq in seqs)
    assert store.read_records(seqs) == dict(zip(seqs, _notes(100), strict=True))
    store.close()
    store, _ = _open(path)
    assert store.read_records(seqs[::7]) == dict(zip(seqs[::7], _notes(100)[::7], strict=True))
    store.wipe()  # what a lock does to the store
    with pytest.raises(MemoriesError) as refused:
        store.read_records(seqs[:1])
    assert refused.value.code == "locked"
    store.close()


def test_deferred_rows_with_a_dictionary_are_opened_by_their_reader(tmp_path: Path) -> None:
    """Issue 32: records of a deferred kind use their dictionary too (version 7): the load leaves
    them sealed and ``SealedRows.open`` opens them with the dictionary the unlock opened."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    store.load(frozenset({"search_tokens"}))
    seqs = store.commit(_notes(80, kind="search_tokens"))
    store.close()
    assert {_rows(path)[s][0] for s in seqs} == {7}
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    loaded = store.load(frozenset({"search_tokens"}))
    assert loaded.records == [(1, {"t": "identity-ish", "n": 0})]
    assert loaded.sealed is not None
    opened = loaded.sealed.open()
    store.close()
    assert [(seq, db.decode_record(plain)) for seq, plain in opened] == list(
        zip(seqs, _notes(80, kind="search_tokens"), strict=True)
    )


def test_a_store_written_before_dictionaries_reads_and_gains_one(tmp_path: Path) -> None:
    """Issue 32, old stores keep opening: rows of versions 1 and 3 written as before dictionaries
    existed (here by sealing them the old way) are read as they are beside new dictionary rows."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    old_style = _notes(100)
    key = store._key()
    store.close()
    rows = _rows(path)
    first = max(rows) + 1
    rows.update({first + i: db._seal_record(key, record, first + i, frozenset()) for i, record in enumerate(old_style)})
    _reseal(path, key, rows)
    assert {blob[0] for blob in _rows(path).values()} <= {1, 3}
    store, records = _open(path)
    new = store.commit(_notes(70, 100))
    store.close()
    assert {_rows(path)[s][0] for s in new} == {6}
    store, records = _open(path)
    store.close()
    assert [record for _, record in records] == [{"t": "identity-ish", "n": 0}, *_notes(170)]


def _dictionary_store(tmp_path: Path) -> tuple[Path, bytes, int, list[int]]:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    key = store._key()
    seqs = store.commit(_notes(70))
    store.commit(_notes(70, 70, kind="audit"))  # a second kind, a second dictionary
    store.close()
    (book,) = [seq for seq, blob in _rows(path).items() if blob[0] == 5 and seq < seqs[0]]
    return path, key, book, seqs


def _refused(path: Path) -> None:
    with pytest.raises(MemoriesError) as caught:
        _open(path)
    assert caught.value.code == "store_corrupt"


def test_a_changed_dictionary_row_is_refused(tmp_path: Path) -> None:
    """ST-1: a dictionary row whose sealed bytes changed fails its AEAD: the unlock refuses the
    store, even with the chain and the sealed checkpoint made to match."""
    path, key, book, _ = _dictionary_store(tmp_path)
    rows = _rows(path)
    rows[book] = rows[book][:-1] + bytes([rows[book][-1] ^ 1])
    _reseal(path, key, rows)
    _refused(path)


def test_a_row_pointed_at_another_dictionary_is_refused(tmp_path: Path) -> None:
    """ST-1: the dictionary a row names is in its associated data: a row made to name another
    dictionary of the store (which would decompress it differently) fails its AEAD."""
    path, key, book, seqs = _dictionary_store(tmp_path)
    rows = _rows(path)
    other = next(seq for seq, blob in rows.items() if blob[0] == 5 and seq != book)
    rows[seqs[0]] = rows[seqs[0]][:1] + other.to_bytes(4, "big") + rows[seqs[0]][5:]
    _reseal(path, key, rows)
    _refused(path)


def test_a_dropped_dictionary_row_is_refused(tmp_path: Path) -> None:
    """ST-1: without its dictionary row (dropped, chain and checkpoint made to match) a row that
    names it cannot be opened: the unlock refuses the store instead of reading it otherwise."""
    path, key, book, _ = _dictionary_store(tmp_path)
    rows = _rows(path)
    del rows[book]
    _reseal(path, key, rows)
    _refused(path)


@pytest.mark.parametrize("new", [3, 1])
def test_a_dictionary_row_read_as_another_version_is_refused(tmp_path: Path, new: int) -> None:
    """ST-1: a dictionary-compressed row relabelled as compressed alone or plain (its version
    byte switched, chain and checkpoint made to match) fails its AEAD: the version is bound."""
    path, key, _, seqs = _dictionary_store(tmp_path)
    rows = _rows(path)
    rows[seqs[0]] = bytes([new]) + rows[seqs[0]][5:]
    _reseal(path, key, rows)
    _refused(path)


def test_a_sealed_row_that_does_not_inflate_with_its_dictionary_is_refused(tmp_path: Path) -> None:
    """ST-1, defence in depth: a row that authenticates (sealed here with the real master key and
    the right associated data) but whose content is not one whole zlib stream under its
    dictionary (cut short, or with bytes after it) is refused as corrupt, never half read."""
    path, key, book, seqs = _dictionary_store(tmp_path)
    for content in (b"\x78\x9c\x01\x02", db._Dictionary(book, b"x" * 64).compress(b"y" * 300) + b"tail"):
        rows = _rows(path)
        version = db._DROW_VERSION
        named = book.to_bytes(4, "big")
        rows[seqs[0]] = version + named + seal(key, content, db._row_aad(version, seqs[0]) + named)
        _reseal(path, key, rows)
        _refused(path)


def test_records_written_a_few_at_a_time_get_a_dictionary_once_there_are_enough(tmp_path: Path) -> None:
    """Issue 32: a vault written note by note gets its dictionary too: commits of 10 records are
    compressed alone until the commit that brings the records since the unlock to 64, which
    writes the dictionary (from samples of all of them) before its records; every later one
    uses it, and everything reads back. A kind outside the dictionary kinds never gets one
    (a dictionary makes a row's size depend on other records: SECURITY.md)."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    batches = [store.commit(_notes(10, i * 10)) for i in range(8)]
    other = store.commit(_notes(100, kind="grant-ish"))
    store.close()
    rows = _rows(path)
    (book,) = [seq for seq, blob in rows.items() if blob[0] == 5]
    assert [{rows[s][0] for s in batch} for batch in batches] == [{3}] * 6 + [{6}] * 2
    assert book == batches[6][0] - 1
    assert {rows[s][0] for s in other} == {3}
    store, records = _open(path)
    store.close()
    assert [record for _, record in records] == [{"t": "identity-ish", "n": 0}, *_notes(80), *_notes(100, kind="grant-ish")]


def test_revision_rows_use_the_dictionary_tail_and_rows_of_the_whole_window_still_read(tmp_path: Path) -> None:
    """Issue 32: revision and audit rows are compressed with a 4 KiB window (the tail of their
    dictionary) and fixed codes, token rows with the whole 32 KiB; the reader opens both with the same stored
    dictionary. Rows a store wrote before (a revision compressed with the whole window) read back
    beside new ones after a reopen, so stores written before keep opening."""
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish", "n": 0}])
    store, _ = _open(path)
    key = store._key()
    new = store.commit(_notes(80))
    book = store._kind_dictionaries["revision"]
    store.close()
    sample = db.encode_record(_notes(1, 500)[0])
    window_log = {kind: db._Dictionary(book.seq, book.zdict, kind).compress(sample)[0] >> 4 for kind in ("revision", "audit")}
    assert window_log == {"revision": 12 - 8, "audit": 12 - 8}
    assert db._Dictionary(book.seq, book.zdict, "search_tokens").compress(sample)[0] >> 4 == 15 - 8
    # Revision and audit rows in blocks of deflate's fixed codes (no code table to build per row at
    # an unlock), even where codes of their own would be smaller, as zlib's default picks for this
    # larger record: the first block's type, after the zlib header and the dictionary's ID (BFINAL
    # is bit 0, BTYPE bits 1-2: 1 fixed, 2 dynamic).
    larger = db.encode_record({"t": "note", "items": _notes(12, 500)})
    block_type = {
        kind: db._Dictionary(book.seq, book.zdict, kind).compress(larger)[6] >> 1 & 0b11
        for kind in ("revision", "audit", "search_tokens")
    }
    assert block_type == {"revision": 1, "audit": 1, "search_tokens": 2}
    rows = _rows(path)
    first = max(rows) + 1
    whole_window = {"revision": db._Dictionary(book.seq, book.zdict)}  # how rows were written before
    old_style = _notes(20, 80)
    for i, record in enumerate(old_style):
        rows[first + i] = db._seal_record(key, record, first + i, frozenset(), whole_window)
        assert rows[first + i][0] == 6
    _reseal(path, key, rows)
    store, records = _open(path)
    store.close()
    assert [record for _, record in records] == [{"t": "identity-ish", "n": 0}, *_notes(100)]
    assert {_rows(path)[s][0] for s in new} == {6}
