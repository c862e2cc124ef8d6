"""The same sealed store on PostgreSQL (CT-3): for a Center whose team outgrew one disk.

The engine's store is a narrow interface over four tables — ``header``, ``state(seq, blob)``,
``content(seq, blob)``, ``checkpoints`` — and every byte in them is sealed or hashed by the
engine before it reaches the database (engine/store/database.py). ``PgStoreFile`` keeps that
format and all of ``StoreFile``'s crypto (sealing, the checkpoint chain, deferred rows) and
replaces only the row access: psycopg 3 with a connection pool, one transaction per commit
(PostgreSQL's default ``synchronous_commit=on`` makes it durable before it is acknowledged),
and a session advisory lock held on a connection of its own so that two Centers never write
one database (the SQLite store's writer lock, ST-7).

Migrations: ``memories_schema(version)`` names the schema version; ``_MIGRATIONS`` are applied
in order inside one transaction, under an advisory lock, so concurrent starts agree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.crypto.aead import new_key, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import KdfParams, derive_key
from engine.errors import MemoriesError
from engine.store.database import (
    _CHECKPOINT_AAD,
    _ROW_VERSION,
    FORMAT_NAME,
    FORMAT_VERSION,
    StoreFile,
    _header_aad,
    _ReadRows,
    _state_aad,
    chain_over,
    encode_record,
    read_state_rows,
)

__all__ = ["PgStoreFile", "create_pg_store", "pg_store_exists", "migrate", "SCHEMA_VERSION", "is_postgres_url", "pg_pool"]

SCHEMA_VERSION = 1
_MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE header (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            format TEXT NOT NULL,
            version INTEGER NOT NULL,
            kdf BYTEA NOT NULL,
            sealed_master BYTEA NOT NULL
        );
        CREATE TABLE state (seq BIGINT PRIMARY KEY, blob BYTEA NOT NULL);
        CREATE TABLE content (seq BIGINT PRIMARY KEY, blob BYTEA NOT NULL);
        CREATE TABLE checkpoints (id INTEGER PRIMARY KEY CHECK (id = 1), blob BYTEA NOT NULL);
        """,
    ),
)
# Advisory lock keys (any two distinct 64-bit numbers; "mem" "ctr" in ASCII).
_MIGRATE_LOCK = 0x6D656D_01
_WRITER_LOCK = 0x6D656D_02


def is_postgres_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:  # the `center` extra is not installed
        raise MemoriesError(
            "invalid_input", "The PostgreSQL store needs psycopg; install Memories with its `center` extra."
        ) from None
    return psycopg


def _unavailable(exc: BaseException) -> MemoriesError:
    # Never the DSN or the server's text (it can quote the statement's parameters).
    return MemoriesError("center_unavailable", f"The PostgreSQL store could not be used ({type(exc).__name__}).")


def pg_pool(dsn: str, *, max_size: int = 8) -> Any:
    """A connection pool for ``dsn``, open and checked (``center_unavailable`` otherwise)."""
    _driver()
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(dsn, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True})
    try:
        pool.open(wait=True, timeout=15)
    except Exception as exc:
        with contextlib.suppress(Exception):
            pool.close()
        raise _unavailable(exc) from None
    return pool


