"""Import benchmark (issue 20): notes/s and time until search is complete, one command, one run.

    .venv/bin/python bench/import.py [--notes 10000] [--before DIR] [--rounds 1]

Writes N mixed Chinese/English notes (~500 characters each) as one JSONL file and as a
folder of Markdown files, then, end to end through the real CLI and a real daemon on a
fresh vault (test KDF, like bench/moving.py):

* times `memories import notes.jsonl` and `memories import notes/` (notes/s);
* right after the import returns, times `memories search` of a word found only in the last
  note, waiting for the index: the time until search is complete (not partial) and finds it;
* reads the CPU seconds the daemon and the CLI used until the import returned and until
  search was complete: on a loaded machine the wall-clock figures mostly measure the
  scheduler, notes per CPU-second do not;
* segments the same notes in this process with raw `jieba.cut_for_search`, raw `rjieba.cut`
  and the engine's Segmenter (notes/s each), and times rjieba's one-time dictionary load
  against Jieba's (uncached build and cached load), and prints the engine's segmenter speed
  as a ratio to raw `rjieba.cut`, the two interleaved note by note (issue 32).

With ``--before DIR`` (a checkout of an older commit, e.g. made with
``git archive COMMIT | tar -x -C DIR``) the same imports also run against that tree's engine,
interleaved with ours, so "before" and "after" come from the same run on the same load.
Prints; asserts nothing beyond each import and search succeeding.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.search import note as search_note  # noqa: E402 - one note generator for the benches
from tests.data import make_search_eval as ev  # noqa: E402 - the evaluation set's vocabulary

VAULT_PASSWORD = "bench vault password that is long enough"
MARK = "zyxwvquartz"  # a word only the last note holds


def note(rng: random.Random, i: int) -> dict[str, Any]:
    """bench/search.py's ~500-character mixed English/Chinese note, plus one tag."""
    item: dict[str, Any] = dict(search_note(rng, i))
    item["tags"] = [rng.choice(ev.DAYS)]
    return item


def write_sources(work: Path, count: int) -> tuple[Path, Path, list[dict[str, object]]]:
    rng = random.Random(20)
    notes = [note(rng, i) for i in range(count)]
    notes[-1]["body"] = f"{notes[-1]['body']} {MARK}"
    jsonl = work / "notes.jsonl"
    with open(jsonl, "w", encoding="utf-8") as out:
        for item in notes:
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
    folder = work / "notes"
    folder.mkdir()
    for i, item in enumerate(notes):
        # Zero-padded names: the folder walk is in name order, so the last note is imported last.
        text = f"---\ntitle: {json.dumps(item['title'], ensure_ascii=False)}\ntags: [{item['tags'][0]}]\n---\n{item['body']}\n"
        (folder / f"{i:06d}.md").write_text(text, encoding="utf-8")
    return jsonl, folder, notes


