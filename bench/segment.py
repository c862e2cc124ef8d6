"""Segmenter benchmark (issue 32): the engine's Segmenter.segment against raw rjieba.cut on the
same notes, interleaved note by note in one process, with where the rest of the time goes.

    .venv/bin/python bench/segment.py [--notes 3000] [--rounds 3] [--before DIR]

The notes are bench/scale.py's (mixed English/Chinese, ~500 characters, tags and a link).
For each note, in turn: raw ``rjieba.cut(text, True)``, then ``Segmenter.segment(text)``
(fold, Traditional → Simplified, rjieba, the word filter, the bigram column), and with
``--before DIR`` (a checkout of an older commit, e.g. ``git archive COMMIT | tar -x -C DIR``)
that tree's ``engine/search/segment.py`` on the same note: load drift hits all of them alike.
CPU seconds of this thread are measured (the wall clock of a loaded machine mostly measures
the scheduler). It prints each one's notes per CPU-second and ours ÷ raw (goal ≥ 0.8×), then
the cost of each stage of ``segment`` alone, and the ratio the fixed stages leave possible:
fold, the script conversion and the cut itself are work raw rjieba does not do or does too.
It checks that ours and the older tree's give the same strings on every note.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scale import write_notes  # noqa: E402 - the scale bench's notes
from engine.search.normalize import fold  # noqa: E402
from engine.search.script import to_simplified  # noqa: E402
from engine.search.segment import Segmenter, _fast_bigrams, _fast_patterns, _fast_words  # noqa: E402

_clock = time.thread_time


def notes(count: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "notes.jsonl"
        write_notes(path, count)
        items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [f"{item['title']} {item['body']}" for item in items]


def older_segmenter(tree: Path) -> Any:
    """The older tree's Segmenter, its module loaded under another name beside ours."""
    spec = importlib.util.spec_from_file_location("before_segment", tree / "engine" / "search" / "segment.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.Segmenter()


def per_note(texts: list[str], step: Callable[[Any], object], inputs: list[Any] | None = None) -> float:
    """Microseconds of CPU per note for ``step`` over ``inputs`` (default: the notes), best of 5."""
    data = texts if inputs is None else inputs
    best = float("inf")
    for _ in range(5):
        started = _clock()
        for item in data:
            step(item)
        best = min(best, _clock() - started)
    return best / len(data) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="an older checkout whose segmenter runs beside ours, interleaved")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    texts = notes(args.notes)
    import rjieba

    ours = Segmenter()
    ours.warm()
    before = older_segmenter(args.before.resolve()) if args.before else None
    if before is not None:
        before.warm()
        differ = sum(
            (mine.words, mine.bigrams) != (theirs.words, theirs.bigrams)
            for mine, theirs in ((ours.segment(t), before.segment(t)) for t in texts)
        )
        print(f"ours and the older tree's segment() differ on {differ} of {len(texts)} notes")
    cut = rjieba.cut
    raw_s = ours_s = before_s = 0.0
    for _ in range(args.rounds):
        for text in texts:
            t0 = _clock()
            cut(text, True)
            t1 = _clock()
            ours.segment(text)
            t2 = _clock()
            raw_s += t1 - t0
            ours_s += t2 - t1
            if before is not None:
                before.segment(text)
                before_s += _clock() - t2
    count = len(texts) * args.rounds
    print(f"raw rjieba.cut           {count / raw_s:8.0f} notes per CPU-second")
    print(f"engine Segmenter.segment {count / ours_s:8.0f} notes per CPU-second: {raw_s / ours_s:.2f}× raw rjieba (goal ≥ 0.8×)")
    if before is not None:
        print(f"older tree's segment     {count / before_s:8.0f} notes per CPU-second: {raw_s / before_s:.2f}× raw rjieba")

    # Where segment()'s time goes, stage by stage on the same notes (µs of CPU per note).
    folded_only = [fold(t) for t in texts]
    folded = [to_simplified(t) for t in folded_only]
    cjk_run, rare = _fast_patterns()
    tokens = [cut(t, True) for t in folded]
    runs = [cjk_run.findall(t) for t in folded]
    stages = {
        "fold (NFKC where needed, lowercase)": per_note(texts, fold),
        "Traditional → Simplified (OpenCC)": per_note(texts, to_simplified, folded_only),
        "rare-character check": per_note(texts, rare.search, folded),
        "rjieba.cut": per_note(texts, lambda t: cut(t, True), folded),
        "word filter and join": per_note(texts, lambda pair: _fast_words(*pair), list(zip(folded, tokens, strict=True))),
        "CJK runs": per_note(texts, cjk_run.findall, folded),
        "bigram column": per_note(texts, _fast_bigrams, runs),
    }
    raw = per_note(texts, lambda t: cut(t, True))
    print(f"stages of segment() alone, µs of CPU per note (raw rjieba.cut of the note: {raw:.1f}):")
    for name, micros in stages.items():
        print(f"  {name:38s} {micros:6.1f}")
    fixed = sum(
        stages[name] for name in ("fold (NFKC where needed, lowercase)", "Traditional → Simplified (OpenCC)", "rjieba.cut")
    )
    print(f"fold + conversion + cut alone would be {raw / fixed:.2f}× raw rjieba; all stages {raw / sum(stages.values()):.2f}×")
    fast = sum(rare.search(t) is None for t in folded)
    print(f"notes on the fast path (no Hangul, rare ideograph, joined ASCII or astral character): {fast} of {len(texts)}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