def migrate(conn: Any) -> int:
    """Bring the schema to ``SCHEMA_VERSION``; returns the version found before."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS memories_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) FROM memories_schema").fetchone()
        found = int(row[0]) if row and row[0] is not None else 0
        if found > SCHEMA_VERSION:
            raise MemoriesError("store_version")
        for version, sql in _MIGRATIONS:
            if version > found:
                conn.execute(sql)
                conn.execute("INSERT INTO memories_schema (version) VALUES (%s)", (version,))
    return found


def pg_store_exists(pool: Any) -> bool:
    """Whether the database holds an initialized store (a header row)."""
    with pool.connection() as conn:
        migrate(conn)
        return conn.execute("SELECT 1 FROM header WHERE id = 1").fetchone() is not None


def create_pg_store(pool: Any, password: str, kdf: KdfParams, initial_records: Sequence[dict[str, Any]]) -> bytes:
    """Write a new store's header, first rows and checkpoint in one transaction (ST-8).

    ``already_initialized`` if a header exists; an existing store is never touched."""
    master = new_key()
    kdf_blob = canonical_bytes(kdf.to_dict())
    sealed = seal(derive_key(password, kdf), master, _header_aad(FORMAT_NAME, FORMAT_VERSION, kdf_blob))
    rows: list[tuple[int, bytes]] = []
    for seq, record in enumerate(initial_records, start=1):
        rows.append((seq, _ROW_VERSION + seal(master, encode_record(record), _state_aad(seq))))
    checkpoint = {"v": 1, "last_seq": len(rows), "count": len(rows), "chain": chain_over(rows), "last_content_seq": 0}
    cp_blob = _ROW_VERSION + seal(master, encode_record(checkpoint), _CHECKPOINT_AAD)
    with pool.connection() as conn:
        migrate(conn)
        with conn.transaction():
            inserted = conn.execute(
                "INSERT INTO header (id, format, version, kdf, sealed_master) VALUES (1, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                (FORMAT_NAME, FORMAT_VERSION, kdf_blob, sealed),
            ).rowcount
            if inserted != 1:
                raise MemoriesError("already_initialized")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO state (seq, blob) VALUES (%s, %s)", rows)
            conn.execute("INSERT INTO checkpoints (id, blob) VALUES (1, %s)", (cp_blob,))
    return master


def pg_replica_rows(conn: Any, after: int, content_after: int, limit: int) -> dict[str, Any]:
    """``sqlite_replica_rows`` for PostgreSQL: one REPEATABLE READ snapshot."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        state = conn.execute("SELECT seq, blob FROM state WHERE seq > %s ORDER BY seq LIMIT %s", (after, limit)).fetchall()
        content = conn.execute(
            "SELECT seq, blob FROM content WHERE seq > %s ORDER BY seq LIMIT %s", (content_after, limit)
        ).fetchall()
        last_seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM state").fetchone()[0])
        last_content = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0])
        checkpoint = bytes(conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0])
        header = conn.execute("SELECT format, version, kdf, sealed_master FROM header WHERE id = 1").fetchone()
    return {
        "state": [(int(a), bytes(b)) for a, b in state],
        "content": [(int(a), bytes(b)) for a, b in content],
        "last_seq": last_seq,
        "last_content_seq": last_content,
        "checkpoint": checkpoint,
        "header": (str(header[0]), int(header[1]), bytes(header[2]), bytes(header[3])),
    }