def _memories(tree: Path, home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORIES_KDF_TARGET_MS": "10", "PYTHONPATH": str(tree)}
    env.pop("MEMORIES_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
        timeout=3600,
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_import(tree: Path, source: Path, work: Path, count: int) -> tuple[float, float, float, float]:
    """(seconds for `memories import`, seconds from its return until search is complete and finds the
    last note, CPU seconds of daemon and CLI until the import returned, and until search was complete).

    On a loaded machine the wall-clock figures mostly measure the scheduler; the CPU seconds do not.
    """
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    init = _memories(tree, home, "init", "--password-stdin", stdin=VAULT_PASSWORD + "\n")
    if init.returncode != 0:
        raise SystemExit(f"init failed: {init.stderr}")
    try:
        status = json.loads(_memories(tree, home, "daemon", "status", "--json").stdout)
        daemon = int(status["pid"])
        cpu_before = _cpu_seconds(daemon) + _children_cpu()
        start = time.perf_counter()
        proc = _memories(tree, home, "import", str(source), "--json")
        imported = time.perf_counter()
        cpu_import = _cpu_seconds(daemon) + _children_cpu() - cpu_before
        if proc.returncode != 0:
            raise SystemExit(f"import failed: {proc.stdout} {proc.stderr}")
        created = json.loads(proc.stdout)["created"]
        if created != count:
            raise SystemExit(f"imported {created} of {count}")
        found = _memories(tree, home, "search", MARK, "--mode", "lexical", "--wait", "600", "--json")
        searchable = time.perf_counter()
        result = json.loads(found.stdout) if found.returncode == 0 else {}
        if result.get("partial") is not False or len(result.get("results", [])) != 1:
            raise SystemExit(f"search after import: {found.stdout[:300]} {found.stderr[:300]}")
        return imported - start, searchable - imported, cpu_import, _cpu_seconds(daemon) + _children_cpu() - cpu_before
    finally:
        _memories(tree, home, "daemon", "stop")


def segmenter_rates(notes: list[dict[str, object]]) -> None:
    texts = [f"{n['title']} {n['body']}" for n in notes]
    private = tempfile.mkdtemp(prefix="bench-jieba-")
    try:
        import jieba

        jieba.setLogLevel(60)
        jieba.dt.tmp_dir = private  # Jieba's own cache in a private directory, never the shared TMPDIR
        t0 = time.perf_counter()
        jieba.initialize()
        jieba_build = time.perf_counter() - t0
        jieba.dt.initialized = False
        t0 = time.perf_counter()
        jieba.initialize()
        jieba_cached = time.perf_counter() - t0
    finally:
        shutil.rmtree(private, ignore_errors=True)
    t0 = time.perf_counter()
    import rjieba

    rjieba_load = time.perf_counter() - t0
    from engine.search.segment import Segmenter

    segmenter = Segmenter()
    segmenter.warm()
    rates: dict[str, float] = {}
    for name, cut in (
        ("jieba.cut_for_search", lambda t: list(jieba.cut_for_search(t))),
        ("jieba.lcut (the engine's former mode)", lambda t: jieba.lcut(t, HMM=True)),
        ("rjieba.cut", lambda t: rjieba.cut(t, True)),
        ("rjieba.cut_for_search", lambda t: rjieba.cut_for_search(t, True)),
        ("engine Segmenter.segment (fold, t2s, rjieba, bigrams)", segmenter.segment),
    ):
        t0 = time.perf_counter()
        for text in texts:
            cut(text)
        rates[name] = len(texts) / (time.perf_counter() - t0)
    base = rates["jieba.cut_for_search"]
    print(f"segmentation of the same {len(texts)} notes (in this process):")
    for name, rate in rates.items():
        print(f"  {name:55s} {rate:9.0f} notes/s  ({rate / base:5.1f}× jieba.cut_for_search)")
    # Issue 32's figure: the engine's segmenter against raw rjieba.cut on the same notes, the
    # two interleaved note by note so load drift hits both alike (goal ≥ 0.8×).
    raw_s = ours_s = 0.0
    for _ in range(3):
        for text in texts:
            t0 = time.perf_counter()
            rjieba.cut(text, True)
            t1 = time.perf_counter()
            segmenter.segment(text)
            raw_s += t1 - t0
            ours_s += time.perf_counter() - t1
    print(f"  engine Segmenter.segment ÷ raw rjieba.cut (speed, interleaved): {raw_s / ours_s:.2f}× (goal ≥ 0.8×)")
    print(
        f"dictionary load: rjieba import {rjieba_load:.2f} s (in memory, no file); Jieba build {jieba_build:.2f} s, "
        f"Jieba from its cache file {jieba_cached:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=10_000)
    parser.add_argument("--before", type=Path, help="an older checkout to run the same imports against, interleaved")
    parser.add_argument("--rounds", type=int, default=1, help="repeat each import this many times (medians)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        jsonl, folder, notes = write_sources(work, args.notes)
        trees = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
        figures: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
        for _ in range(args.rounds):
            for kind, source in (("JSONL", jsonl), ("Markdown folder", folder)):
                for label, tree in trees:
                    figures.setdefault((label, kind), []).append(time_import(tree, source, work, args.notes))
        for (label, kind), runs in figures.items():
            seconds = statistics.median(r[0] for r in runs)
            until = statistics.median(r[1] for r in runs)
            cpu_import = statistics.median(r[2] for r in runs)
            cpu = statistics.median(r[3] for r in runs)
            print(
                f"[{label}] import {args.notes} notes from {kind}: {seconds:.2f} s = {args.notes / seconds:.0f} notes/s; "
                f"search complete {until:.2f} s after the import returned\n"
                f"    CPU of daemon + CLI: {cpu_import:.2f} s until the import returned "
                f"({args.notes / cpu_import:.0f} notes per CPU-second), {cpu:.2f} s until search was complete "
                f"({args.notes / cpu:.0f} notes per CPU-second)"
            )
        if args.before:
            for kind in ("JSONL", "Markdown folder"):
                after = statistics.median(r[0] for r in figures[("after", kind)])
                before = statistics.median(r[0] for r in figures[("before", kind)])
                print(f"{kind}: after/before notes/s = {before / after:.2f}×")
        segmenter_rates(notes)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
