"""`list` at 10k and 100k notes (issue 32): the first and second `list --all --json` after an
unlock (engine CPU), and engine RSS before and after the first `list --all --sort title` and
`list --all --tag`, with ``--before`` another checkout measured in the same run, interleaved.

    .venv/bin/python bench/list_scale.py --notes 100000 --before /work/wt/base-rss

It uses the vaults bench/scale.py builds and caches under $TMPDIR (a run of this builds them if
they are missing: minutes at 100k). Each measurement runs on a fresh copy of the cached vault,
with a daemon started from that checkout (its engine package first on the path), idle before the
unlock, and the unlock's background work (the signature check of every revision) done before
anything is measured. Figures only: it asserts nothing beyond each command succeeding.

One run (issue 32), the code before (4469dcb) and after (f9d3d81), interleaved, load average
8.6-9.3 on the 2 cores (engine CPU in clock ticks of 10 ms: the 10k ratios are coarse), 10k / 100k:

                                         before                   after
list --all first, engine CPU s     0.48 / 6.18 (12.9x)     0.48 / 5.65 (11.8x)
list --all second, engine CPU s    0.12 / 1.52 (12.7x)     0.12 / 1.37 (11.4x)
first --sort title / first --tag   2.19 / 0.32 s            2.22 / 0.36 s  (at 100k)
--sort title again                 1.52 s                   1.57 s         (at 100k)
RSS at 100k before the title sort  574 MiB, peak 583        575 MiB, peak 584
RSS at 100k after it and --tag     642 MiB, peak 654        584 MiB, peak 593

What the title order and tag sets held at 100k (in process): before, per item the case-folded
title, a tuple of tags and three tuples, and a set per tag (~61-68 MiB resident); after, a dict
of references to the heads (5 MiB), the sorted ID lists (1.5 MiB) and the tag lists (1.6 MiB).
What is left of the list's super-linearity is per-row memory latency: in process, with the
collector off, the second list costs 6.2 / 8.0 us a row at 10k / 100k (the same functions, each a
little slower over the larger state); the full collections after each page had rescanned the
~400k objects the unlock's background work built (0.3 s of 1.3 s at 100k), now frozen like the
unlock's own state (engine/service/memory.keep_built).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import BASE, _cpu, _ok, _proc_status, _until_idle, _until_settled, build  # noqa: E402
from tests.helpers import Cli  # noqa: E402

MIB = 2**20


@dataclass
class CheckoutCli(Cli):
    """The CLI, and the daemon it starts, of another checkout: its engine package first on the path."""

    root: Path = ROOT

    def environ(self) -> dict[str, str]:
        return {**super().environ(), "PYTHONPATH": str(self.root)}


def measure(root: Path, count: int, cached: Path, work: Path) -> dict[str, float]:
    run = work / f"run-{count}"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(cached / "a", run, ignore=shutil.ignore_patterns("run", "engine.lock", "*.sock"))
    cli = CheckoutCli(home=run, root=root, cwd=root, timeout=600)
    figures: dict[str, float] = {}
    try:
        _ok(cli, "daemon", "start")
        pid = int(_ok(cli, "daemon", "status")["pid"])
        loaded = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"PYTHONPATH={root}".encode() in loaded, "the daemon does not run the checkout's engine"
        _until_idle(pid)
        cli.unlock()
        _until_settled(cli)
        _until_idle(pid)
        for when in ("first", "second"):
            before = _cpu(pid)
            listed = _ok(cli, "list", "--all")
            figures[f"list --all ({when}) engine CPU, s"] = _cpu(pid) - before
        figures["RSS steady before title sort, MiB"] = _proc_status(pid, "VmRSS") / MIB
        figures["RSS peak before title sort, MiB"] = _proc_status(pid, "VmHWM") / MIB
        tag = next(tag for item in listed["items"] for tag in item["tags"])
        before = _cpu(pid)
        _ok(cli, "list", "--all", "--sort", "title")
        figures["list --all --sort title (first) engine CPU, s"] = _cpu(pid) - before
        before = _cpu(pid)
        _ok(cli, "list", "--all", "--tag", tag)
        figures["list --all --tag (first) engine CPU, s"] = _cpu(pid) - before
        figures["RSS after title sort and tag, MiB"] = _proc_status(pid, "VmRSS") / MIB
        figures["RSS peak after them, MiB"] = _proc_status(pid, "VmHWM") / MIB
        before = _cpu(pid)
        _ok(cli, "list", "--all", "--sort", "title")
        figures["list --all --sort title (again) engine CPU, s"] = _cpu(pid) - before
    finally:
        cli.stop()
        shutil.rmtree(run, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=BASE, help=f"the larger vault (with {BASE:,} as the base of ratios)")
    parser.add_argument("--before", type=Path, help="another checkout, measured in the same run")
    args = parser.parse_args()
    sizes = sorted({BASE, args.notes})
    roots = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    cached = {size: build(size, False) for size in sizes}
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="memories-bench-list-") as tmp:
        for size in sizes:
            for name, root in sorted(roots.items(), reverse=True):  # before first, if given
                load = os.getloadavg()[0]
                print(f"measuring {name} at {size:,} (load average {load:.1f}) …", flush=True)
                results[(name, size)] = {**measure(root, size, cached[size], Path(tmp)), "load average (1 min)": load}
    for name in sorted(roots, reverse=True):
        print(f"\n{name} ({roots[name]})")
        print(f"{'notes':48s}" + "".join(f"{size:>12,}" for size in sizes) + ("   ratio" if len(sizes) == 2 else ""))
        for figure in results[(name, sizes[0])]:
            values = [results[(name, size)][figure] for size in sizes]
            row = "".join(f"{value:12.3f}" for value in values)
            if len(sizes) == 2 and values[0] and "CPU" in figure:
                row += f"   {values[1] / values[0]:6.2f}×"
            print(f"{figure:48s}{row}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
