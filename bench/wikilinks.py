"""Wikilink cost on import (issue 31, DT-8): the same Obsidian-style folder with and without links.

    .venv/bin/python bench/wikilinks.py [--notes 1500] [--links 3] [--rounds 2]

Writes N notes in nested folders, each naming ``--links`` other notes as ``[[Title]]``,
``[[Title|alias]]`` or ``[[Title#Heading]]`` (one in ten names a note that does not exist),
and a peer folder with the same text where every ``[[…]]`` is plain text (``((…))``). Each
round imports both, interleaved, through the real CLI into fresh vaults (test KDF, as
bench/moving.py) and then times `memories wikilinks` (every note read again). Prints notes/s
for each, the ratio linked ÷ plain (the cost of turning wikilinks into graph links), and the
graph edges made. Asserts nothing beyond each command succeeding.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAULT_PASSWORD = "bench vault password that is long enough"


def _memories(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORIES_KDF_TARGET_MS": "10"}
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
        raise SystemExit(f"memories {' '.join(args)} failed: {proc.stdout} {proc.stderr}")
    return proc


def write_folder(root: Path, notes: int, links: int, *, linked: bool, seed: int = 7) -> None:
    rng = random.Random(seed)
    for i in range(notes):
        folder = root / f"area {i % 7}" / f"topic {i % 13}"
        folder.mkdir(parents=True, exist_ok=True)
        names = []
        for _ in range(links):
            j = rng.randrange(notes)
            form = rng.choice(("{t}", "{t}|see this", "{t}#Details"))
            target = f"Note {j}" if rng.random() > 0.1 else f"Missing {j}"
            names.append(form.format(t=target))
        refs = " ".join(f"[[{n}]]" if linked else f"(({n}))" for n in names)
        body = f"---\ntags: [bench, t{i % 5}]\n---\n# Note {i}\n\n## Details\n\nText of note {i}; related: {refs}\n"
        (folder / f"Note {i}.md").write_text(body, "utf-8")


def run_once(folder: Path, home: Path) -> tuple[float, float, int]:
    shutil.rmtree(home, ignore_errors=True)
    _memories(home, "init", "--password-stdin", stdin=VAULT_PASSWORD + "\n")
    try:
        start = time.perf_counter()
        _memories(home, "import", str(folder), "--json")
        imported = time.perf_counter() - start
        start = time.perf_counter()
        _memories(home, "wikilinks", "--json")
        relinked = time.perf_counter() - start
        graph = json.loads(_memories(home, "graph", "--limit", "100000", "--json").stdout)
        return imported, relinked, sum(1 for e in graph["edges"] if e["rel"] == "wikilink")
    finally:
        _memories(home, "daemon", "stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=1500)
    parser.add_argument("--links", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-wikilinks-") as tmp:
        work = Path(tmp)
        write_folder(work / "linked", args.notes, args.links, linked=True)
        write_folder(work / "plain", args.notes, args.links, linked=False)
        linked: list[float] = []
        plain: list[float] = []
        relink: list[float] = []
        edges = 0
        for _ in range(args.rounds):  # interleaved: both see the same load
            seconds, again, edges = run_once(work / "linked", work / "home-linked")
            linked.append(seconds)
            relink.append(again)
            plain.append(run_once(work / "plain", work / "home-plain")[0])
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[:3]
        lin, pla = statistics.median(linked), statistics.median(plain)
        print(f"notes {args.notes}, {args.links} wikilinks each, rounds {args.rounds}, load {' '.join(load)}")
        print(f"import with wikilinks     {args.notes / lin:8.1f} notes/s  ({lin:.2f} s, {edges} graph links)")
        print(f"import, same text plain   {args.notes / pla:8.1f} notes/s  ({pla:.2f} s)")
        print(f"ratio linked / plain      {lin / pla:8.2f}  (time; 1.0 = linking is free)")
        print(f"memories wikilinks        {statistics.median(relink):8.2f} s  (every note read again)")


if __name__ == "__main__":
    main()
