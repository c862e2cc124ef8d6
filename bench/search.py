"""Search benchmark (issue 3): one command, ratios measured side by side in one run.

    .venv/bin/python bench/search.py [--notes 10000]

Runs the real Service in-process on a real encrypted store in a temp directory:
imports N mixed-language memories (~500 characters each), then measures
  * warm lexical query p50/p95, and the ratio of our p50 to a raw FTS5 query on the
    same pre-segmented plaintext in the same process (target ≤ 3);
  * index build after unlock: from stored token streams (SR-6) and a cold build
    that decrypts + segments + inserts (target: ≤ 2 s beyond the KDF);
  * one edit: time until it is searchable ÷ a full rebuild (target ≤ 0.01);
  * a common-word search's page with its total (DT-7): counted ÷ building every hit;
  * process RSS with the index loaded (target ≤ 300 MiB).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The product's calibrated KDF (not the test suite's 10 ms): the target is "beyond the KDF",
# and what the engine overlaps with the KDF (loading the segmenter's dictionary) must be measured so.

from engine.config import EngineConfig, Paths
from engine.search.query import parse_query
from engine.service import handlers  # noqa: F401
from engine.service.caller import Caller
from engine.service.search_runtime import SearchRuntime, runtime_of
from engine.service.service import Service
from tests.data import make_search_eval as ev

PASSWORD = "bench password"
EN = [
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
ZH_WORDS = [
    "长期记忆",
    "记忆库",
    "加密",
    "咖啡",
    "旅行",
    "预算",
    "会议",
    "项目",
    "数据",
    "备份",
    "花园",
    "钢琴",
    "护照",
    "路由器",
    "打印机",
    "复习",
    "周末",
    "图书馆",
    "北京",
    "上海",
]
QUERIES = [
    "coffee travel",
    "长期记忆",
    "encryption key backup",
    "记忆库",
    "postgres database migration",
    "周末 图书馆",
    "kyoto",
    "预算 meeting",
    '"memory vault"',
    "花园 garden",
]


def note(rng: random.Random, i: int) -> dict[str, object]:
    """About 500 characters of sentences built from real words, alternating English and Chinese."""
    parts: list[str] = []
    while sum(len(p) for p in parts) < 500:
        if rng.random() < 0.5:
            p, q = rng.sample(ev.PEOPLE_EN, 2)
            parts.append(
                f"{p} {rng.choice(ev.VERBS_EN)} the {rng.choice(ev.THINGS_EN)} at {rng.choice(ev.PLACES_EN)} "
                f"on {rng.choice(ev.DAYS)}, and {q} said the {rng.choice(EN)} {rng.choice(EN)} mattered. "
            )
        else:
            p, q = rng.sample(ev.PEOPLE_ZH, 2)
            parts.append(
                f"{p}在{rng.choice(ev.PLACES_ZH)}{rng.choice(ev.VERBS_ZH)}{rng.choice(ev.THINGS_ZH)}，"
                f"{q}觉得{rng.choice(ZH_WORDS)}和{rng.choice(ZH_WORDS)}更重要。"
            )
    return {"title": f"Note {i} {rng.choice(EN)} {rng.choice(ZH_WORDS)}", "body": "".join(parts)[:500]}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def settle(runtime: SearchRuntime) -> None:
    """Wait for the background work a build leaves after it is complete (the word postings'
    catch-up, a second after it), so that it does not run under the next measurement."""
    job = runtime.job
    if job is not None and job.handle is not None:
        job.handle.wait(600)
    runtime.wait_postings(600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(7)
    caller = Caller("cli:bench")
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp))
        service = Service(paths, EngineConfig())
        rss_empty = rss_mib()  # engine code loaded, no vault state yet
        service.dispatch({"op": "init", "password": PASSWORD}, caller)
        runtime = runtime_of(service)
        started = time.perf_counter()
        for start in range(0, args.notes, 500):
            items = [note(rng, i) for i in range(start, min(args.notes, start + 500))]
            service.dispatch({"op": "import_batch", "items": items}, caller)
        print(f"import {args.notes} notes (incl. write-time segmentation): {time.perf_counter() - started:.1f} s")

        # Build after unlock from stored token streams (SR-6) in a running engine. rjieba's dictionary
        # loads once per process (~0.3 s, overlapped with the first KDF); bench/import.py times it.
        service.lock_now("bench")
        t_kdf = time.perf_counter()
        service.require_store().check_password(PASSWORD)
        kdf = time.perf_counter() - t_kdf
        # The running-engine unlock is repeated: one figure on a shared machine is one sample.
        beyond: dict[str, list[float]] = {}
        for label in ("running engine",) * 3:
            service.lock_now("bench")
            reused_before, segmented_before = runtime.stats.reused_tokens, runtime.stats.segmented
            t0 = time.perf_counter()
            service.dispatch({"op": "unlock", "password": PASSWORD}, caller)
            t_unlocked = time.perf_counter()
            assert runtime.wait_ready(600)
            warm_build = time.perf_counter() - t_unlocked
            complete = t_unlocked - t0 - kdf + warm_build
            reused = runtime.stats.reused_tokens - reused_before
            segmented_now = runtime.stats.segmented - segmented_before
            beyond.setdefault(label, []).append(complete)
            print(
                f"[{label}] unlock (KDF + decrypt/authenticate state): {t_unlocked - t0:.2f} s, searches answer "
                f"(partial) {t_unlocked - t0 - kdf:.2f} s beyond the KDF; index build from tokens: {warm_build:.2f} s "
                f"(reused {reused}, segmented {segmented_now}); "
                f"complete index {complete:.2f} s beyond the KDF"
            )
        for label, figures in beyond.items():
            print(
                f"[{label}] complete index after unlock: median {statistics.median(figures):.2f} s beyond the KDF "
                f"over {len(figures)} unlock(s) ({kdf:.2f} s KDF here) (target <= 2 s)"
            )

        # Cold build: decrypt + segment + insert (what SR-6 avoids).
        state = service.require_unlocked()
        with service.lock:
            runtime.tokens.clear()
            t1 = time.perf_counter()
            job = runtime.start_build(state, state.default_vault)
        assert job.done.wait(1200)
        cold_build = time.perf_counter() - t1
        settle(runtime)
        print(f"cold index build (decrypt + segment + insert): {cold_build:.2f} s ({job.segmented} segmented)")

        index = runtime.cache.peek(state.default_vault)
        assert index is not None and index.complete
        print(f"index: {len(index.assets)} assets, {len(index.chunks)} chunks, truncated {len(index.truncated)}")

        rss = rss_mib()  # before the raw comparison table below adds its own copy
        with service.lock:
            service.lock_now("bench: measure the index's share")
        rss_locked = rss_mib()
        service.dispatch({"op": "unlock", "password": PASSWORD}, caller)
        assert runtime.wait_ready(600)
        settle(runtime)
        state = service.require_unlocked()
        index = runtime.cache.peek(state.default_vault)
        assert index is not None and index.complete
        # Warm query latency vs raw FTS5 on the same pre-segmented plaintext, on the same
        # SQLite as our index (APSW's; engine/search/fts.py).
        raw = apsw.Connection(":memory:")
        raw.execute("CREATE VIRTUAL TABLE t USING fts5(title, body, meta, tokenize='unicode61 remove_diacritics 0')")
        # The same segmented words our index holds (read from it; the bench may look inside).
        segmented = index.fts._conn.execute("SELECT rowid, title, body, meta FROM chunks").fetchall()
        t_raw = time.perf_counter()
        with raw:
            raw.executemany("INSERT INTO t (rowid, title, body, meta) VALUES (?, ?, ?, ?)", segmented)
        raw_insert = time.perf_counter() - t_raw
        sample = "".join(str(note(random.Random(1), i)["body"]) for i in range(200))
        t_seg = time.perf_counter()
        runtime.segmenter.words(sample)
        seg_rate = len(sample.encode()) / (time.perf_counter() - t_seg) / 1e6
        print(
            f"this machine: raw FTS5 insert of the {len(segmented)} segmented rows {raw_insert:.2f} s (SPEC reference "
            f"≈0.3 s for 10k); segmenter (rjieba) {seg_rate:.2f} MB/s (Jieba's reference ≈0.45 MB/s); "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        scale = 0.3 * len(segmented) / 10_000 / raw_insert  # this machine's speed relative to the reference
        print(
            f"warm build ÷ raw FTS5 insert = {warm_build / raw_insert:.1f}; "
            f"scaled to the reference machine (×{scale:.2f}): ≈{warm_build * scale:.2f} s"
        )
        parsed = [parse_query(q, runtime.segmenter) for q in QUERIES]
        raw_match = [" OR ".join('"' + t.replace('"', '""') + '"' for t in p.terms) for p in parsed]
        ours: list[float] = []
        base: list[float] = []
        for _ in range(30):
            for pq, match in zip(parsed, raw_match, strict=True):
                t = time.perf_counter()
                with service.lock:
                    index.search(pq, mode="lexical", limit=10)
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                raw.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t, 5, 1, 2) LIMIT 10", (match,)).fetchall()
                base.append(time.perf_counter() - t)
        p50, p95, r50 = statistics.median(ours), pct(ours, 0.95), statistics.median(base)
        print(
            f"lexical query: p50 {p50 * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms; raw FTS5 p50 {r50 * 1000:.2f} ms; "
            f"ratio ours/raw = {p50 / r50:.2f} (target <= 3)"
        )
        # DT-7: a search counts every match (its total) and pages through them. For a word in
        # most notes, counting must not cost building a hit for each match: the counted search
        # (search_counted, hits up to the page's end) side by side with building every hit (what
        # the first version of the totals did) and with the top 50 without a total.
        common = [parse_query(q, runtime.segmenter) for q in ("memory", "coffee travel", "the")]
        timings: dict[str, list[float]] = {"top": [], "counted": [], "every": []}
        totals: list[int] = []
        for _ in range(15):
            for pq in common:
                for label in timings:
                    t = time.perf_counter()
                    with service.lock:
                        if label == "top":
                            index.search(pq, mode="lexical", limit=50)
                        elif label == "counted":
                            _, found = index.search_counted(pq, mode="lexical", limit=50, lexical_depth=5000)
                            totals.append(found)
                        else:
                            index.search(pq, mode="lexical", limit=5000, lexical_depth=5000)
                    timings[label].append(time.perf_counter() - t)
        top, counted, every = (statistics.median(timings[k]) for k in ("top", "counted", "every"))
        print(
            f"common-word search, page of 50 with its total (up to {max(totals)} matches): counted "
            f"{counted * 1000:.2f} ms, building every hit {every * 1000:.2f} ms, top 50 without a total "
            f"{top * 1000:.2f} ms; ratio counted/every = {counted / every:.2f}, counted/top = {counted / top:.2f} "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
        full_query = service.dispatch({"op": "search", "query": "coffee travel", "wait_ms": 0}, caller)
        assert full_query["results"]

        # One edit: time until searchable vs a full rebuild.
        target = state.index.resolve(full_query["results"][0]["id"])
        head = state.index.head_revisions(target)[0]
        edits: list[float] = []
        for n in range(5):
            t = time.perf_counter()
            head_id = state.index.head_revisions(target)[0].rev_id.hex()
            service.dispatch(
                {"op": "edit", "id": target.asset_id.hex(), "base": head_id, "body": f"edited zyxwquux{n} body"}, caller
            )
            with service.lock:
                hits = index.search(parse_query(f"zyxwquux{n}", runtime.segmenter), mode="lexical", limit=1)
            edits.append(time.perf_counter() - t)
            assert hits and hits[0].asset_id == target.asset_id
        del head
        edit = statistics.median(edits)
        print(
            f"one edit until searchable (commit + fsync + index update): {edit * 1000:.1f} ms; "
            f"ratio edit/warm rebuild = {edit / warm_build:.4f}, edit/cold rebuild = {edit / cold_build:.4f} "
            "(target <= 0.01)"
        )
        print(
            f"engine RSS with the {len(index.assets)}-note index loaded: {rss:.0f} MiB (target <= 300); "
            f"engine code before any vault: {rss_empty:.0f} MiB; after lock (index and state dropped, "
            f"heap kept by the allocator): {rss_locked:.0f} MiB"
        )
        service.lock_now("bench")
        if service.store is not None:
            service.store.close()


if __name__ == "__main__":
    main()
