"""Issue 32: `memories status` says what the vault takes on disk, large files (pack files) apart.

Real daemon, real files. Sizes only, of files anyone who can list the data directory sees;
a locked status still says only "locked" (DT-1).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from engine.config import Paths
from engine.store.footprint import footprint
from engine.store.packs import packs_path
from engine.store.room import reserve_path
from tests.helpers import Cli
from tests.integration.test_files import pseudo_random

MIB = 1 << 20


def _packs_on_disk(store: Path) -> int:
    """What the store's pack files take, summed here without the engine's code. (Not the store
    itself: a search-token flush may append to its log between the status and this count.)"""
    folder = packs_path(store)
    return sum((folder / name).stat().st_size for name in os.listdir(folder) if name.endswith(".pack"))


def test_status_shows_the_store_and_its_large_files_on_disk(vault: Cli, tmp_path: Path) -> None:
    """A vault of notes has no packs; a 2 MiB file adds one pack of at least its size, counted
    apart; the total is every file of the store; the text line names both."""
    vault.put("note", "a body")
    before = vault.ok("status")["storage"]
    assert before["packs"] == 0 and before["pack_bytes"] == 0
    assert before["store_bytes"] > 0
    assert before["total_bytes"] == before["store_bytes"]  # the full-disk reserve is reported apart
    text = vault.run("status").stdout
    assert "on disk: " in text and "large files" not in text, text

    source = tmp_path / "big.bin"
    pseudo_random(source, 2 * MIB, b"storage")
    vault.ok("file", "add", str(source))
    after = vault.ok("status")["storage"]
    assert after["packs"] == 1 and after["pack_bytes"] >= 2 * MIB
    assert after["total_bytes"] == after["store_bytes"] + after["pack_bytes"]
    store = Paths(vault.home).store
    assert after["pack_bytes"] == _packs_on_disk(store)
    assert after["reserve_bytes"] == (reserve_path(store).stat().st_size if reserve_path(store).exists() else 0)
    text = vault.run("status").stdout
    assert re.search(r"on disk: [\d.]+ MiB \(store [\d.]+ KiB, large files [\d.]+ MiB in 1 pack\)", text), text


def test_a_locked_status_shows_no_storage(vault: Cli) -> None:
    """DT-1: locked says only "locked", sizes included."""
    vault.ok("lock")
    assert vault.ok("status") == {"state": "locked"}


def test_footprint_counts_only_pack_files_and_copes_with_missing_parts(tmp_path: Path) -> None:
    """Anything else in the packs folder is not counted; no store, log or folder is zero, not an error."""
    store = tmp_path / "store.db"
    assert footprint(store).total_bytes == 0
    store.write_bytes(b"s" * 100)
    folder = packs_path(store)
    folder.mkdir()
    (folder / f"{1:016x}.pack").write_bytes(b"p" * 4096)
    (folder / "notes.txt").write_bytes(b"x" * 999)  # not ours
    (folder / "0001.pack").write_bytes(b"x" * 999)  # not a pack name (16 hex digits)
    seen = footprint(store)
    assert (seen.store_bytes, seen.pack_bytes, seen.packs) == (100, 4096, 1)
