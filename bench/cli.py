"""CLI start-up benchmark (issues 19, 20): whole-process medians next to a bare interpreter.

    .venv/bin/python bench/cli.py [--notes 10000] [--runs 15]

Builds a temp home with N notes (``memories import`` of a generated JSONL file), unlocks
it, byte-compiles engine/ (as an installed wheel is; PYTHONDONTWRITEBYTECODE would
otherwise make every run compile the CLI's modules), then times whole ``memories``
processes (the venv's console script, else ``python -m engine.cli``) for ``get ID``,
``search WORD``, ``search RARE``, ``list --json`` (100 items) and ``status``, each ``--runs`` times,
interleaved with ``python -c pass`` of the same interpreter. ``search WORD`` looks for a word
nearly every note holds (≈95% match: the engine ranks every match), ``search RARE`` for one
that ten notes in 10,000 hold, as most real queries are. Prints each median, its
ratio to the bare interpreter, the goal of issue 20, and the median CPU time of the
``memories`` process itself (user + system, without the engine's share).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import stat
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
# In one note of every RARE_EVERY: what a realistic, selective query finds.
RARE_WORD = "zeppelin"
RARE_EVERY = 1000


def _env(root: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MEMORIES_HOME", None)
    env.pop("PYTHONUNBUFFERED", None)  # as a user's shell runs it (some CI machines set it)
    env["MEMORIES_KDF_TARGET_MS"] = "10"  # the unlock is not what is measured here
    env["PYTHONPATH"] = str(root)
    return env


def _memories(home: Path, *args: str, stdin: str | None = None, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(root),
        cwd=root,
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
            if i % RARE_EVERY == RARE_EVERY // 2:
                body += " " + RARE_WORD
            tags = [rng.choice(WORDS[:6])]
            out.write(json.dumps({"title": f"note {i} {rng.choice(WORDS)}", "body": body, "tags": tags}) + "\n")
    _must(_memories(home, "import", str(jsonl)))
    listed = json.loads(_must(_memories(home, "list", "--limit", "1", "--json")))
    short_id: str = listed["items"][0]["short_id"]
    return short_id


def copy_home(home: Path, copy: Path, root: Path) -> Path:
    """The bench vault copied (engine stopped), unlocked by an engine started from ``root``:
    the older checkout's engine serves its copy, so engine-side changes are compared too."""
    _must(_memories(home, "daemon", "stop"))
    shutil.copytree(home, copy, ignore=lambda d, names: [n for n in names if stat.S_ISSOCK(os.lstat(Path(d, n)).st_mode)])
    for where, root_ in ((home, ROOT), (copy, root)):
        _must(_memories(where, "unlock", "--password-stdin", stdin=PASSWORD + "\n", root=root_))
    return copy


def settle(home: Path) -> None:
    """Wait until the engine's search index is complete and its word postings have caught up
    (a second after the build): a user's searches a few seconds after an unlock see that state."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        index = json.loads(_must(_memories(home, "rag", "status", "--json"))).get("index", {})
        if index.get("state") == "ready" and not index.get("postings_waiting"):
            return
        time.sleep(0.2)
    raise SystemExit("the bench vault's search index did not settle within 120 s")


def _time(cmd: list[str], root: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process itself) of one run of ``cmd`` from ``root``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(root), cwd=root
    )
    _, _, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = 0  # reaped above
    return wall, usage.ru_utime + usage.ru_stime


def _memories_command(home: Path) -> list[str]:
    """What a user runs: the venv's `memories` console script when there is one."""
    script = Path(sys.executable).with_name("memories")
    if script.exists():
        return [str(script), "--home", str(home)]
    return [sys.executable, "-m", "engine.cli", "--home", str(home)]


# Issue 20's goals: whole-process time as a multiple of `python -c pass`, same run.
GOALS = {"get ID": 1.5, "search WORD": 1.8, "search RARE": 1.8, "list --json": 2.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000, help="notes in the bench vault")
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    parser.add_argument(
        "--before",
        type=Path,
        help="also time this checkout (e.g. a `git worktree` of an older commit) in the same rounds: its CLI, "
        "and its engine, serving a copy of the bench vault",
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memories-bench-cli-") as tmp:
        home = Path(tmp) / "home"
        print(f"building a {options.notes}-note vault …", flush=True)
        short_id = build_vault(home, options.notes)
        roots = [ROOT, *([options.before.resolve()] if options.before else [])]
        for root in roots:
            subprocess.run(
                [sys.executable, "-m", "compileall", "-q", str(root / "engine")], check=True, stdout=subprocess.DEVNULL
            )
        base = _memories_command(home)
        reads = {
            "get ID": ["get", short_id],
            "search WORD": ["search", "sourdough"],
            "search RARE": ["search", RARE_WORD],
            "list --json": ["list", "--json"],
        }
        runs: dict[str, tuple[list[str], Path]] = {"python -c pass": ([sys.executable, "-c", "pass"], ROOT)}
        runs.update({name: ([*base, *args], ROOT) for name, args in {**reads, "status": ["status"]}.items()})
        if options.before:  # the older checkout's engine package comes first on its path
            old_home = copy_home(home, Path(tmp) / "home-before", roots[1])
            old = [sys.executable, "-m", "engine.cli", "--home", str(old_home)]
            runs.update({f"before: {name}": ([*old, *args], roots[1]) for name, args in reads.items()})
        commands = {name: cmd for name, (cmd, _) in runs.items()}
        settle(home)
        for cmd, root in runs.values():  # warm the page cache and the engine's caches
            _time(cmd, root)
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(options.runs):
            for name, (cmd, root) in runs.items():  # interleaved: drift hits every command alike
                wall, cpu = _time(cmd, root)
                walls[name].append(wall)
                cpus[name].append(cpu)
        _memories(home, "daemon", "stop")
        if options.before:
            _memories(old_home, "daemon", "stop", root=roots[1])
    bare = statistics.median(walls["python -c pass"])
    bare_cpu = statistics.median(cpus["python -c pass"])
    print(f"{base[0]} … ({options.notes} notes, {options.runs} interleaved runs, load {os.getloadavg()[0]:.1f})")
    print(f"{'command':<22}{'median ms':>10}{'× python':>10}{'goal':>7}{'cpu ms':>9}{'cpu ×':>7}")
    for name in commands:
        median, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        goal = f"≤{GOALS[name]:.1f}" if name in GOALS else ""
        print(f"{name:<22}{median * 1000:>10.1f}{median / bare:>10.2f}{goal:>7}{cpu * 1000:>9.1f}{cpu / bare_cpu:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
