"""Vault policy benchmark (issue 13): epoch rotation on a big vault, policy check cost per write.

    .venv/bin/python bench/policy.py [--notes 10000] [--puts 300]

Runs the real Service in-process on a real encrypted store in a temp directory:
  * epoch rotation on a vault of N notes (``vault rotate`` and ``vault member remove``):
    time, and how many bytes the store files grew — a new epoch writes one policy row
    with the new key, never the notes (only keys are re-encrypted, not bodies); the
    figure is shown next to the bytes the notes themselves take;
  * policy check cost per write: median ``put`` latency in a vault whose policy lists only
    its Owner vs one with 50 members and 100 devices, measured interleaved; the ratio.
No assertions: it prints the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MEMORIES_KDF_TARGET_MS", "50")  # the KDF is not what this measures

from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.config import EngineConfig, Paths
from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import CERT_TAG, certificate_body, sign
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from engine.vault.policy import AddDevice

PASSWORD = "bench password"
WORDS = [
    "memory",
    "vault",
    "key",
    "epoch",
    "policy",
    "member",
    "device",
    "owner",
    "admin",
    "editor",
    "reader",
    "rotate",
    "garden",
    "piano",
    "coffee",
]


def note(rng: random.Random, i: int) -> dict[str, object]:
    body = " ".join(rng.choice(WORDS) for _ in range(80))  # ~500 characters
    return {"title": f"note {i} {rng.choice(WORDS)}", "body": body, "tags": [rng.choice(WORDS)]}


def store_bytes(paths: Paths) -> int:
    """The store and its SQLite side files: everything a commit may write to."""
    return sum(p.stat().st_size for p in paths.home.glob("store.db*") if p.is_file())


def row_marks(paths: Paths) -> tuple[int, int]:
    """The last state and content row numbers (the store only appends rows)."""
    with sqlite3.connect(f"file:{paths.store}?mode=ro", uri=True) as conn:
        state = conn.execute("SELECT coalesce(max(seq), 0) FROM state").fetchone()[0]
        content = conn.execute("SELECT coalesce(max(seq), 0) FROM content").fetchone()[0]
    return int(state), int(content)


def written_since(paths: Paths, marks: tuple[int, int]) -> tuple[int, int]:
    """(rows, bytes) written after ``marks``: new state and content rows plus the rewritten checkpoint."""
    with sqlite3.connect(f"file:{paths.store}?mode=ro", uri=True) as conn:
        rows = total = 0
        for table, mark in (("state", marks[0]), ("content", marks[1])):
            count, size = conn.execute(
                f"SELECT count(*), coalesce(sum(length(blob)), 0) FROM {table} WHERE seq > ?", (mark,)
            ).fetchone()
            rows, total = rows + int(count), total + int(size)
        total += int(conn.execute("SELECT coalesce(sum(length(blob)), 0) FROM checkpoints").fetchone()[0])
    return rows, total


def vault_id(service: Service, name: str) -> bytes:
    state = service.require_unlocked()
    return next(v.vault_id for v in state.vaults.values() if v.name == name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--puts", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(13)
    caller = Caller("cli:bench")
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp))
        service = Service(paths, EngineConfig())
        service.dispatch({"op": "init", "password": PASSWORD}, caller)
        service.dispatch({"op": "sudo", "password": PASSWORD}, caller)
        service.dispatch({"op": "vault_new", "name": "big"}, caller)

        # -- 1. epoch rotation on an N-note vault ---------------------------------------------
        size0 = store_bytes(paths)
        marks0 = row_marks(paths)
        started = time.perf_counter()
        for start in range(0, args.notes, 2000):
            items = [note(rng, i) for i in range(start, min(args.notes, start + 2000))]
            service.dispatch({"op": "import_batch", "items": items, "vault": "big"}, caller)
        imported = store_bytes(paths) - size0
        imported_rows, imported_bytes = written_since(paths, marks0)
        print(f"the import wrote {imported_rows:,} rows, {imported_bytes:,} bytes")
        print(f"import {args.notes} notes into vault 'big': {time.perf_counter() - started:.1f} s, store +{imported:,} bytes")
        other = bytes(SigningKey.generate().verify_key).hex()
        service.dispatch({"op": "vault_member_add", "user": other, "role": "reader", "vault": "big"}, caller)
        for label, request in (
            ("vault rotate", {"op": "vault_rotate", "vault": "big"}),
            ("vault member remove", {"op": "vault_member_remove", "user": other, "vault": "big"}),
        ):
            before = store_bytes(paths)
            marks = row_marks(paths)
            t0 = time.perf_counter()
            result = service.dispatch(request, caller)
            seconds = time.perf_counter() - t0
            grew = store_bytes(paths) - before
            rows, written = written_since(paths, marks)
            print(
                f"{label:<20} on {args.notes} notes: {seconds * 1000:7.1f} ms; wrote {rows} rows, {written:,} bytes "
                f"({written / max(imported_bytes, 1):.6f} of the {imported_bytes:,} bytes the import wrote); "
                f"file +{grew:,} bytes; epoch {result['epoch']}"
            )

        # -- 2. policy check cost per write -----------------------------------------------------
        service.dispatch({"op": "vault_new", "name": "solo"}, caller)
        service.dispatch({"op": "vault_new", "name": "crowd"}, caller)
        crowd = vault_id(service, "crowd")
        users = [SigningKey.generate() for _ in range(50)]
        for user in users:
            hex_id = bytes(user.verify_key).hex()
            service.dispatch({"op": "vault_member_add", "user": hex_id, "role": "editor", "vault": "crowd"}, caller)
        now = int(time.time() * 1000)
        for user in users:
            for _ in range(2):
                device = bytes(SigningKey.generate().verify_key)
                exchange = bytes(PrivateKey.generate().public_key)
                cert = certificate_body(bytes(user.verify_key), device, exchange, now)
                change = AddDevice(cert, sign(user, domain_bytes(CERT_TAG, 1, cert)))
                with service.lock:
                    service.vault.change_policy(service.require_unlocked(), crowd, change, caller)
        policy = service.require_unlocked().vaults[crowd].policy
        print(f"vault 'crowd': {len(policy.members())} members, {len(policy.devices())} devices, policy seq {policy.seq}")
        times: dict[str, list[float]] = {"solo": [], "crowd": []}
        for i in range(args.puts):
            for name in ("solo", "crowd") if i % 2 else ("crowd", "solo"):
                t0 = time.perf_counter()
                service.dispatch({"op": "put", "title": f"w{i}", "body": "a write", "vault": name}, caller)
                times[name].append(time.perf_counter() - t0)
        solo, many = statistics.median(times["solo"]), statistics.median(times["crowd"])
        print(
            f"put median: owner-only vault {solo * 1000:.2f} ms, 50 members/100 devices {many * 1000:.2f} ms, "
            f"ratio {many / solo:.2f}"
        )
        service.lock_now("bench")


if __name__ == "__main__":
    main()
