"""Tampering with the store file is detected at unlock and changes nothing (ST-1, ST-5, HI-2)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.helpers import PASSWORD, Cli


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
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "store_corrupt"


def test_deleted_row_is_detected_by_checkpoint(vault: Cli) -> None:
    """ST-5: the checkpoint's hash chain catches a dropped (rolled back) row."""
    _prepare(vault)
    _tamper(vault.home, "DELETE FROM state WHERE seq = (SELECT MAX(seq) FROM state)")
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "store_corrupt"


def test_swapped_rows_are_detected(vault: Cli) -> None:
    _prepare(vault)
    _tamper(
        vault.home,
        "UPDATE state SET blob = (SELECT blob FROM state WHERE seq = 4) WHERE seq = 3",
    )
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "store_corrupt"


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
    error = vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")
    assert error["code"] == "wrong_password"
    assert vault.ok("status")["state"] == "locked"


def test_forged_signature_inside_a_sealed_row_locks_the_vault(vault: Cli) -> None:
    """HI-2: a revision whose Ed25519 signature is wrong is caught even inside a valid sealed row.

    Such a row can only come from someone holding the master key (or a bug in our writer):
    the background re-verification after unlock locks the vault, and the next unlock in
    that engine verifies before answering and refuses (engine/service/integrity.py).
    """
    from engine.store.database import StoreFile

    _prepare(vault)
    store = StoreFile.open(vault.home / "store.db")
    store.install_master(store.check_password(PASSWORD))
    revision = next(record for _, record in reversed(store.load().records) if record.get("t") == "revision")
    forged = dict(revision, sig=bytes([revision["sig"][0] ^ 1]) + bytes(revision["sig"][1:]))
    store.commit([forged])
    store.close()

    vault.unlock()  # answers: the AEAD and the checkpoint chain hold; signatures are checked behind it
    deadline = time.monotonic() + 30
    while vault.ok("status")["state"] != "locked":
        assert time.monotonic() < deadline, "the background signature check did not lock the vault"
        time.sleep(0.1)
    error = vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")
    assert error["code"] == "store_corrupt"
    assert vault.ok("status")["state"] == "locked"
    logs = "".join(p.read_text(errors="replace") for p in (vault.home / "logs").glob("*.log"))
    assert "integrity" in logs
