"""File transfer benchmark (issue 16, FI-1): `file add` / `file get` throughput and peak memory.

    .venv/bin/python bench/files.py [--sizes 128,1024] [--keep]

For each size (MiB) it writes an incompressible file, times whole `memories file add` and
`memories file get -o` processes against a real engine, and compares their MiB/s with raw
AEAD of the same bytes in one process (``seal_chunk`` over 256 KiB chunks: the crypto floor
without IPC, hashing or SQLite; chunks travel as the Wire v1 binary part, 8 MiB per request).
Peak RSS of each CLI process (``wait4`` rusage) and
of the engine (``VmHWM`` after the transfers) are reported per size: they must not grow with
the file. The goal is a ratio ≥ 0.5.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.crypto.chunks import CHUNK_BYTES, seal_chunk  # noqa: E402

PASSWORD = "bench password for files"


def command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "engine.cli", "--home", str(home), *args]


def env() -> dict[str, str]:
    return {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}


def timed(argv: list[str], stdout: int | None = subprocess.DEVNULL) -> tuple[float, int, bytes]:
    """(seconds, peak RSS KiB, stdout) of one whole process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE if stdout is None else stdout, cwd=ROOT)
    out = proc.stdout.read() if proc.stdout is not None else b""
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[4:6]} failed")
    return seconds, usage.ru_maxrss, out


def write_file(path: Path, mib: int) -> None:
    block = hashlib.shake_256(b"bench").digest(1 << 20)
    with open(path, "wb") as out:
        for i in range(mib):
            out.write(i.to_bytes(8, "big") + block[8:])


def raw_aead_seconds(path: Path) -> float:
    key = os.urandom(32)
    size = path.stat().st_size
    total = -(-size // CHUNK_BYTES)
    start = time.perf_counter()
    with open(path, "rb") as source:
        for index in range(total):
            seal_chunk(key, source.read(CHUNK_BYTES), b"bench" + b"body", index, total)
    return time.perf_counter() - start


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
        rows = []
        for mib in (int(s) for s in args.sizes.split(",")):
            source = base / f"f{mib}.bin"
            write_file(source, mib)
            raw = raw_aead_seconds(source)
            add_s, add_kib, out = timed(command(home, "file", "add", str(source), "--json"), stdout=None)
            file_id = json.loads(out)["id"]
            target = base / f"f{mib}.out"
            get_s, get_kib, _ = timed(command(home, "file", "get", file_id, "-o", str(target), "--json"))
            assert target.stat().st_size == source.stat().st_size
            engine_kib = hwm_kib(pid)
            subprocess.run(command(home, "delete", file_id), env=env(), check=True, capture_output=True)
            source.unlink()
            target.unlink()
            raw_rate = mib / raw
            row = {
                "MiB": mib,
                "raw AEAD MiB/s": round(raw_rate, 1),
                "add MiB/s": round(mib / add_s, 1),
                "add ratio": round(mib / add_s / raw_rate, 3),
                "get MiB/s": round(mib / get_s, 1),
                "get ratio": round(mib / get_s / raw_rate, 3),
                "add CLI peak MiB": round(add_kib / 1024, 1),
                "get CLI peak MiB": round(get_kib / 1024, 1),
                "engine peak MiB (so far)": round(engine_kib / 1024, 1),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        subprocess.run(command(home, "daemon", "stop"), env=env(), capture_output=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
