"""Foundation benchmarks (issue 2). One command: `.venv/bin/python bench/foundation.py`.

Prints ratios measured side by side in one run (the machine is shared and noisy):
- put latency in a 100k-asset vault ÷ in a 1k-asset vault (ST-6 target ≤ 2.0)
- unlock time (KDF + opening 10k assets) and the KDF alone
- IPC round trip of desktop_status, p50/p99
- import of 10k Markdown notes: notes per second
- one whole CLI process `memories get ID` against a running daemon
- get of a 1 MiB body vs. raw AEAD of the same bytes in one process
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.config import Paths  # noqa: E402
from engine.ipc.client import IpcClient  # noqa: E402

PASSWORD = "bench password"


def cli(home: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"{args}: {proc.stdout}{proc.stderr}")
    return proc.stdout


def make_vault(home: Path, kdf_ms: str = "10") -> IpcClient:
    cli(home, "init", "--password-stdin", stdin=PASSWORD + "\n", env={"MEMORIES_KDF_TARGET_MS": kdf_ms})
    client = IpcClient(Paths(home).socket, timeout=600)
    client.connect()
    return client


def fill(client: IpcClient, count: int, body_chars: int = 200) -> None:
    batch = 2000
    for start in range(0, count, batch):
        items = [
            {"title": f"note {i}", "body": (f"body {i} " * (body_chars // 8))[:body_chars], "tags": ["bench"]}
            for i in range(start, min(count, start + batch))
        ]
        client.request({"op": "import_batch", "items": items}, timeout=600)


def put_latencies(client: IpcClient, n: int) -> list[float]:
    client.drop_if_stale()  # the engine closes connections idle for minutes (during a long fill)
    out = []
    for i in range(n):
        started = time.perf_counter()
        client.request({"op": "put", "title": f"bench put {i}", "body": "x" * 200})
        out.append(time.perf_counter() - started)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--large", type=int, default=100_000, help="assets in the large vault")
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a smoke run")
    args = parser.parse_args()
    large = 10_000 if args.quick else args.large
    with tempfile.TemporaryDirectory(prefix="memories-bench-") as tmp:
        root = Path(tmp)
        small_home, large_home = root / "small", root / "large"
        small, big = make_vault(small_home), make_vault(large_home)
        fill(small, 1_000)
        started = time.perf_counter()
        fill(big, large)
        print(f"filled {large} assets in {time.perf_counter() - started:.1f} s", flush=True)
        # Interleave rounds so both vaults see the same machine noise.
        small_lat, big_lat = [], []
        for _ in range(5):
            small_lat += put_latencies(small, 40)
            big_lat += put_latencies(big, 40)
        ratio = statistics.median(big_lat) / statistics.median(small_lat)
        print(
            f"put p50: 1k vault {ms(statistics.median(small_lat))}, {large} vault {ms(statistics.median(big_lat))}"
            f" -> ratio {ratio:.2f} (ST-6 target <= 2.0)"
        )

        # IPC round trip of status.
        small.drop_if_stale()
        lat = []
        for _ in range(2000):
            started = time.perf_counter()
            small.request({"op": "desktop_status"})
            lat.append(time.perf_counter() - started)
        print(f"IPC status round trip: p50 {ms(pct(lat, 0.5))}, p99 {ms(pct(lat, 0.99))} (target p50 < 1 ms)")

        # Whole CLI process for `memories get ID`.
        asset = small.request({"op": "list", "limit": 1})["items"][0]["short_id"]
        runs = []
        for _ in range(15):
            started = time.perf_counter()
            cli(small_home, "get", asset)
            runs.append(time.perf_counter() - started)
        print(f"CLI process `memories get ID`: p50 {ms(statistics.median(runs))} (target <= 150 ms)")

        # 1 MiB body: engine get vs raw AEAD in one process.
        from engine.crypto.aead import new_key, open_sealed, seal

        body = ("0123456789abcdef" * 64 + "\n") * 1000  # ~1 MiB
        big_id = small.request({"op": "put", "title": "1 MiB", "body": body})["id"]
        key, raw = new_key(), body.encode()
        get_t, aead_t = [], []
        for _ in range(10):
            started = time.perf_counter()
            small.request({"op": "get", "id": big_id})
            get_t.append(time.perf_counter() - started)
            started = time.perf_counter()
            open_sealed(key, seal(key, raw, b""), b"")
            aead_t.append(time.perf_counter() - started)
        print(
            f"get 1 MiB: {ms(statistics.median(get_t))} vs raw AEAD seal+open {ms(statistics.median(aead_t))}"
            f" -> ratio {statistics.median(get_t) / statistics.median(aead_t):.1f}"
        )

        # Import of 10k Markdown notes through the CLI.
        notes = root / "notes"
        notes.mkdir()
        for i in range(10_000):
            (notes / f"n{i}.md").write_text(f"---\ntitle: Imported {i}\ntags: [md]\n---\n" + f"text {i} " * 60)
        started = time.perf_counter()
        cli(small_home, "import", str(notes))
        took = time.perf_counter() - started
        print(f"import 10k Markdown notes: {took:.1f} s -> {10_000 / took:.0f} notes/s")

        # Unlock with a real, calibrated KDF and 10k assets.
        real_home = root / "real"
        for client in (small, big):
            client.drop_if_stale()
        real = make_vault(real_home, kdf_ms="700")
        fill(real, 10_000)
        real.request({"op": "lock"})
        from engine.store.database import StoreFile

        store = StoreFile.open(Paths(real_home).store)
        started = time.perf_counter()
        store.check_password(PASSWORD)
        kdf = time.perf_counter() - started
        store.close()
        started = time.perf_counter()
        real.request({"op": "unlock", "password": PASSWORD})
        unlock = time.perf_counter() - started
        print(f"unlock 10k assets: {unlock:.2f} s total, KDF alone {kdf:.2f} s (target 0.5-1 s) -> opening {unlock - kdf:.2f} s")

        for client, home in ((small, small_home), (big, large_home), (real, real_home)):
            client.close()
            cli(home, "daemon", "stop")


if __name__ == "__main__":
    main()
