"""Issue 20: what an unlock reads while the KDF runs, and what it leaves undecoded.

The state rows are read and hash-chained on another thread during the KDF
(``StoreFile.check_password(prefetch=True)``); ``load`` uses them only if they are exactly
the rows the sealed checkpoint covers. Records of deferred kinds (search token streams)
are authenticated but handed over undecoded. Real store files, no fakes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine.crypto.kdf import calibrate
from engine.crypto.libsodium import RowOpener, xchacha_open
from engine.errors import MemoriesError
from engine.store.database import StoreFile, create_store, decode_record

PASSWORD = "prefetch password"


def _store(tmp_path: Path, records: int = 5) -> StoreFile:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "note", "n": i} for i in range(records)])
    return StoreFile.open(path)


def _unlock(store: StoreFile) -> None:
    store.install_master(store.check_password(PASSWORD, prefetch=True))


def test_rows_prefetched_during_the_kdf_are_the_rows_loaded(tmp_path: Path) -> None:
    """ST-5: an unlock with a prefetch yields every record, in order, checked against the checkpoint."""
    store = _store(tmp_path)
    _unlock(store)
    loaded = store.load()
    assert [r["n"] for _, r in loaded.records] == list(range(5))
    assert loaded.count == 5


def test_a_prefetch_the_store_moved_past_is_read_again(tmp_path: Path) -> None:
    """ST-5: rows prefetched before a commit no longer match the checkpoint; load reads them again
    and opens the store instead of calling it corrupt."""
    store = _store(tmp_path)
    _unlock(store)
    store.load()
    store._prefetch()  # rows as they are now ...
    store.commit([{"t": "note", "n": 5}])  # ... and then the store moves on
    loaded = store.load()
    assert [r["n"] for _, r in loaded.records] == list(range(6))


def test_a_row_added_behind_the_engines_back_is_refused_from_the_prefetch(tmp_path: Path) -> None:
    """ST-5: the rows decrypted are the rows whose chain matched the checkpoint: a row copied
    in while locked makes the prefetched unlock store_corrupt."""
    store = _store(tmp_path)
    with sqlite3.connect(tmp_path / "store.db") as conn:
        conn.execute("INSERT INTO state (seq, blob) SELECT 1000, blob FROM state WHERE seq = 2")
    _unlock(store)
    with pytest.raises(MemoriesError) as caught:
        store.load()
    assert caught.value.code == "store_corrupt"


def test_a_dropped_row_is_refused_with_or_without_a_prefetch(tmp_path: Path) -> None:
    """ST-5: dropping a row is caught by the chain whether the rows were prefetched or not."""
    store = _store(tmp_path)
    with sqlite3.connect(tmp_path / "store.db") as conn:
        conn.execute("DELETE FROM state WHERE seq = (SELECT MAX(seq) FROM state)")
    for prefetch in (True, False):
        store.install_master(store.check_password(PASSWORD, prefetch=prefetch))
        with pytest.raises(MemoriesError) as caught:
            store.load()
        assert caught.value.code == "store_corrupt"


def test_a_wrong_password_keeps_no_prefetched_rows(tmp_path: Path) -> None:
    """A refused attempt leaves nothing read on its behalf in memory."""
    store = _store(tmp_path)
    with pytest.raises(MemoriesError) as caught:
        store.check_password("not the password", prefetch=True)
    assert caught.value.code == "wrong_password"
    assert store._prefetched is None


def test_deferred_kinds_are_authenticated_but_left_undecoded(tmp_path: Path) -> None:
    """SR-6: records of a deferred kind come back as their exact plaintext, everything else decoded."""
    store = _store(tmp_path, records=2)
    _unlock(store)
    store.load()
    token = {"t": "search_tokens", "rev": b"\x01" * 32, "v": "x", "body": "tokens"}
    store.commit([token, {"t": "note", "n": 2}])
    loaded = store.load(frozenset({"search_tokens"}))
    assert [r["t"] for _, r in loaded.records] == ["note", "note", "note"]
    [(seq, plain)] = loaded.deferred["search_tokens"]
    assert decode_record(plain) == token and seq == loaded.last_seq - 1


def test_a_tampered_deferred_row_is_refused(tmp_path: Path) -> None:
    """ST-1: a deferred row is still opened (AEAD) and chained before the unlock answers."""
    store = _store(tmp_path, records=1)
    _unlock(store)
    store.load()
    store.commit([{"t": "search_tokens", "body": "x" * 100}])
    with sqlite3.connect(tmp_path / "store.db") as conn:
        changed = conn.execute(
            "UPDATE state SET blob = CAST(substr(blob, 1, 40) || x'00' || substr(blob, 42) AS BLOB) "
            "WHERE seq = (SELECT MAX(seq) FROM state)"
        ).rowcount
    assert changed == 1
    _unlock(store)
    with pytest.raises(MemoriesError) as caught:
        store.load(frozenset({"search_tokens"}))
    assert caught.value.code == "store_corrupt"


def test_row_opener_agrees_with_the_single_call() -> None:
    """The batch opener gives the same plaintext, and the same refusal, as xchacha_open."""
    import os

    from engine.crypto.aead import seal

    key = os.urandom(32)
    opener = RowOpener(key)
    for size in (0, 1, 100, 5000, 70_000, 10):
        aad = b"aad" + bytes([size % 256])
        sealed = b"\x01" + seal(key, os.urandom(size), aad)
        plain = opener.open(sealed, 1, aad)
        assert plain == xchacha_open(key, sealed[1:25], sealed[25:], aad) and plain is not None and len(plain) == size
        assert opener.open(sealed, 1, aad + b"!") is None
        flipped = sealed[:30] + bytes([sealed[30] ^ 1]) + sealed[31:] if len(sealed) > 30 else sealed[:-1]
        assert opener.open(flipped, 1, aad) is None
    assert opener.open(b"\x01short", 1, b"") is None


def _reseal_checkpoint_over(path: Path, master: bytes, rows: list[tuple[int, bytes]]) -> None:
    """Write ``rows`` as the state and re-seal the checkpoint over their chain: only someone
    holding the master key could, so each row's own AEAD is all that is left to catch a change."""
    from engine.crypto.aead import open_sealed, seal
    from engine.store.database import _CHAIN_START, _CHECKPOINT_AAD, _ROW_VERSION, _chain_next, encode_record

    with sqlite3.connect(path) as conn:
        conn.executemany("UPDATE state SET blob = ? WHERE seq = ?", [(blob, seq) for seq, blob in rows])
        chain = _CHAIN_START
        for row_seq, row_blob in rows:
            chain = _chain_next(chain, row_seq, row_blob)
        sealed = conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0]
        checkpoint = decode_record(open_sealed(master, sealed[1:], _CHECKPOINT_AAD))
        checkpoint["chain"] = chain
        conn.execute(
            "UPDATE checkpoints SET blob = ? WHERE id = 1",
            (_ROW_VERSION + seal(master, encode_record(checkpoint), _CHECKPOINT_AAD),),
        )


