"""Pack files (issue 32): the sealed chunks of a file from 1 MiB on are appended to a pack file of
their own beside the store, the store keeps where each chunk lies. Real daemon, real files.

What is proved here: a packed file reads back byte for byte (also after a lock, and in its
history); a pack holds no plaintext and is private; a changed, cut or missing pack is refused
with store_corrupt and nothing delivered; a stale pack (a crash before its upload's first rows)
is swept at unlock while committed packs stay; a store written before packs (chunks as content
rows, no ``content_packed`` table) still reads, and its first packed upload adds the table.
"""

from __future__ import annotations

import hashlib
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import Paths
from engine.store.packs import aligned, packs_path
from tests.helpers import Cli
from tests.integration.test_files import CHUNK, content_rows, pack_files, pseudo_random

MIB = 1 << 20
SEALED = CHUNK + 24 + 16  # nonce || ciphertext || tag


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Cli]:
    cli = Cli(home=tmp_path / "home")
    cli.init()
    yield cli
    cli.stop()


def _packed_rows(cli: Cli) -> list[tuple[int, int, int, int]]:
    with sqlite3.connect(Paths(cli.home).store) as conn:
        return [tuple(r) for r in conn.execute("SELECT seq, pack, offset, length FROM content_packed ORDER BY seq")]


def _get(cli: Cli, file_id: str, out: Path, *args: str) -> str:
    got = cli.ok("file", "get", file_id, "-o", str(out), "--force", *args)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == got["sha256"]
    return str(got["sha256"])


def test_a_large_file_is_one_private_pack_of_sealed_chunks_and_reads_back(vault: Cli, tmp_path: Path) -> None:
    """FI-1, ST-2, ST-10: 3 MiB + 5 bytes go to one 0600 pack in a 0700 folder, appended in order
    (13 chunks), no plaintext in it; get, an older revision and a read after lock and unlock are
    byte-exact; a small file stays content rows."""
    source = tmp_path / "big.bin"
    sha = pseudo_random(source, 3 * MIB + 5, b"packed")
    rows = content_rows(vault)
    added = vault.ok("file", "add", str(source))
    assert added["sha256"] == sha
    [pack] = pack_files(vault)
    assert stat.S_IMODE(pack.stat().st_mode) == 0o600 and stat.S_IMODE(pack.parent.stat().st_mode) == 0o700
    placed = _packed_rows(vault)
    assert len(placed) == 13 and content_rows(vault) == rows + 13
    assert [p[1] for p in placed] == [placed[0][0]] * 13 and int(pack.stem, 16) == placed[0][0]  # named by its first row
    assert [p[2] for p in placed] == [i * SEALED for i in range(13)]  # appended in order, nothing between
    assert pack.stat().st_size == aligned(12 * SEALED + 5 + 40)  # one batch, padded to a page
    packed = pack.read_bytes()
    plain = source.read_bytes()
    assert all(plain[i : i + 64] not in packed for i in range(0, len(plain), 256 * 1024))  # ciphertext only

    small = tmp_path / "small.bin"
    pseudo_random(small, CHUNK + 1, b"small")
    vault.ok("file", "add", str(small))
    assert len(pack_files(vault)) == 1 and len(_packed_rows(vault)) == 13  # two content rows, no pack

    # A new revision of the big file: its own pack; the first stays for the history.
    changed = tmp_path / "changed.bin"
    pseudo_random(changed, 2 * MIB, b"changed")
    vault.ok("file", "add", str(changed), "--update", added["id"])
    assert len(pack_files(vault)) == 2
    first = vault.ok("file", "history", added["id"])["revisions"][0]["short_revision"]
    assert _get(vault, added["id"], tmp_path / "old.out", "--rev", first) == sha
    vault.ok("lock")
    assert len(pack_files(vault)) == 2  # committed chunks stay sealed on disk
    vault.unlock()
    assert _get(vault, added["id"], tmp_path / "new.out") == hashlib.sha256(changed.read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["flipped", "cut", "missing", "swapped places", "bad place"])
