"""Unlock benchmark (issue 20): how long after the KDF a 10k vault answers content ops.

    .venv/bin/python bench/unlock.py [--notes 10000] [--rounds 5] [--home DIR] [--baseline ROOT]

Builds (or reuses, with ``--home``) a vault of N mixed-language notes with the product's
calibrated KDF, then measures in interleaved rounds, over the real IPC socket of a real
daemon:

  * KDF alone — one Argon2id derivation with the store's own parameters, in this process;
  * running engine — ``lock``, then (once the engine has re-executed and warmed up again,
    ST-12: a few seconds) ``unlock`` + the first ``get`` (+ ``list``, + ``search``), timed
    from the unlock request: the usual unlock (Jieba's dictionary already loaded);
  * unlock right after lock — the same with no pause: the engine is still re-executing
    (ST-12) when the unlock arrives, the worst case of what that restart costs;
  * fresh engine — a daemon started just before the unlock: its dictionary load (if the
    segmenter needs one) competes with the unlock;
  * locked in place — the peer for "unlock right after lock": the same checkout's engine
    with ``MEMORIES_TEST_FAULTS=lock_in_place``, whose lock keeps the process as every lock
    did before ST-12 (a long-running engine, locked and unlocked), on its own copy of the
    vault, measured in the same interleaved rounds. The last line prints the ratio of unlock
    + first ``get`` beyond the KDF, just re-executed / locked in place.

"Beyond the KDF" is unlock-to-first-answer minus the KDF measured in the same round.
Issue 20's target: the first ``get`` ≤ 0.3 s beyond the KDF. ``--baseline ROOT`` runs the
same rounds against another checkout's engine (e.g. ``git worktree add /tmp/base HEAD~3``)
on a copy of the same vault, interleaved, so before and after come from one run.
"""

from __future__ import annotations

import argparse
import compileall
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.search import note  # noqa: E402
from engine.config import Paths  # noqa: E402
from engine.crypto.kdf import derive_key  # noqa: E402
from engine.errors import MemoriesError  # noqa: E402
from engine.ipc.client import IpcClient  # noqa: E402
from engine.store.database import StoreFile  # noqa: E402

PASSWORD = "bench password"
# After a lock the engine re-executes (ST-12) and warms its dictionary again 3 s later
# (engine/daemon.py WARM_AFTER_SECONDS): the "running engine" unlock comes after that.
RESETTLE_SECONDS = 6.0


def cli(root: Path, home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORIES_KDF_TARGET_MS"}  # the product's KDF
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=root,  # the daemon this starts runs that checkout's engine
        env=env,
        check=True,
    )


def build_vault(home: Path, notes: int) -> None:
    cli(ROOT, home, "init", "--password-stdin", stdin=PASSWORD + "\n")
    rng = random.Random(7)
    started = time.perf_counter()
    with IpcClient(Paths(home).socket) as client:
        for start in range(0, notes, 500):
            items = [note(rng, i) for i in range(start, min(notes, start + 500))]
            client.request({"op": "import_batch", "items": items}, timeout=600)
    print(f"built a vault of {notes} notes in {time.perf_counter() - started:.0f} s")
    cli(ROOT, home, "daemon", "stop")