@dataclass
class PgStoreFile(StoreFile):
    """A store whose rows live in PostgreSQL; the crypto is ``StoreFile``'s own."""

    keeps_snapshots = False  # no snapshot table here: the search index is rebuilt at unlock
    keeps_packs = False  # file chunks stay rows: the database server is the only storage here

    pool: Any = None
    # The connection holding the writer's advisory lock for as long as the store is open.
    _holder: Any = field(default=None, repr=False)

    @classmethod
    def open_pool(cls, pool: Any, label: Path) -> PgStoreFile:
        """Open the store in ``pool``'s database; ``not_initialized`` when it has none yet."""
        psycopg = _driver()
        try:
            holder = pool.getconn()
        except Exception as exc:
            raise _unavailable(exc) from None
        try:
            migrate(holder)
            if not holder.execute("SELECT pg_try_advisory_lock(%s)", (_WRITER_LOCK,)).fetchone()[0]:
                raise MemoriesError("store_in_use", "Another Center already serves this PostgreSQL store.")
            row = holder.execute("SELECT format, version, kdf FROM header WHERE id = 1").fetchone()
            if row is None:
                raise MemoriesError("not_initialized")
            if row[0] != FORMAT_NAME or row[1] != FORMAT_VERSION:
                raise MemoriesError("store_corrupt", "The store header is missing or of an unknown format.")
            kdf = KdfParams.from_dict(decode_canonical(bytes(row[2])))
        except MemoriesError:
            pool.putconn(holder)
            raise
        except (psycopg.Error, ValueError, KeyError) as exc:
            pool.putconn(holder)
            raise _unavailable(exc) from None
        store = cls(path=label, conn=None, kdf=kdf, pool=pool)  # type: ignore[arg-type]
        store._holder = holder
        return store

    def close(self) -> None:
        self.wipe()
        holder, self._holder = self._holder, None
        if holder is not None:
            with contextlib.suppress(Exception):
                holder.execute("SELECT pg_advisory_unlock(%s)", (_WRITER_LOCK,))
            with contextlib.suppress(Exception):
                self.pool.putconn(holder)

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        psycopg = _driver()
        try:
            with self.pool.connection() as conn:
                yield conn
        except psycopg.IntegrityError:
            # A row number taken already: another writer, which the writer lock should exclude.
            raise MemoriesError("io_error", "The change could not be written; nothing was changed.") from None
        except psycopg.Error as exc:
            raise _unavailable(exc) from None

    # -- the row access StoreFile delegates ----------------------------------------------
    def _header_row(self) -> tuple[str, int, bytes, bytes]:
        with self._conn() as conn:
            row = conn.execute("SELECT format, version, kdf, sealed_master FROM header WHERE id = 1").fetchone()
        return str(row[0]), int(row[1]), bytes(row[2]), bytes(row[3])

    def _read_rows(self, *, keep_deferred: bool = False) -> _ReadRows:
        with self._conn() as conn:
            rows = [(int(s), bytes(b)) for s, b in conn.execute("SELECT seq, blob FROM state ORDER BY seq").fetchall()]
        return read_state_rows(rows, keep_deferred=keep_deferred)

    def _fetch_rows(self, low: int, high: int) -> list[tuple[int, bytes]]:
        """Deferred rows read again later (``SealedRows`` checks them against the unlock's chain)."""
        with self._conn() as conn:
            fetched = conn.execute("SELECT seq, blob FROM state WHERE seq BETWEEN %s AND %s ORDER BY seq", (low, high))
            return [(int(s), bytes(b)) for s, b in fetched.fetchall()]

    def _state_rows_at(self, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        with self._conn() as conn:
            fetched = conn.execute("SELECT seq, blob FROM state WHERE seq = ANY(%s)", (list(seqs),))
            return [(int(s), bytes(b)) for s, b in fetched.fetchall()]

    def _prefetch(self) -> None:
        with self._db_lock:
            try:
                self._prefetched = self._read_rows()
            except MemoriesError:
                self._prefetched = None

    def _checkpoint_blob(self) -> bytes:
        with self._conn() as conn:
            return bytes(conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0])

    def _max_content_seq(self) -> int:
        with self._conn() as conn:
            return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0])

    def _read_content(self, seqs: Sequence[int]) -> list[bytes]:
        with self._conn() as conn:
            found = dict(conn.execute("SELECT seq, blob FROM content WHERE seq = ANY(%s)", (list(seqs),)).fetchall())
        try:
            return [bytes(found[seq]) for seq in seqs]
        except KeyError:
            raise MemoriesError("store_corrupt", "A content chunk is missing.") from None

    def _write_commit(self, content: Sequence[tuple[int, bytes]], rows: list[tuple[int, bytes]], cp_blob: bytes) -> None:
        # One pipeline: BEGIN, the inserts, the checkpoint and COMMIT go out in one round trip,
        # and the commit is acknowledged only once PostgreSQL has made it durable.
        with self._conn() as conn, conn.pipeline(), conn.transaction(), conn.cursor() as cur:
            if content:
                cur.executemany("INSERT INTO content (seq, blob) VALUES (%s, %s)", [(s, bytes(b)) for s, b in content])
            if rows:
                cur.executemany("INSERT INTO state (seq, blob) VALUES (%s, %s)", rows)
            cur.execute("UPDATE checkpoints SET blob = %s WHERE id = 1", (cp_blob,))

    def write_content(self, content: Sequence[tuple[int, bytes | bytearray]]) -> None:
        with self._db_lock:
            self._key()
            with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO content (seq, blob) VALUES (%s, %s)", [(s, bytes(b)) for s, b in content])
            top = max((s for s, _ in content), default=0)
            with self._content_lock:
                if top > self._cursor.last_content_seq:
                    self._cursor.last_content_seq = top

    def orphan_content(self, limit: int) -> list[int]:
        referenced, top = self._loaded_refs
        with self._db_lock, self._conn() as conn:
            found: list[int] = []
            for (seq,) in conn.execute("SELECT seq FROM content WHERE seq <= %s ORDER BY seq", (top,)):
                if seq not in referenced:
                    found.append(int(seq))
                    if len(found) >= limit:
                        break
            return found

    def discard_content(self, seqs: Sequence[int]) -> bool:
        with self._db_lock:
            try:
                with self._conn() as conn:
                    conn.execute("DELETE FROM content WHERE seq = ANY(%s)", (list(seqs),))
            except MemoriesError:
                return False
        return True

    def keep_reserve(self) -> bool:
        return True  # the database server manages its own space

    def reusable_bytes(self) -> int:
        return 0

    def replica_rows(self, after: int, content_after: int, limit: int) -> dict[str, Any]:
        with self._conn() as conn:
            return pg_replica_rows(conn, after, content_after, limit)
