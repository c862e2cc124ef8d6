"""Scale benchmark (issue 32): one vault of N notes and one of 2N, the same figures for both and
their ratio, through the real CLI and a real engine.

    .venv/bin/python bench/scale.py [--notes 10000]      # 10k and 20k (a few minutes)
    .venv/bin/python bench/scale.py --notes 100000 --single   # 100k alone, by hand

For each vault (mixed English/Chinese notes of ~500 characters, two tags each, a link to an
earlier note), imported from one JSONL file into a fresh home (test KDF: the KDF is not what
is measured), it prints:

* import notes/s, and the time from the import's return until search is complete;
* lock, unlock, then the first `get`: seconds beyond the unlock command, and the time from
  the unlock until search is complete again (the index is rebuilt after every unlock);
* search latency, median of 5 whole commands: a rare word (one note in 1,000), a common one
  (most notes), three words;
* `list --all --json`, the first after the unlock and again: wall seconds, and the engine's
  and the CLI's CPU seconds (on a shared machine the wall figure mostly measures the
  scheduler; CPU seconds show whether the work grows linearly);
* engine RSS steady (after the searches) and peak (VmHWM), store bytes (the home's files).

With two sizes it prints each 2N ÷ N ratio: linear work shows about 2.0. Ratios and figures
only; it asserts nothing beyond each command succeeding.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cli import settle  # noqa: E402 - waits for the index and its postings
from bench.search import note as search_note  # noqa: E402 - one note generator for the benches
from tests.data import make_search_eval as ev  # noqa: E402 - the evaluation set's vocabulary

PASSWORD = "bench vault password that is long enough"
RARE = "zyxwvquartz"  # in one note of every RARE_EVERY
RARE_EVERY = 1000
COMMON = "mattered"  # in most English sentences of the generator
THREE = "passport marathon kyoto"


def _memories(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORIES_KDF_TARGET_MS": "10", "PYTHONPATH": str(ROOT)}
    env.pop("MEMORIES_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"memories {' '.join(args[:2])} failed: {proc.stdout[:300]} {proc.stderr[:300]}")
    return proc


def write_notes(path: Path, count: int) -> None:
    rng = random.Random(32)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(count):
            item: dict[str, Any] = dict(search_note(rng, i))
            body = str(item["body"])
            if i % RARE_EVERY == RARE_EVERY // 2:
                body += f" {RARE}"
            if i:
                body += f"\n\nSee [[Note {rng.randrange(i)}]]."
            item["body"] = body
            item["tags"] = sorted({rng.choice(ev.DAYS), rng.choice(("work", "home", "travel", "旅行", "工作"))})
            out.write(json.dumps(item, ensure_ascii=False) + "\n")


def _engine_pid(home: Path) -> int:
    return int(json.loads(_memories(home, "daemon", "status", "--json").stdout)["pid"])


def _proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _until_search_complete(home: Path) -> float:
    start = time.perf_counter()
    found = json.loads(_memories(home, "search", RARE, "--mode", "lexical", "--wait", "600", "--json").stdout)
    if found.get("partial") is not False or not found.get("results"):
        raise SystemExit(f"search did not complete: {json.dumps(found)[:300]}")
    return time.perf_counter() - start


def _timed(home: Path, *args: str) -> float:
    start = time.perf_counter()
    _memories(home, *args)
    return time.perf_counter() - start


def measure(work: Path, count: int) -> dict[str, float]:
    home = work / f"home-{count}"
    source = work / f"notes-{count}.jsonl"
    write_notes(source, count)
    _memories(home, "init", "--password-stdin", stdin=PASSWORD + "\n")
    figures: dict[str, float] = {}
    try:
        seconds = _timed(home, "import", str(source), "--json")
        figures["import notes/s"] = count / seconds
        figures["search complete after import, s"] = _until_search_complete(home)
        short_id = json.loads(_memories(home, "list", "--limit", "1", "--json").stdout)["items"][0]["short_id"]
        _memories(home, "lock")
        unlocked = time.perf_counter()
        _memories(home, "unlock", "--password-stdin", stdin=PASSWORD + "\n")
        unlock_s = time.perf_counter() - unlocked
        figures["first get after unlock, s"] = _timed(home, "get", short_id)
        figures["unlock command, s (test KDF)"] = unlock_s
        figures["search complete after unlock, s"] = time.perf_counter() - unlocked + _until_search_complete(home)
        # The word postings catch up for about a second after the index is complete: wait, so
        # that the engine CPU read around `list` below is the list's alone.
        settle(home)
        pid = _engine_pid(home)
        for name, query in (("rare", RARE), ("common", COMMON), ("3 words", THREE)):
            figures[f"search {name}, s"] = statistics.median(_timed(home, "search", query) for _ in range(5))
        for when in ("first", "again"):  # the first after an unlock opens every summary
            cpu_before, cli_before = _cpu(pid), os.times().children_user + os.times().children_system
            figures[f"list --all --json ({when}), s"] = _timed(home, "list", "--all", "--json")
            figures[f"list --all ({when}) engine CPU, s"] = _cpu(pid) - cpu_before
            figures[f"list --all ({when}) CLI CPU, s"] = os.times().children_user + os.times().children_system - cli_before
        figures["engine RSS steady, MiB"] = _proc_status(pid, "VmRSS") / 2**20
        figures["engine RSS peak, MiB"] = _proc_status(pid, "VmHWM") / 2**20
        figures["store bytes, MB"] = sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) / 1e6
    finally:
        subprocess.run(
            [sys.executable, "-m", "engine.cli", "--home", str(home), "daemon", "stop"],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
            timeout=120,
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000, help="notes in the first vault (the second has twice as many)")
    parser.add_argument("--single", action="store_true", help="only the vault of --notes notes (e.g. 100k by hand)")
    args = parser.parse_args()
    sizes = [args.notes] if args.single else [args.notes, 2 * args.notes]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="memories-bench-scale-") as tmp:
        results = {size: measure(Path(tmp), size) for size in sizes}
    header = "".join(f"{size:>14,}" for size in sizes) + ("   ratio" if len(sizes) == 2 else "")
    print(f"{'notes':38s}{header}")
    for name in results[sizes[0]]:
        row = "".join(f"{results[size][name]:14.3f}" for size in sizes)
        if len(sizes) == 2 and results[sizes[0]][name]:
            row += f"   {results[sizes[1]][name] / results[sizes[0]][name]:5.2f}×"
        print(f"{name:38s}{row}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
