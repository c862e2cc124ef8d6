"""Where a store's bytes go (issue 32): per table and per kind of state row, opened with the
engine's own code.

    .venv/bin/python bench/store_breakdown.py HOME [--password-file FILE]
    .venv/bin/python bench/store_breakdown.py --scale-cache      # bench/scale.py's cached 10k vault (device A)

Prints, in MB: SQLite's pages per table (``dbstat``: what the file spends, free pages included),
the stored bytes of every state row by record kind and row version (plain, zlib, dictionary),
the content rows (note bodies sealed under their revision's data key) with their plaintext size
and what zlib would make of it, and the search snapshot's frames after decompression. The store
is opened read-only in this process (stop its engine first, or run it on a copy): it reads the
header, derives the key from the password, checks the hash chain like an unlock and opens every
row. Nothing is written.
"""

from __future__ import annotations

import argparse
import sqlite3
import struct
import sys
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.crypto.chunks import ChunkError  # noqa: E402
from engine.store.database import SnapshotRef, StoreFile, decode_record  # noqa: E402
from engine.vault.revision import Revision  # noqa: E402
from tests.helpers import PASSWORD  # noqa: E402

_VERSIONS = {1: "plain", 2: "plain", 3: "zlib", 4: "zlib", 5: "dictionary", 6: "dict-zlib", 7: "dict-zlib"}
_LENGTH = struct.Struct(">Q")
_FRAMES = ("head", "books", "fts5 image", "word postings")


def _mb(n: float) -> str:
    return f"{n / 1e6:9.3f}"


def page_bytes(path: Path) -> dict[str, tuple[int, int, int]]:
    """Per table or index: (pages' bytes, payload bytes, unused bytes) from SQLite's dbstat."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, sum(pgsize), sum(payload), sum(unused) FROM dbstat GROUP BY name").fetchall()
        free = conn.execute("PRAGMA freelist_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    out = {str(name): (int(pg), int(pay), int(unused)) for name, pg, pay, unused in rows}
    out["(free pages)"] = (free, 0, free)
    return out


def snapshot_frames(store: StoreFile, ref: SnapshotRef) -> list[tuple[str, int, int]]:
    """(frame, bytes, zlib level 6 bytes of that frame alone) in the snapshot's payload."""
    payload = store.read_snapshot(ref)
    out: list[tuple[str, int, int]] = []
    at, i = 0, 0
    while at < len(payload):
        (size,) = _LENGTH.unpack_from(payload, at)
        frame = payload[at + _LENGTH.size : at + _LENGTH.size + size]
        name = _FRAMES[i] if i < len(_FRAMES) else "assets + chunks (batches)"
        out.append((name, len(frame), len(zlib.compress(frame, 6))))
        at += _LENGTH.size + size
        i += 1
    return out


def breakdown(home: Path, password: str) -> None:
    path = home / "store.db"
    files = [p for p in home.glob("store.db*") if not p.name.endswith("reserve")]
    print(f"store {path}: {_mb(sum(p.stat().st_size for p in files))} MB with its log")
    print("\nSQLite pages per table (dbstat), MB:     pages   payload    unused")
    for name, (pg, pay, unused) in sorted(page_bytes(path).items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:34s}{_mb(pg)} {_mb(pay)} {_mb(unused)}")

    store = StoreFile.open(path)
    try:
        store.install_master(store.check_password(password))
        loaded = store.load(frozenset(), open_deferred=True)
        kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        by_version: dict[str, int] = defaultdict(int)
        raw = dict(store.conn.execute("SELECT seq, blob FROM state").fetchall())
        records: dict[int, dict[str, Any]] = dict(loaded.records)
        for seq, blob in raw.items():
            version = _VERSIONS.get(blob[0], f"v{blob[0]}")
            kind = "(dictionary)" if blob[0] == 5 else str(records.get(seq, {}).get("t", "?"))
            kinds[kind][0] += 1
            kinds[kind][1] += len(blob)
            by_version[f"{kind} / {version}"] += len(blob)
        print("\nstate rows by kind (stored blob bytes), MB:   rows        MB   B/row")
        for kind, (count, size) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
            print(f"  {kind:34s}{count:8d} {_mb(size)} {size // max(count, 1):7d}")
        print("  by row version:")
        for name, size in sorted(by_version.items(), key=lambda kv: -kv[1]):
            print(f"    {name:40s}{_mb(size)}")

        epoch_keys: dict[tuple[bytes, int], bytes] = {}
        for record in records.values():
            if record.get("t") == "vault":
                for entry in record["epoch_keys"]:
                    epoch_keys[(bytes(record["vault_id"]), int(entry["epoch"]))] = bytes(entry["key"])
        content = dict(store.conn.execute("SELECT seq, blob FROM content").fetchall())
        sealed = plain = packed = opened = 0
        for seq, record in records.items():
            if record.get("t") != "revision":
                continue
            rev = Revision.from_record(record, seq)
            key = epoch_keys.get((rev.vault_id, rev.epoch))
            chunks = [content[s] for s in rev.body_seqs if s in content]
            if key is None or len(chunks) != len(rev.body_seqs):
                continue
            try:
                body = rev.open_body(key, chunks)
            except ChunkError:
                continue
            opened += 1
            sealed += sum(len(c) for c in chunks)
            plain += len(body)
            packed += len(zlib.compress(body, 9))
        print(f"\ncontent rows: {len(content)} rows, {_mb(sum(len(b) for b in content.values()))} MB stored")
        print(f"  bodies of {opened} revisions: sealed {_mb(sealed)} MB, plaintext {_mb(plain)} MB,", end="")
        print(f" zlib -9 of each alone {_mb(packed)} MB")

        refs = [r for r in records.values() if r.get("t") == "search_snapshot"]
        ref = SnapshotRef.from_fields(refs[-1]) if refs else None
        if ref is not None:
            print(f"\nsearch snapshot: {ref.count} rows, {_mb(ref.size)} MB sealed; its payload's frames, MB:", end="")
            print("  bytes  zlib-6 alone")
            totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for name, size, z in snapshot_frames(store, ref):
                totals[name][0] += size
                totals[name][1] += z
            for name, (size, z) in totals.items():
                print(f"  {name:34s}{_mb(size)} {_mb(z)}")
        _ = decode_record  # the record codec the engine reads rows with
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("home", nargs="?", type=Path, help="a data home holding store.db (its engine stopped)")
    parser.add_argument("--password-file", type=Path, help="the store's password (default: the tests' password)")
    parser.add_argument("--scale-cache", action="store_true", help="bench/scale.py's cached 10k vault, device A")
    args = parser.parse_args()
    if args.scale_cache:
        from bench.scale import BASE, cache_dir

        home = cache_dir(BASE) / "a"
    elif args.home is not None:
        home = args.home
    else:
        parser.error("give a HOME or --scale-cache")
    password = args.password_file.read_text().rstrip("\n") if args.password_file else PASSWORD
    breakdown(home, password)


if __name__ == "__main__":
    main()
