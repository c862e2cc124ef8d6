"""Backup benchmark (issue 15, BK-1, BK-2): backup, verify and restore of an N-item vault.

    .venv/bin/python bench/backup.py [--items 10000] [--body-bytes 1000] [--file-mib 0] [--real-kdf]

End to end through the real CLI and real daemons: a fresh vault (test KDF, so the numbers
measure throughput, not Argon2id; --real-kdf keeps the calibrated Argon2id a user gets) gets
N notes by `memories import` (Chinese and ASCII text of about --body-bytes each, every tenth
note edited once, so history exists) and, with --file-mib, one random file of that size
(`memories file add`: the streamed-body path of a restore); then times
`memories backup create`, `memories backup verify` and `memories restore` into a new home,
and, for comparison, copying the store file and its pack files (read + write + fsync, the floor any backup
has to beat). Prints MiB/s (over the store file's size, and the backup's) and the ratio of
each to the copy, and restore against verify of the same file: a restore is a verify plus
a new store (its own Argon2id calibration and derivation, like `init`), re-signed heads and
the writes. Asserts nothing.

Chunks that arrive whole in a restore's batches go to pack files (issue 32), as an upload's do.
Measured A/B/A/B against the commit before (4469dcb), `--items 200 --file-mib 256`, load 8.4-10.4
on the 2 cores beside a CI run: restore 5.70 / 6.09 s before, 5.25 / 5.05 s after; the restored
store.db 256.9 MiB before, 0.4 MiB (and a 256 MiB pack) after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.store.packs import is_pack_name, packs_path

ROOT = Path(__file__).resolve().parents[1]
VAULT_PW = "bench vault password that is long enough"
BACKUP_PW = "bench backup password that is long enough"


_REAL_KDF = False


def _memories(home: Path, *args: str, stdin: str | None = None) -> dict[str, object]:
    env = {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}
    if _REAL_KDF:
        env.pop("MEMORIES_KDF_TARGET_MS")
    env.pop("MEMORIES_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args, "--json"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"memories {' '.join(args)} failed: {proc.stdout} {proc.stderr}")
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _timed(home: Path, *args: str, stdin: str | None = None) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    result = _memories(home, *args, stdin=stdin)
    return time.perf_counter() - started, result


def _store_files(home: Path) -> list[Path]:
    """The store and its pack files (issue 32: a large file's chunks lie in a pack beside it)."""
    store = home / "store.db"
    packs = packs_path(store)
    return [store, *(sorted(p for p in packs.iterdir() if is_pack_name(p.name)) if packs.is_dir() else [])]


def _mib(files: list[Path]) -> float:
    return sum(path.stat().st_size for path in files) / 2**20


def _copy_seconds(files: list[Path], folder: Path) -> float:
    folder.mkdir()
    started = time.perf_counter()
    for src in files:
        dst = folder / src.name
        shutil.copyfile(src, dst)
        fd = os.open(dst, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--body-bytes", type=int, default=1000)
    parser.add_argument("--file-mib", type=int, default=0, help="also add one random file of this many MiB")
    parser.add_argument("--real-kdf", action="store_true", help="calibrated Argon2id instead of the test KDF")
    args = parser.parse_args()
    global _REAL_KDF
    _REAL_KDF = args.real_kdf
    with tempfile.TemporaryDirectory(prefix="memories-bench-backup-") as tmp:
        root = Path(tmp)
        home, restored = root / "home", root / "restored"
        try:
            _memories(home, "init", "--password-stdin", stdin=VAULT_PW + "\n")
            notes = root / "notes.jsonl"
            unit = "备份与恢复 backup and restore "
            with open(notes, "w", encoding="utf-8") as out:
                for i in range(args.items):
                    body = f"{i} " + unit * max(1, args.body_bytes // len(unit.encode()))
                    note = {"title": f"笔记 note {i}", "body": body, "tags": [f"t{i % 50}"]}
                    out.write(json.dumps(note, ensure_ascii=False) + "\n")
            _memories(home, "import", str(notes))
            if args.file_mib:
                blob = root / "random.bin"
                with open(blob, "wb") as out:
                    for _ in range(args.file_mib):
                        out.write(os.urandom(2**20))
                _memories(home, "file", "add", str(blob))
            listed = _memories(home, "list", "--limit", str(args.items // 10 + 1))
            items = listed["items"]
            assert isinstance(items, list)
            for item in items[: args.items // 10]:
                _memories(home, "edit", str(item["id"]), "--body", "edited once")
            _memories(home, "lock")
            _memories(home, "daemon", "stop")
            copy_s = _copy_seconds(_store_files(home), root / "store-copy")
            _memories(home, "unlock", "--password-stdin", stdin=VAULT_PW + "\n")
            _memories(home, "sudo", "--password-stdin", stdin=VAULT_PW + "\n")
            store_mib = _mib(_store_files(home))
            backup = root / "memories.backup"
            create_s, created = _timed(home, "backup", "create", str(backup), "--password-stdin", stdin=BACKUP_PW + "\n")
            backup_mib = backup.stat().st_size / 2**20
            verify_s, _ = _timed(home, "backup", "verify", str(backup), "--password-stdin", stdin=BACKUP_PW + "\n")
            _memories(restored, "daemon", "start")  # an engine start is not part of a restore's cost
            restore_s, done = _timed(restored, "restore", str(backup), "--password-stdin", stdin=f"{BACKUP_PW}\n{VAULT_PW}\n")
            restored_mib = _mib(_store_files(restored))
        finally:
            for h in (home, restored):
                if h.exists():
                    subprocess.run(
                        [sys.executable, "-m", "engine.cli", "--home", str(h), "daemon", "stop"], capture_output=True, cwd=ROOT
                    )
    print(f"items {args.items} (+{args.items // 10} edits), revisions {created['revisions']}, store {store_mib:.1f} MiB")
    print(f"copy of the store files  {copy_s:7.2f} s  {store_mib / copy_s:8.1f} MiB/s")
    for name, seconds in (("backup create", create_s), ("backup verify", verify_s), ("restore", restore_s)):
        print(
            f"{name:<24} {seconds:7.2f} s  {store_mib / seconds:8.1f} MiB/s of store, "
            f"{backup_mib / seconds:8.1f} MiB/s of backup; {seconds / copy_s:6.1f}x the copy"
        )
    print(f"restore / verify of the same file: {restore_s / verify_s:.2f}x (+{restore_s - verify_s:.2f} s)")
    print(f"backup file {backup_mib:.1f} MiB; restored store and packs {restored_mib:.1f} MiB; restore: {done}")
    if args.real_kdf:
        print("(each time includes one CLI process start; real KDF: verify runs 1 Argon2id, restore 2 + 2 calibration probes)")
    else:
        print("(each time includes one CLI process start; test KDF: Argon2id at its real setting adds ~0.7 s per password)")


if __name__ == "__main__":
    main()