def _state_rows(path: Path) -> list[tuple[int, bytes]]:
    with sqlite3.connect(path) as conn:
        rows: list[tuple[int, bytes]] = conn.execute("SELECT seq, blob FROM state ORDER BY seq").fetchall()
    return rows


def test_records_of_a_deferred_kind_are_written_as_sealed_rows_the_unlock_does_not_open(tmp_path: Path) -> None:
    """SR-6, issue 20: after a load that defers a kind, commits seal its records as deferred rows;
    the next load chains them with every other row but leaves them sealed for their reader,
    and a load that does not defer the kind (or is told to open them) decodes them as records."""
    kinds = frozenset({"search_tokens"})
    store = _store(tmp_path, records=2)
    _unlock(store)
    store.load(kinds)
    token = {"t": "search_tokens", "rev": b"\x02" * 32, "v": "x", "body": "tokens"}
    store.commit([token, {"t": "note", "n": 2}])
    assert [blob[:1] for _, blob in _state_rows(tmp_path / "store.db")][-2:] == [b"\x02", b"\x01"]

    loaded = store.load(kinds)
    assert [r["n"] for _, r in loaded.records] == [0, 1, 2]
    assert loaded.count == 4 and loaded.deferred == {}
    assert loaded.sealed is not None and len(loaded.sealed) == 1
    [(seq, plain)] = loaded.sealed.open()
    assert decode_record(plain) == token and seq == loaded.last_seq - 1
    # The cursor counts the sealed row: a commit after this load still matches the checkpoint.
    store.commit([{"t": "note", "n": 3}])
    for opened in (store.load(), store.load(kinds, open_deferred=True)):
        assert opened.sealed is None
    assert [r.get("t") for _, r in store.load().records] == ["note", "note", "search_tokens", "note", "note"]
    [(_, again)] = store.load(kinds, open_deferred=True).deferred["search_tokens"]
    assert decode_record(again) == token


