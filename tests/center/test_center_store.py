"""CT-3: the sealed store behind one interface on SQLite and PostgreSQL, and the standby's raw
copy of it (CT-4). One suite, parametrized over both stores."""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.center.members import Members
from engine.center.replica import PgTarget, SqliteTarget, decode_batch, encode_batch
from engine.crypto.kdf import calibrate
from engine.errors import MemoriesError
from engine.store.database import StoreFile, create_store
from engine.store.postgres import SCHEMA_VERSION, PgStoreFile, create_pg_store, migrate, pg_pool
from tests.center.support import pg_database

PASSWORD = "store password"
FIRST = [{"t": "note", "n": i, "body": f"first {i}"} for i in range(3)]


@dataclass
class Opened:
    store: StoreFile
    raw: Any  # sqlite3 path or a psycopg pool: how the test changes rows behind the store's back
    kind: str
    reopen: Any


def _sqlite(tmp: Path) -> Generator[Opened, None, None]:
    path = tmp / "store.db"
    master = create_store(path, PASSWORD, calibrate(), FIRST)
    store = StoreFile.open(path)
    store.install_master(master)
    store.load()  # sets the write cursor, as an unlock does
    try:
        yield Opened(store, path, "sqlite", lambda: StoreFile.open(path))
    finally:
        store.close()


def _postgres() -> Iterator[Opened]:
    with pg_database() as url:
        pool = pg_pool(url)
        try:
            master = create_pg_store(pool, PASSWORD, calibrate(), FIRST)
            store = PgStoreFile.open_pool(pool, Path("pg"))
            store.install_master(master)
            store.load()
            try:
                yield Opened(store, pool, "postgresql", lambda: PgStoreFile.open_pool(pool, Path("pg")))
            finally:
                store.close()
        finally:
            pool.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opened]:
    yield from (_sqlite(tmp_path) if request.param == "sqlite" else _postgres())


def _execute(opened: Opened, sql: str) -> None:
    if opened.kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(opened.raw)
        conn.execute(sql)
        conn.commit()
        conn.close()
    else:
        with opened.raw.connection() as conn:
            conn.execute(sql)


def test_ct3_commit_and_load_round_trip(opened: Opened) -> None:
    store = opened.store
    seqs = store.commit([{"t": "note", "n": 10}], [(1, b"sealed chunk")])
    assert seqs == [4]
    loaded = store.load()
    assert [r for _, r in loaded.records][-1] == {"t": "note", "n": 10}
    assert loaded.last_seq == 4 and loaded.last_content_seq == 1
    assert store.read_content([1]) == [b"sealed chunk"]
    with pytest.raises(MemoriesError) as missing:
        store.read_content([99])
    assert missing.value.code == "store_corrupt"


def test_ct3_wrong_password_and_locked_store(opened: Opened) -> None:
    with pytest.raises(MemoriesError) as wrong:
        opened.store.check_password("nope")
    assert wrong.value.code == "wrong_password"
    master = opened.store.check_password(PASSWORD)
    assert len(master) == 32
    opened.store.wipe()
    with pytest.raises(MemoriesError) as locked:
        opened.store.commit([{"t": "note"}])
    assert locked.value.code == "locked"


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE state SET blob = blob || {concat} WHERE seq = 2",
        "DELETE FROM state WHERE seq = 3",
    ],
)
def test_ct3_a_row_changed_in_the_database_fails_the_unlock(opened: Opened, sql: str) -> None:
    concat = "x'00'" if opened.kind == "sqlite" else "'\\x00'::bytea"
    _execute(opened, sql.format(concat=concat))
    with pytest.raises(MemoriesError) as caught:
        opened.store.load()
    assert caught.value.code == "store_corrupt"


def test_ct3_replica_rows_copy_into_either_store_and_unlock_there(opened: Opened, tmp_path: Path) -> None:
    """CT-4's copy: sealed rows only, written raw, then the copy opens with the same password."""
    opened.store.commit([{"t": "note", "n": 20}], [(1, b"c1"), (2, b"c2")])
    rows = opened.store.replica_rows(0, 0, 2)
    assert [s for s, _ in rows["state"]] == [1, 2] and rows["last_seq"] == 4
    target = SqliteTarget(tmp_path / "copy" / "store.db")
    first = decode_batch(json.loads(json.dumps(encode_batch(rows))))
    target.apply(first)
    assert target.position() == (2, 2)
    with pytest.raises(MemoriesError) as gap:  # the same batch again does not continue the copy
        target.apply(first)
    assert gap.value.code == "sync_rejected"
    target.apply(decode_batch(encode_batch(opened.store.replica_rows(2, 2, 100))))
    assert target.position() == (4, 2)
    target.close()
    copy = StoreFile.open(tmp_path / "copy" / "store.db")
    try:
        copy.install_master(copy.check_password(PASSWORD))
        assert [r for _, r in copy.load().records] == [r for _, r in opened.store.load().records]
        assert copy.read_content([2]) == [b"c2"]
    finally:
        copy.close()


