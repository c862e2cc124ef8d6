"""A standby's copy of its primary's sealed rows (CT-4): no key, only ciphertext and cursors.

The standby asks ``/v1/replica/rows`` for the rows after its cursors (state rows by commit
sequence, content rows by their own sequence) and writes them as they are into its own
store — SQLite (DIR/store/store.db) or PostgreSQL — with the header and, once a batch reaches
the primary's last commit, the primary's sealed checkpoint. Rows must continue the copy
without a gap; anything else is refused and nothing is written.

What it copied is verified in full when the operator promotes the standby: promotion unlocks
the copy with the operator password, which opens every row (AEAD) and checks the hash chain
against the sealed checkpoint (engine/store/database.py) before the standby takes over.
"""

from __future__ import annotations

import base64
import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Protocol

from engine.errors import MemoriesError
from engine.store.database import SCHEMA

__all__ = ["ReplicaTarget", "SqliteTarget", "PgTarget", "decode_batch", "Batch"]


class Batch:
    """One answer of ``/v1/replica/rows``, decoded and checked for shape."""

    def __init__(self, data: Any) -> None:
        try:
            self.state = [
                (int(r["seq"]), base64.b64decode(r["blob"], validate=True)) for r in data["rows"] if r["table"] == "state"
            ]
            self.content = [
                (int(r["seq"]), base64.b64decode(r["blob"], validate=True)) for r in data["rows"] if r["table"] == "content"
            ]
            self.last_seq = int(data["last_seq"])
            self.last_content_seq = int(data["last_content_seq"])
            self.checkpoint = base64.b64decode(data["checkpoint"], validate=True)
            fmt, version, kdf, sealed = data["header"]
            self.header = (str(fmt), int(version), base64.b64decode(kdf, validate=True), base64.b64decode(sealed, validate=True))
        except (KeyError, TypeError, ValueError):
            raise MemoriesError("protocol_error", "The primary sent a malformed replica batch; nothing was copied.") from None


def decode_batch(data: Any) -> Batch:
    return Batch(data)


def encode_batch(rows: dict[str, Any]) -> dict[str, Any]:
    """The wire form of ``replica_rows`` (engine/store/database.py) for ``/v1/replica/rows``."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    fmt, version, kdf, sealed = rows["header"]
    return {
        "rows": [{"table": "state", "seq": s, "blob": b64(b)} for s, b in rows["state"]]
        + [{"table": "content", "seq": s, "blob": b64(b)} for s, b in rows["content"]],
        "checkpoint": b64(rows["checkpoint"]),
        "last_seq": rows["last_seq"],
        "last_content_seq": rows["last_content_seq"],
        "header": [fmt, version, b64(kdf), b64(sealed)],
    }


class ReplicaTarget(Protocol):
    def position(self) -> tuple[int, int]: ...

    def apply(self, batch: Batch) -> None: ...

    def close(self) -> None: ...


def _check_continues(batch: Batch, last_seq: int) -> None:
    expected = last_seq
    for seq, _ in batch.state:
        expected += 1
        if seq != expected:
            raise MemoriesError("sync_rejected", "The primary's rows do not continue this copy; nothing was copied.")


def _complete(batch: Batch, last_seq: int) -> bool:
    top = batch.state[-1][0] if batch.state else last_seq
    return top == batch.last_seq


class SqliteTarget:
    """The standby's store file, written row by row as copied (one transaction per batch)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        new = not path.exists()
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("PRAGMA journal_mode=WAL")
        if new:
            self.conn.executescript(SCHEMA)
            path.chmod(0o600)

    def position(self) -> tuple[int, int]:
        state = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM state").fetchone()[0]
        content = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0]
        return int(state), int(content)

    def apply(self, batch: Batch) -> None:
        last_seq, _ = self.position()
        _check_continues(batch, last_seq)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute(
                "INSERT OR IGNORE INTO header (id, format, version, kdf, sealed_master) VALUES (1, ?, ?, ?, ?)", batch.header
            )
            self.conn.executemany("INSERT OR IGNORE INTO content (seq, blob) VALUES (?, ?)", batch.content)
            self.conn.executemany("INSERT INTO state (seq, blob) VALUES (?, ?)", batch.state)
            if _complete(batch, last_seq):
                self.conn.execute("INSERT OR REPLACE INTO checkpoints (id, blob) VALUES (1, ?)", (batch.checkpoint,))
            self.conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


class PgTarget:
    """The standby's PostgreSQL database, written like ``SqliteTarget``."""

    def __init__(self, pool: Any) -> None:
        from engine.store.postgres import migrate

        self.pool = pool
        with pool.connection() as conn:
            migrate(conn)

    def position(self) -> tuple[int, int]:
        with self.pool.connection() as conn:
            state = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM state").fetchone()[0]
            content = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM content").fetchone()[0]
        return int(state), int(content)

    def apply(self, batch: Batch) -> None:
        last_seq, _ = self.position()
        _check_continues(batch, last_seq)
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "INSERT INTO header (id, format, version, kdf, sealed_master) VALUES (1, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                batch.header,
            )
            if batch.content:
                cur.executemany("INSERT INTO content (seq, blob) VALUES (%s, %s) ON CONFLICT (seq) DO NOTHING", batch.content)
            if batch.state:
                cur.executemany("INSERT INTO state (seq, blob) VALUES (%s, %s)", batch.state)
            if _complete(batch, last_seq):
                cur.execute(
                    "INSERT INTO checkpoints (id, blob) VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET blob = EXCLUDED.blob",
                    (batch.checkpoint,),
                )

    def close(self) -> None:
        pass


def open_target(store_dir: Path, store_url: str | None) -> ReplicaTarget:
    """The standby's store: the PostgreSQL database ``store_url`` names, else DIR/store/store.db."""
    from engine.config import Paths
    from engine.store.postgres import is_postgres_url, pg_pool

    if store_url and is_postgres_url(store_url):
        return PgTarget(pg_pool(store_url))
    return SqliteTarget(Paths(store_dir).store)
