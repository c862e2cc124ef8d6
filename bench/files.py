"""File transfer benchmark (issue 16, FI-1): `file add` / `file get` throughput and peak memory.

    .venv/bin/python bench/files.py [--sizes 128,1024] [--keep]

For each size (MiB) it writes an incompressible file, times whole `memories file add` and
`memories file get -o` processes against a real engine, and compares their MiB/s with raw
AEAD of the same bytes in one process (``seal_chunk_buffer``, the engine's fastest sealing
of 256 KiB chunks: the crypto floor without IPC, hashing or SQLite). Raw AEAD is measured
right before and right after each transfer and averaged, so a machine whose load changes
during the run skews both sides alike. The goal is a ratio ≥ 0.5.

Also printed: CPU seconds (user + system) of the CLI process and of the engine during each
transfer, as a ratio to raw AEAD's CPU seconds (on a loaded machine wall time mostly says
how long each thread waited for a core; CPU time says how much work each side does), and
per-stage CPU figures of the engine's work per byte measured in this process (sealing, the
two SHA-256 passes, SQLite content writes to the log and the checkpoint that copies them
into the file, in a scratch store with the engine's settings, and what replaced those two for
files of 1 MiB or more: batches appended to a pack file from a reused buffer, and its fsync).
Peak RSS of each CLI process (``wait4`` rusage) and of the engine (``VmHWM`` after the
transfers) are reported per size: they must not grow with the file.

Issue 32, pack files (docs/architecture.md), 512 MiB, this tree then main's (d1962d7) back to
back at load 8.4 → 7.9: add 87.3 vs 66.8 MiB/s, ratio to raw AEAD 0.311 vs 0.177, engine CPU
1.82 vs 2.98 s (CLI 0.14 vs 0.13); get 46.7 vs 61.6 MiB/s, engine CPU 2.44 vs 2.42 s (unchanged:
the same reads and opens; its wall now reads the pack from the disk, as it bypassed the page
cache). Stages (MiB/s of CPU): seal 1074, SHA-256 1347, SQLite log write 867 and checkpoint 920,
and the pack write with its fsync that replaced those two for large files 25,391.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.crypto.chunks import CHUNK_BYTES, seal_chunk_buffer  # noqa: E402

PASSWORD = "bench password for files"


def command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", "--home", str(home), *args]


def env() -> dict[str, str]:
    return {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], engine: int, stdout: int | None = subprocess.DEVNULL) -> tuple[float, int, bytes, float, float]:
    """(seconds, peak RSS KiB, stdout, CLI CPU s, engine CPU s) of one whole process."""
    engine_before = cpu_seconds(engine)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE if stdout is None else stdout, cwd=ROOT)
    out = proc.stdout.read() if proc.stdout is not None else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[4:6]} failed")
    return seconds, usage.ru_maxrss, out, usage.ru_utime + usage.ru_stime, cpu_seconds(engine) - engine_before


def write_file(path: Path, mib: int) -> None:
    block = hashlib.shake_256(b"bench").digest(1 << 20)
    with open(path, "wb") as out:
        for i in range(mib):
            out.write(i.to_bytes(8, "big") + block[8:])


def raw_aead(path: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to read and seal ``path`` in 256 KiB chunks in this process."""
    key = os.urandom(32)
    size = path.stat().st_size
    total = -(-size // CHUNK_BYTES)
    start, cpu = time.perf_counter(), time.process_time()
    with open(path, "rb") as source:
        for index in range(total):
            seal_chunk_buffer(key, source.read(CHUNK_BYTES), b"bench" + b"body", index, total)
    return time.perf_counter() - start, time.process_time() - cpu


def stage_rates(mib: int = 64) -> dict[str, float]:
    """CPU MiB/s of each stage of the engine's upload work, one at a time, in this process."""
    import sqlite3

    from engine.store.database import _pragmas

    chunk = os.urandom(CHUNK_BYTES)
    count = mib * 4
    key = os.urandom(32)
    rates: dict[str, float] = {}

    def rate(name: str, work: Callable[[], object]) -> None:
        cpu = time.process_time()
        work()
        rates[name] = round(mib / max(time.process_time() - cpu, 1e-6), 1)

    sealed = seal_chunk_buffer(key, chunk, b"bench" + b"body", 0, count)
    rate("seal", lambda: [len(seal_chunk_buffer(key, chunk, b"bench" + b"body", i, count)) for i in range(count)])
    rate("sha256", lambda: [hashlib.sha256(chunk).digest() for _ in range(count)])
    with tempfile.TemporaryDirectory(prefix="memories-bench-stage-") as scratch:
        conn = sqlite3.connect(Path(scratch) / "s.db", isolation_level=None)
        _pragmas(conn, "WAL")
        conn.execute("CREATE TABLE content (seq INTEGER PRIMARY KEY, blob BLOB NOT NULL)")
        conn.execute("PRAGMA synchronous=NORMAL")  # as StoreFile.write_content
        # The writer stage appends to the log; the checkpointer's thread copies it back
        # (engine/store/checkpointer.py): two stages, measured apart.
        conn.execute("PRAGMA wal_autocheckpoint=0")

        def write() -> None:
            for batch in range(0, count, 32):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany("INSERT INTO content VALUES (?, ?)", [(batch + i + 1, sealed) for i in range(32)])
                conn.execute("COMMIT")

        rate("sqlite write (log)", write)
        conn.execute("PRAGMA synchronous=FULL")
        rate("sqlite checkpoint", lambda: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone())
        conn.close()

        # What replaced the two above for a file of 1 MiB or more (issue 32): 8 MiB batches from
        # one reused page-aligned buffer appended to a pack file, then its fsync.
        import mmap

        from engine.store.packs import PackDir, aligned

        batch = mmap.mmap(-1, aligned(32 * len(sealed)))
        for i in range(32):
            batch[i * len(sealed) : (i + 1) * len(sealed)] = sealed
        writer = PackDir(Path(scratch) / "packs").create(1)

        def append() -> None:
            with memoryview(batch) as view:
                for _ in range(0, count, 32):
                    writer.append(view)
            writer.sync()

        rate("pack write + fsync", append)
        writer.close()
        batch.close()
    return rates


def hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,1024", help="file sizes in MiB, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="memories-bench-files-"))
    home = base / "home"
    try:
        subprocess.run(
            command(home, "init", "--password-stdin"), input=PASSWORD.encode() + b"\n", env=env(), check=True, capture_output=True
        )
        pid = int(
            json.loads(
                subprocess.run(command(home, "daemon", "status", "--json"), env=env(), capture_output=True, check=True).stdout
            )["pid"]
        )
        # Load what an engine loads once anyway (the search segmenter) before measuring.
        subprocess.run(command(home, "search", "warm"), env=env(), capture_output=True, check=True)
        rows = []
        for mib in (int(s) for s in args.sizes.split(",")):
            source = base / f"f{mib}.bin"
            write_file(source, mib)
            raw_before = raw_aead(source)
            add_s, add_kib, out, add_cli_cpu, add_engine_cpu = timed(
                command(home, "file", "add", str(source), "--json"), pid, stdout=None
            )
            raw_between = raw_aead(source)
            file_id = json.loads(out)["id"]
            target = base / f"f{mib}.out"
            get_s, get_kib, _, get_cli_cpu, get_engine_cpu = timed(
                command(home, "file", "get", file_id, "-o", str(target), "--json"), pid
            )
            raw_after = raw_aead(source)
            assert target.stat().st_size == source.stat().st_size
            engine_kib = hwm_kib(pid)
            subprocess.run(command(home, "delete", file_id), env=env(), check=True, capture_output=True)
            source.unlink()
            target.unlink()
            add_raw = (raw_before[0] + raw_between[0]) / 2, (raw_before[1] + raw_between[1]) / 2
            get_raw = (raw_between[0] + raw_after[0]) / 2, (raw_between[1] + raw_after[1]) / 2
            row = {
                "MiB": mib,
                "raw AEAD MiB/s": round(mib / add_raw[0], 1),
                "add MiB/s": round(mib / add_s, 1),
                "add ratio": round(add_raw[0] / add_s, 3),
                "get MiB/s": round(mib / get_s, 1),
                "get ratio": round(get_raw[0] / get_s, 3),
                "add CPU s (CLI+engine)": f"{add_cli_cpu:.2f}+{add_engine_cpu:.2f}",
                "add CPU ratio": round(add_raw[1] / (add_cli_cpu + add_engine_cpu), 3),
                "get CPU s (CLI+engine)": f"{get_cli_cpu:.2f}+{get_engine_cpu:.2f}",
                "get CPU ratio": round(get_raw[1] / (get_cli_cpu + get_engine_cpu), 3),
                "add CLI peak MiB": round(add_kib / 1024, 1),
                "get CLI peak MiB": round(get_kib / 1024, 1),
                "engine peak MiB (so far)": round(engine_kib / 1024, 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        subprocess.run(command(home, "daemon", "stop"), env=env(), capture_output=True)
        # Last: its buffers would otherwise count in the CLI's peak RSS (a child's starts at ours).
        print(json.dumps({"stage CPU MiB/s": stage_rates()}), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