def test_ct3_postgres_target_takes_a_sqlite_primary(tmp_path: Path) -> None:
    gen = _sqlite(tmp_path)
    source = next(gen)
    try:
        with pg_database() as url:
            pool = pg_pool(url)
            try:
                target = PgTarget(pool)
                target.apply(decode_batch(encode_batch(source.store.replica_rows(0, 0, 100))))
                copy = PgStoreFile.open_pool(pool, Path("pg"))
                try:
                    copy.install_master(copy.check_password(PASSWORD))
                    assert [r for _, r in copy.load().records] == FIRST
                finally:
                    copy.close()
            finally:
                pool.close()
    finally:
        gen.close()


def test_ct3_postgres_schema_version_writer_lock_and_newer_schema() -> None:
    with pg_database() as url:
        pool = pg_pool(url)
        try:
            with pytest.raises(MemoriesError) as none:
                PgStoreFile.open_pool(pool, Path("pg"))
            assert none.value.code == "not_initialized"
            create_pg_store(pool, PASSWORD, calibrate(), FIRST)
            with pytest.raises(MemoriesError) as twice:
                create_pg_store(pool, PASSWORD, calibrate(), FIRST)
            assert twice.value.code == "already_initialized"
            with pool.connection() as conn:
                assert conn.execute("SELECT max(version) FROM memories_schema").fetchone()[0] == SCHEMA_VERSION
                assert migrate(conn) == SCHEMA_VERSION  # idempotent
            store = PgStoreFile.open_pool(pool, Path("pg"))
            other_pool = pg_pool(url)
            try:
                with pytest.raises(MemoriesError) as busy:
                    PgStoreFile.open_pool(other_pool, Path("pg"))
                assert busy.value.code == "store_in_use"
            finally:
                other_pool.close()
            store.close()
            with pool.connection() as conn:
                conn.execute("INSERT INTO memories_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
            with pytest.raises(MemoriesError) as newer:
                PgStoreFile.open_pool(pool, Path("pg"))
            assert newer.value.code == "store_version"
        finally:
            pool.close()


def test_unreachable_postgres_is_a_typed_error_without_the_url() -> None:
    with pytest.raises(MemoriesError) as caught:
        pg_pool("postgresql://nobody:hunter2secret@127.0.0.1:1/none?connect_timeout=1")
    assert caught.value.code == "center_unavailable" and "hunter2secret" not in caught.value.message


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_json | st.fixed_dictionaries({"rows": _json, "last_seq": _json, "checkpoint": _json, "header": _json}))
def test_malformed_replica_batches_are_typed_errors(data: Any) -> None:
    try:
        decode_batch(data)
    except MemoriesError as exc:
        assert exc.code == "protocol_error"


@pytest.mark.parametrize(
    "content",
    ["not json", "[]", '{"v": 2, "grants": []}', '{"v": 1, "grants": [{"name": "x"}]}', '{"v": 1, "grants": [1]}'],
)
def test_malformed_members_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "members.json"
    path.write_text(content)
    os.chmod(path, 0o600)
    with pytest.raises(MemoriesError) as caught:
        Members(path)
    assert caught.value.code == "invalid_input"


def test_ct4_chunks_in_pack_files_reach_a_standby_as_rows(tmp_path: Path) -> None:
    """CT-4, issue 32: a file's chunks in a pack file beside a SQLite primary travel to a standby as
    the sealed bytes they are, in row order with the rows' chunks and within the batch's limit;
    the copy holds them as content rows and reads them back."""
    import mmap

    from engine.store.packs import aligned

    gen = _sqlite(tmp_path)
    source = next(gen)
    try:
        store = source.store
        store.commit([{"t": "note", "n": 30}], [(1, b"row chunk")])
        seqs = store.claim_content(3)
        blobs = [os.urandom(100), os.urandom(5000), os.urandom(50)]
        batch = mmap.mmap(-1, aligned(sum(len(b) for b in blobs)))
        places, at = [], 0
        for seq, blob in zip(seqs, blobs, strict=True):
            batch[at : at + len(blob)] = blob
            places.append((seq, seqs[0], at, len(blob)))
            at += len(blob)
        writer = store.open_pack(seqs[0])
        with memoryview(batch) as view:
            assert writer.append(view) == 0
        writer.sync()
        writer.close()
        store.write_packed(places)
        store.commit([{"t": "note", "n": 31, "body_seqs": seqs}])
        assert store.read_content(seqs) == blobs

        first = store.replica_rows(0, 0, 2)
        assert first["content"] == [(1, b"row chunk"), (seqs[0], blobs[0])]
        assert first["last_content_seq"] == seqs[-1]
        target = SqliteTarget(tmp_path / "copy" / "store.db")
        target.apply(decode_batch(encode_batch(store.replica_rows(0, 0, 100))))
        target.close()
        copy = StoreFile.open(tmp_path / "copy" / "store.db")
        try:
            copy.install_master(copy.check_password(PASSWORD))
            assert [r for _, r in copy.load().records] == [r for _, r in store.load().records]
            assert copy.read_content([1, *seqs]) == [b"row chunk", *blobs]
        finally:
            copy.close()
    finally:
        gen.close()
