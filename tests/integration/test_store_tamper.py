"""Tampering with the store file is detected at unlock and changes nothing (ST-1, ST-5, HI-2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.helpers import Cli


def _tamper(home: Path, sql: str) -> None:
    conn = sqlite3.connect(home / "store.db")
    conn.execute(sql)
    conn.commit()
    conn.close()


def _prepare(vault: Cli) -> None:
    for i in range(3):
        vault.put(f"note {i}", "body")
    vault.stop()


def test_flipped_state_row_is_detected(vault: Cli) -> None:
    """ST-1: every state row is authenticated ciphertext."""
    _prepare(vault)
    _tamper(vault.home, "UPDATE state SET blob = substr(blob, 1, 40) || x'00' || substr(blob, 42) WHERE seq = 3")
    assert vault.err("unlock", "--password-stdin", input="correct horse battery staple\n")["code"] == "store_corrupt"


def test_deleted_row_is_detected_by_checkpoint(vault: Cli) -> None:
    """ST-5: the checkpoint's hash chain catches a dropped (rolled back) row."""
    _prepare(vault)
    _tamper(vault.home, "DELETE FROM state WHERE seq = (SELECT MAX(seq) FROM state)")
    assert vault.err("unlock", "--password-stdin", input="correct horse battery staple\n")["code"] == "store_corrupt"


def test_swapped_rows_are_detected(vault: Cli) -> None:
    _prepare(vault)
    _tamper(
        vault.home,
        "UPDATE state SET blob = (SELECT blob FROM state WHERE seq = 4) WHERE seq = 3",
    )
    assert vault.err("unlock", "--password-stdin", input="correct horse battery staple\n")["code"] == "store_corrupt"


def test_tampered_content_chunk_is_detected_on_read(vault: Cli) -> None:
    """HI-2: body chunk digests are signed; a changed chunk fails on read."""
    put = vault.put("victim", "the original body")
    vault.stop()
    _tamper(vault.home, "UPDATE content SET blob = substr(blob, 1, 30) || x'ff' || substr(blob, 32)")
    vault.unlock()
    assert vault.err("get", put["id"])["code"] == "store_corrupt"


def test_header_kdf_downgrade_is_detected(vault: Cli) -> None:
    """ST-3: the header's KDF parameters are associated data of the sealed master key."""
    from engine.crypto.canonical import canonical_bytes, decode_canonical

    _prepare(vault)
    conn = sqlite3.connect(vault.home / "store.db")
    params = decode_canonical(conn.execute("SELECT kdf FROM header").fetchone()[0])
    params["opslimit"] = params["opslimit"] + 1  # an attacker "tuning" the KDF
    conn.execute("UPDATE header SET kdf = ?", (canonical_bytes(params),))
    conn.commit()
    conn.close()
    error = vault.err("unlock", "--password-stdin", input="correct horse battery staple\n")
    assert error["code"] == "wrong_password"
    assert vault.ok("status")["state"] == "locked"
