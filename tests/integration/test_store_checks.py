"""Each store check fails on its own, and a write the disk refuses changes nothing (ST-1, ST-5).

The checkpoint compares three things with the state rows: the hash chain, the row count and
the last sequence number. Tampering that only someone with the master key could do (the
checkpoint is sealed) is the only way to change one of them alone, so the tests re-seal it
with the known password and change exactly one field.

The failed write is a real kernel refusal under SQLite: the engine's RLIMIT_FSIZE is lowered
(prlimit on the running daemon), so SQLite's next write past that offset fails with EFBIG,
which SQLite reports as SQLITE_FULL, as on a full disk (KeePassXC's FailDevice does the same
job for its own file layer). CPython ignores SIGXFSZ, so the engine sees the error, not the
signal.
"""

from __future__ import annotations

import hashlib
import resource
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.crypto.aead import open_sealed, seal
from engine.store.database import _CHECKPOINT_AAD, _ROW_VERSION, StoreFile, decode_record, encode_record
from tests.helpers import PASSWORD, Cli, require


def _reseal_checkpoint(home: Path, change: Callable[[dict[str, Any]], None]) -> None:
    store = StoreFile.open(home / "store.db")
    try:
        master = store.check_password(PASSWORD)
        blob = store.conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0]
        checkpoint = decode_record(open_sealed(master, blob[1:], _CHECKPOINT_AAD))
        change(checkpoint)
        resealed = _ROW_VERSION + seal(master, encode_record(checkpoint), _CHECKPOINT_AAD)
        store.conn.execute("UPDATE checkpoints SET blob = ? WHERE id = 1", (resealed,))
    finally:
        store.close()


def _prepared(vault: Cli) -> Cli:
    for i in range(3):
        vault.put(f"note {i}", "body")
    vault.stop()
    return vault


def _set(name: str, value: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def change(checkpoint: dict[str, Any]) -> None:
        checkpoint[name] = value(checkpoint[name])

    return change


def test_resealed_but_unchanged_checkpoint_unlocks(vault: Cli) -> None:
    """Control for the tests below: re-sealing the checkpoint as it is keeps the store valid."""
    _reseal_checkpoint(_prepared(vault).home, lambda checkpoint: None)
    vault.unlock()
    assert [item["title"] for item in vault.ok("list")["items"]] == ["note 2", "note 1", "note 0"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chain", lambda chain: hashlib.sha256(chain).digest()),
        ("count", lambda count: count + 1),
        ("last_seq", lambda last: last + 1),
    ],
    ids=["chain", "count", "last_seq"],
)
def test_each_checkpoint_comparison_alone_detects_its_tampering(vault: Cli, field: str, value: Callable[[Any], Any]) -> None:
    """ST-5: a checkpoint that differs from the state rows in only its chain, only its count or
    only its last sequence number is store_corrupt at unlock, and the vault stays locked."""
    _reseal_checkpoint(_prepared(vault).home, _set(field, value))
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "store_corrupt"
    assert vault.ok("status")["state"] == "locked"


def test_missing_checkpoint_row_is_store_corrupt_not_a_crash(vault: Cli) -> None:
    """ST-5: a store whose checkpoint row was deleted is refused with store_corrupt; the engine
    keeps answering (the row's absence is not an unexpected exception)."""
    home = _prepared(vault).home
    conn = sqlite3.connect(home / "store.db")
    conn.execute("DELETE FROM checkpoints")
    conn.commit()
    conn.close()
    error = vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")
    assert error["code"] == "store_corrupt", error
    assert vault.ok("status")["state"] == "locked"


# -- a write the disk refuses ------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    records: list[tuple[int, dict[str, Any]]]
    last_seq: int
    count: int
    chain: bytes
    checkpoint_blob: bytes
    content: list[tuple[int, bytes]]


def _snapshot(home: Path) -> Snapshot:
    """What a fresh open of the store file reads (works beside a running engine: WAL readers)."""
    store = StoreFile.open(home / "store.db")
    try:
        store.install_master(store.check_password(PASSWORD))
        loaded = store.load()
        blob = store.conn.execute("SELECT blob FROM checkpoints WHERE id = 1").fetchone()[0]
        content = store.conn.execute("SELECT seq, blob FROM content ORDER BY seq").fetchall()
    finally:
        store.close()
    return Snapshot(loaded.records, loaded.last_seq, loaded.count, loaded.chain, bytes(blob), content)


def _wait_for_background_work(vault: Cli) -> None:
    """Until the engine's follow-up jobs (search tokens, postings, the signature check) are done:
    they commit rows of their own, seconds after a write on a loaded machine."""
    deadline = time.monotonic() + 120
    while [j for j in vault.ok("status")["jobs"] if j["state"] in ("running", "waiting")]:
        assert time.monotonic() < deadline, vault.ok("status")["jobs"]
        time.sleep(0.2)


def _file_limit(pid: int, limit: int) -> tuple[int, int]:
    old = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, old[1]))
    return old


def test_a_write_failing_at_the_sqlite_file_layer_rolls_back_and_writes_nothing(vault: Cli, tmp_path: Path) -> None:
    """ST-5: when the disk refuses a write in the middle of a commit, the request fails with a
    typed store error, the engine's view is unchanged, the file reopens with exactly the
    previous rows, content and checkpoint, and the next write (disk fixed) works and survives
    a restart (so nothing of the failed commit leaked into the write cursor either)."""
    require(hasattr(resource, "prlimit"), "resource.prlimit (Linux) lowers the engine's file size limit")
    for i in range(2):
        vault.put(f"kept {i}", "body")
    pid = vault.daemon_pid()
    assert pid is not None
    _wait_for_background_work(vault)  # a token or postings commit after `before` is not the failed write
    before = _snapshot(vault.home)
    listed = vault.ok("list")["items"]
    files = [vault.home / "store.db", vault.home / "store.db-wal"]
    limit = max(p.stat().st_size for p in files if p.exists()) + 64 * 1024
    # 1 MiB of body (four 256 KiB chunks) cannot fit below the limit: SQLite's write fails mid-commit.
    big = tmp_path / "big.md"
    big.write_text("".join(f"{i:08d} a line of a body too large for the disk\n" for i in range(24 * 1024)))
    old = _file_limit(pid, limit)
    try:
        error = vault.err("put", "--title", "too big for the disk", "--body-file", str(big))
    finally:
        resource.prlimit(pid, resource.RLIMIT_FSIZE, old)
    assert error["code"] in ("io_error", "disk_full"), error
    assert "nothing was changed" in error["message"].lower() or error["code"] == "disk_full"
    assert vault.ok("list")["items"] == listed
    assert _snapshot(vault.home) == before
    # The disk works again: the next write lands, and the store still authenticates after a restart.
    after = vault.put("after the failure", "body")
    vault.stop()
    vault.unlock()
    titles = [item["title"] for item in vault.ok("list")["items"]]
    assert titles == ["after the failure", "kept 1", "kept 0"]
    assert vault.ok("get", after["id"])["body"] == "body"
    assert _snapshot(vault.home).records[: len(before.records)] == before.records