@dataclass
class Engine:
    """One checkout's daemon on its own copy of the vault, and its measured rounds."""

    name: str
    root: Path
    home: Path
    asset: str = ""
    faults: str = ""  # MEMORIES_TEST_FAULTS for its daemon (the in-place peer)
    kdf: list[float] = field(default_factory=list)
    # label -> op -> seconds from the unlock request until that op answered, minus the KDF
    beyond: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # label -> seconds from the unlock request until the first get answered (KDF included)
    total: dict[str, list[float]] = field(default_factory=dict)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("MEMORIES_KDF_TARGET_MS", "MEMORIES_TEST_FAULTS")}
        if self.faults:
            env["MEMORIES_TEST_FAULTS"] = self.faults
        subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "--home", str(self.home), "daemon", "run"],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with IpcClient(Paths(self.home).socket) as client:
                    client.request({"op": "daemon_info"})
                return
            except (OSError, MemoriesError):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{self.name}: the daemon did not start") from None
                time.sleep(0.01)

    def stop(self) -> None:
        cli(self.root, self.home, "daemon", "stop")

    def round(self, label: str, params: Any) -> None:
        with IpcClient(Paths(self.home).socket) as client:
            started = time.perf_counter()
            derive_key(PASSWORD, params)
            kdf = time.perf_counter() - started
            self.kdf.append(kdf)
            if label != "fresh engine":
                client.request({"op": "lock"})
            if label == "running engine":
                time.sleep(RESETTLE_SECONDS)
            answered: dict[str, float] = {}
            started = time.perf_counter()
            client.request({"op": "unlock", "password": PASSWORD}, timeout=120)
            answered["unlock"] = time.perf_counter()
            client.request({"op": "get", "id": self.asset}, timeout=120)
            answered["first get"] = time.perf_counter()
            client.request({"op": "list", "limit": 20}, timeout=120)
            answered["then list"] = time.perf_counter()
            client.request({"op": "search", "query": "coffee travel", "wait_ms": 0}, timeout=120)
            answered["then search (partial ok)"] = time.perf_counter()
            self.total.setdefault(label, []).append(answered["first get"] - started)
            ops = self.beyond.setdefault(label, {})
            for op, at in answered.items():
                ops.setdefault(op, []).append(at - started - kdf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--home", type=Path, help="reuse (or build and keep) the vault in this data home")
    parser.add_argument("--baseline", type=Path, help="another checkout's engine, measured on a copy of the same vault")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memories-bench-unlock-") as tmp:
        source = args.home or Path(tmp) / "source"
        if not Paths(source).store.exists():
            build_vault(source, args.notes)
        engines = [Engine("this checkout", ROOT, Path(tmp) / "this")]
        if args.baseline is not None:
            engines.append(Engine(f"baseline {args.baseline}", args.baseline.resolve(), Path(tmp) / "baseline"))
        in_place = Engine("locked in place, as before ST-12", ROOT, Path(tmp) / "in-place", faults="lock_in_place")
        for root in {engine.root for engine in engines}:
            # As an install has them (pip compiles on install): a checkout run with
            # PYTHONDONTWRITEBYTECODE would otherwise compile every module at every engine start.
            compileall.compile_dir(root / "engine", quiet=1)
        for engine in [*engines, in_place]:
            shutil.copytree(source, engine.home, ignore=shutil.ignore_patterns("*.sock", "engine.lock", "run", "logs"))
        store = StoreFile.open(Paths(engines[0].home).store)
        params = store.kdf
        store.close()
        load = os.getloadavg()[0]
        print(f"KDF: Argon2id opslimit {params.opslimit}, memlimit {params.memlimit >> 20} MiB; load average {load:.1f}")
        try:
            for engine in [*engines, in_place]:
                engine.start()
                with IpcClient(Paths(engine.home).socket) as client:
                    client.request({"op": "unlock", "password": PASSWORD}, timeout=120)
                    engine.asset = client.request({"op": "list", "limit": 1})["items"][0]["id"]
            order = random.Random(20)
            for _ in range(args.rounds):
                for engine in order.sample(engines, len(engines)):
                    time.sleep(2)  # let the previous unlock's background work (index, signatures) settle
                    engine.round("running engine", params)
                for engine in order.sample([*engines, in_place], len(engines) + 1):
                    time.sleep(2)
                    engine.round("unlock right after lock", params)
                for engine in order.sample(engines, len(engines)):
                    engine.stop()
                    engine.start()
                    engine.round("fresh engine", params)
        finally:
            for engine in [*engines, in_place]:
                subprocess.run(
                    [sys.executable, "-m", "engine.cli", "--home", str(engine.home), "daemon", "stop"],
                    cwd=engine.root,
                    capture_output=True,
                    check=False,
                )
        print(f"{args.rounds} interleaved rounds; medians; load average now {os.getloadavg()[0]:.1f}")
        for engine in engines:
            kdf = statistics.median(engine.kdf)
            print(f"[{engine.name}] KDF alone: {kdf * 1000:.0f} ms")
            for label, ops in engine.beyond.items():
                shown = ", ".join(f"{op} +{statistics.median(v) * 1000:.0f} ms" for op, v in ops.items())
                print(f"  {label}: beyond the KDF: {shown}")
            get = statistics.median(engine.beyond["running engine"]["first get"])
            print(f"  first get after unlock, running engine: {get * 1000:.0f} ms beyond the KDF (target <= 300 ms)")
            worst = max(engine.beyond["unlock right after lock"]["unlock"])
            print(f"  unlock right after lock, slowest round: {worst * 1000:.0f} ms beyond the KDF (ST-12 target <= 1000 ms)")
        label = "unlock right after lock"
        peer = statistics.median(in_place.beyond[label]["first get"])
        peer_total = statistics.median(in_place.total[label])
        print(f"[{in_place.name}] {label}: first get {peer * 1000:.0f} ms beyond the KDF")
        for engine in engines:
            ours = statistics.median(engine.beyond[label]["first get"])
            ours_total = statistics.median(engine.total[label])
            # The ratio of the whole wait (KDF included) stays meaningful on a loaded machine,
            # where the KDF measured here and the one in the engine can differ by seconds.
            print(
                f"unlock + first get right after a lock, [{engine.name}] re-executed / locked in place: "
                f"{ours_total * 1000:.0f} / {peer_total * 1000:.0f} ms = {ours_total / peer_total:.2f}x "
                f"(beyond the KDF: {ours * 1000:.0f} / {peer * 1000:.0f} ms)"
            )


if __name__ == "__main__":
    main()
