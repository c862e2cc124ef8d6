"""A new store's pages are 16 KiB (issue 32: rows appended in order fill a page with whole rows,
and what does not fit is lost once per page); a store made with SQLite's 4 KiB pages before
keeps them and works as it did."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.crypto.kdf import calibrate
from engine.store import database as db
from engine.store.database import StoreFile, create_store

PASSWORD = "page size test password"


def _page_size(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def _records(count: int, start: int = 0) -> list[dict[str, object]]:
    # ~600-byte rows of varied words, as revision rows are: several to a page, none alone.
    words = ["harbor", "lantern", "meadow", "长期", "记忆", "passport", "marathon", "kyoto", "budget", "garden"]
    return [
        {"t": "note", "n": i, "text": " ".join(words[(i * 7 + j * 3) % len(words)] + str(i * j % 97) for j in range(90))}
        for i in range(start, start + count)
    ]


def _reopen(path: Path) -> tuple[StoreFile, list[dict[str, object]]]:
    store = StoreFile.open(path)
    store.install_master(store.check_password(PASSWORD))
    return store, [record for _, record in store.load(frozenset()).records]


def test_a_new_store_has_16_kib_pages_and_fills_them(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish"}])
    assert _page_size(path) == db.STORE_PAGE_SIZE == 16384
    store, _ = _reopen(path)
    for start in range(0, 1200, 200):
        store.commit(_records(200, start))
    store.close()
    conn = sqlite3.connect(path)
    try:
        pages, payload, unused = conn.execute(
            "SELECT count(*), sum(payload), sum(unused) FROM dbstat WHERE name = 'state' AND pagetype = 'leaf'"
        ).fetchone()
    finally:
        conn.close()
    assert pages > 10 and unused < 0.05 * (payload + unused)  # whole rows to a page, little left over
    store, records = _reopen(path)
    store.close()
    assert records == [{"t": "identity-ish"}, *_records(1200)]


def test_a_store_with_4_kib_pages_made_before_keeps_them_and_works(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    create_store(path, PASSWORD, calibrate(0.01), [{"t": "identity-ish"}])
    store, _ = _reopen(path)
    store.commit(_records(50))
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:  # what a store written before this change is: the same rows on 4 KiB pages
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA page_size=4096")
        conn.execute("VACUUM")
    finally:
        conn.close()
    assert _page_size(path) == 4096
    store, _ = _reopen(path)
    store.commit(_records(50, 50))
    store.close()
    assert _page_size(path) == 4096
    store, records = _reopen(path)
    store.close()
    assert records == [{"t": "identity-ish"}, *_records(100)]