def test_a_sealed_deferred_row_that_fails_its_aead_is_refused_by_its_reader(tmp_path: Path) -> None:
    """ST-1: a deferred row with a chain that agrees (re-sealed checkpoint) but a bad tag: the
    unlock answers (it does not open the row), its reader's open refuses with store_corrupt,
    and a load told to open deferred rows refuses at once."""
    kinds = frozenset({"search_tokens"})
    path = tmp_path / "store.db"
    store = _store(tmp_path, records=2)
    _unlock(store)
    store.load(kinds)
    store.commit([{"t": "search_tokens", "body": "x" * 50}])
    rows = _state_rows(path)
    seq, blob = rows[-1]
    rows[-1] = (seq, blob[:-1] + bytes([blob[-1] ^ 1]))
    _reseal_checkpoint_over(path, store.check_password(PASSWORD), rows)
    _unlock(store)
    loaded = store.load(kinds)
    assert loaded.sealed is not None
    with pytest.raises(MemoriesError) as caught:
        loaded.sealed.open()
    assert caught.value.code == "store_corrupt"
    for kinds_now, open_now in ((kinds, True), (frozenset[str](), False)):
        with pytest.raises(MemoriesError) as refused:
            store.load(kinds_now, open_deferred=open_now)
        assert refused.value.code == "store_corrupt"


def test_a_row_moved_between_opened_and_sealed_does_not_authenticate(tmp_path: Path) -> None:
    """ST-1: the row version is in the AEAD's associated data: relabelling an ordinary row as
    deferred (so an unlock would skip it), or back, fails even with a chain that agrees."""
    kinds = frozenset({"search_tokens"})
    path = tmp_path / "store.db"
    store = _store(tmp_path, records=2)
    _unlock(store)
    store.load(kinds)
    store.commit([{"t": "search_tokens", "body": "y"}])
    master = store.check_password(PASSWORD)
    original = _state_rows(path)
    for target, label in ((0, b"\x02"), (len(original) - 1, b"\x01")):
        rows = list(original)
        seq, blob = rows[target]
        rows[target] = (seq, label + blob[1:])
        _reseal_checkpoint_over(path, master, rows)
        _unlock(store)
        with pytest.raises(MemoriesError) as caught:
            loaded = store.load(kinds)
            if loaded.sealed is not None:
                loaded.sealed.open()
        assert caught.value.code == "store_corrupt"
        _reseal_checkpoint_over(path, master, original)


@pytest.mark.parametrize("deferred", [False, True], ids=["decoded", "deferred"])
def test_a_row_that_fails_its_aead_is_refused_even_when_the_chain_agrees(tmp_path: Path, deferred: bool) -> None:
    """ST-1: every version-1 row is opened (AEAD) before the unlock answers, on the opening
    thread too: ordinary kinds, and deferred kinds written before deferred rows existed (the
    load before this commit deferred nothing, so the token record is a version-1 row).

    The checkpoint is re-sealed with the master key over the tampered row, so the chain
    agrees and only the row's own authentication can catch it.
    """
    store = _store(tmp_path, records=3)
    _unlock(store)
    store.load()
    store.commit([{"t": "search_tokens", "body": "x"}, {"t": "note", "n": 3}])
    rows = _state_rows(tmp_path / "store.db")
    assert {blob[:1] for _, blob in rows} == {b"\x01"}
    target = len(rows) - (2 if deferred else 1)
    seq, blob = rows[target]
    rows[target] = (seq, blob[:-1] + bytes([blob[-1] ^ 1]))  # the row's tag no longer matches
    _reseal_checkpoint_over(tmp_path / "store.db", store.check_password(PASSWORD), rows)
    for kinds in (frozenset(), frozenset({"search_tokens"})):
        _unlock(store)
        with pytest.raises(MemoriesError) as caught:
            store.load(kinds)
        assert caught.value.code == "store_corrupt"


def test_a_row_of_a_newer_version_is_refused_as_newer_not_as_corrupt(tmp_path: Path) -> None:
    """API-8: a state row of a version this Memories does not know (a later format, chained and
    checkpointed like every row) refuses the unlock with store_version, saying to update,
    instead of calling the store corrupt; nothing is written."""
    path = tmp_path / "store.db"
    store = _store(tmp_path, records=2)
    _unlock(store)
    store.load()
    store.commit([{"t": "note", "n": 2}])
    rows = _state_rows(path)
    seq, blob = rows[-1]
    rows[-1] = (seq, b"\x08" + blob[1:])  # versions 1-7 are known (3-7: compressed, issue 32)
    _reseal_checkpoint_over(path, store.check_password(PASSWORD), rows)
    before = path.read_bytes()
    for kinds in (frozenset[str](), frozenset({"search_tokens"})):
        _unlock(store)
        with pytest.raises(MemoriesError) as caught:
            store.load(kinds)
        assert caught.value.code == "store_version"
        assert "newer Memories" in caught.value.message and "update" in caught.value.message
    assert path.read_bytes() == before