def test_a_damaged_pack_is_refused_and_nothing_is_delivered(vault: Cli, tmp_path: Path, damage: str) -> None:
    """ST-4, HI-2: a flipped byte, a pack cut short, a pack removed, two chunks' places swapped or a
    place made impossible: `file get` fails store_corrupt (the chunk's signed digest, its AEAD or
    its place is checked), leaves no output, and other files still read."""
    source = tmp_path / "big.bin"
    pseudo_random(source, 2 * MIB, b"damage")
    added = vault.ok("file", "add", str(source))
    other = tmp_path / "other.bin"
    other_sha = pseudo_random(other, 2 * MIB, b"other")
    kept = vault.ok("file", "add", str(other))
    vault.stop()
    pack = next(p for p in pack_files(vault) if int(p.stem, 16) == min(int(q.stem, 16) for q in pack_files(vault)))
    data = bytearray(pack.read_bytes())
    if damage in ("swapped places", "bad place"):  # the rows that say where chunks lie, changed
        with sqlite3.connect(Paths(vault.home).store) as conn:
            first, second = conn.execute(
                "SELECT seq, offset FROM content_packed WHERE pack = ? ORDER BY seq LIMIT 2", (int(pack.stem, 16),)
            ).fetchall()
            if damage == "swapped places":
                conn.execute("UPDATE content_packed SET offset = ? WHERE seq = ?", (second[1], first[0]))
                conn.execute("UPDATE content_packed SET offset = ? WHERE seq = ?", (first[1], second[0]))
            else:
                conn.execute("UPDATE content_packed SET length = ? WHERE seq = ?", (1 << 40, second[0]))  # never allocated
    elif damage == "flipped":
        data[3 * SEALED + 100] ^= 1
        pack.write_bytes(bytes(data))
    elif damage == "cut":
        pack.write_bytes(bytes(data[: 5 * SEALED + 10]))
    else:
        pack.unlink()
    vault.unlock()
    out = tmp_path / "t.out"
    err = vault.err("file", "get", added["id"], "-o", str(out))
    assert err["code"] == "store_corrupt", err
    assert not out.exists()
    assert _get(vault, kept["id"], tmp_path / "kept.out") == other_sha


def test_a_stale_pack_is_swept_at_unlock_and_committed_packs_stay(vault: Cli, tmp_path: Path) -> None:
    """FI-1 crash cleanup: a pack no row names (what a crash before an upload's first rows leaves)
    is removed by the unlock's sweep; the committed file's pack stays and reads back."""
    source = tmp_path / "big.bin"
    sha = pseudo_random(source, 2 * MIB, b"kept")
    added = vault.ok("file", "add", str(source))
    [kept] = pack_files(vault)
    vault.stop()
    stale = packs_path(Paths(vault.home).store) / f"{int(kept.stem, 16) + 1000:016x}.pack"
    stale.write_bytes(b"\x00" * SEALED)
    vault.unlock()
    deadline = time.monotonic() + 120  # the sweep runs in the background a few seconds after the unlock
    while stale.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stale.exists()
    assert pack_files(vault) == [kept]
    assert _get(vault, added["id"], tmp_path / "out.bin") == sha
    # A later upload whose first row number was the stale pack's: nothing to collide with.
    again = vault.ok("file", "add", str(source))
    assert _get(vault, again["id"], tmp_path / "again.bin") == sha


def _unpack(home: Path) -> None:
    """Rewrite a store as it was before packs: every packed chunk back in a content row, the
    ``content_packed`` table dropped, the pack files removed (the engine stopped)."""
    store = Paths(home).store
    folder = packs_path(store)
    with sqlite3.connect(store) as conn:
        for seq, pack, offset, length in conn.execute("SELECT seq, pack, offset, length FROM content_packed").fetchall():
            with open(folder / f"{pack:016x}.pack", "rb") as f:
                f.seek(offset)
                conn.execute("INSERT INTO content (seq, blob) VALUES (?, ?)", (seq, f.read(length)))
        conn.execute("DROP TABLE content_packed")
    for pack in folder.glob("*.pack"):
        pack.unlink()
    folder.rmdir()


def test_a_store_written_before_packs_still_reads_and_packs_its_next_file(vault: Cli, tmp_path: Path) -> None:
    """Format compatibility (issue 32): a large file stored as content rows (the form before packs,
    no ``content_packed`` table) reads back; the next large upload adds the table and a pack; both
    read back, also after a restart and lock."""
    old = tmp_path / "old.bin"
    old_sha = pseudo_random(old, 3 * MIB, b"old")
    old_id = vault.ok("file", "add", str(old))["id"]
    vault.stop()
    _unpack(vault.home)
    with sqlite3.connect(Paths(vault.home).store) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'content_packed'").fetchone() is None
    rows = content_rows(vault)
    vault.unlock()
    assert _get(vault, old_id, tmp_path / "old.out") == old_sha
    new = tmp_path / "new.bin"
    new_sha = pseudo_random(new, 3 * MIB, b"new")
    new_id = vault.ok("file", "add", str(new))["id"]
    assert len(pack_files(vault)) == 1 and content_rows(vault) == rows + 12
    vault.stop()
    vault.unlock()
    vault.ok("lock")
    vault.unlock()
    assert _get(vault, old_id, tmp_path / "old.out") == old_sha
    assert _get(vault, new_id, tmp_path / "new.out") == new_sha
