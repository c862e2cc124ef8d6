"""CLI start-up benchmark (issue 19): whole-process medians next to a bare interpreter.

    .venv/bin/python bench/cli.py [--notes 10000] [--runs 15]

Builds a temp home with N notes (``memories import`` of a generated JSONL file), unlocks
it, then times whole ``memories`` processes (``python -m engine.cli …``, what the console
script runs) for ``get ID``, ``list``, ``search WORD`` and ``status``, each ``--runs`` times,
interleaved with ``python -c pass``. Prints the medians and each one's ratio to the bare
interpreter. The target: ``get`` stays within 1.1× of its cost before issue 19.
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

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "bench password"
WORDS = [
    "memory",
    "vault",
    "encryption",
    "key",
    "coffee",
    "travel",
    "budget",
    "meeting",
    "project",
    "database",
    "backup",
    "garden",
    "piano",
    "marathon",
    "passport",
    "router",
    "printer",
    "sourdough",
    "review",
    "postgres",
    "kyoto",
    "lisbon",
    "weekend",
    "library",
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MEMORIES_HOME", None)
    env["MEMORIES_KDF_TARGET_MS"] = "10"  # the unlock is not what is measured here
    env["PYTHONPATH"] = str(ROOT)
    return env


def _memories(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        check=False,
    )


def _must(proc: subprocess.CompletedProcess[str]) -> str:
    if proc.returncode != 0:
        raise SystemExit(f"bench setup failed: {proc.args[4:]}: {proc.stdout} {proc.stderr}")
    return proc.stdout


def build_vault(home: Path, notes: int) -> str:
    """A vault with ``notes`` memories; returns the short ID of one of them."""
    rng = random.Random(19)
    _must(_memories(home, "init", "--password-stdin", stdin=PASSWORD + "\n"))
    jsonl = home.parent / "notes.jsonl"
    with open(jsonl, "w", encoding="utf-8") as out:
        for i in range(notes):
            body = " ".join(rng.choice(WORDS) for _ in range(70))
            tags = [rng.choice(WORDS[:6])]
            out.write(json.dumps({"title": f"note {i} {rng.choice(WORDS)}", "body": body, "tags": tags}) + "\n")
    _must(_memories(home, "import", str(jsonl)))
    listed = json.loads(_must(_memories(home, "list", "--limit", "1", "--json")))
    short_id: str = listed["items"][0]["short_id"]
    return short_id


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT, check=False
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000, help="notes in the bench vault")
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memories-bench-cli-") as tmp:
        home = Path(tmp) / "home"
        print(f"building a {options.notes}-note vault …", flush=True)
        short_id = build_vault(home, options.notes)
        base = [sys.executable, "-m", "engine.cli", "--home", str(home)]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "get ID": [*base, "get", short_id],
            "list": [*base, "list"],
            "search WORD": [*base, "search", "sourdough"],
            "status": [*base, "status"],
        }
        for cmd in commands.values():  # warm the page cache and the engine's caches
            _time(cmd)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(options.runs):
            for name, cmd in commands.items():  # interleaved: drift hits every command alike
                samples[name].append(_time(cmd))
        _memories(home, "daemon", "stop")
    bare = statistics.median(samples["python -c pass"])
    print(f"{'command':<16}{'median ms':>10}{'× python':>10}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<16}{median * 1000:>10.1f}{median / bare:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
