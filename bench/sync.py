"""Sync benchmark (issue 14): two real engines (two homes, two daemons) on this machine.

    .venv/bin/python bench/sync.py [--sizes 1000,10000] [--offline 1000]

For each vault size N (notes imported on A, B joined through A, A serving with `memories serve`):
  * initial sync of N notes to B: seconds, MiB moved over the socket (both directions), and the
    ratio to copying A's store file (its size, and a timed copy);
  * one edit on the synced pair: bytes sent in each direction by the next sync (should not
    grow with N: reported at each size) and the time from `memories sync` starting until B's
    search finds the edited word;
then, once: a merge of --offline edits made on each side while apart (seconds);
then, for each --member size (issue 29, PO-3): another person's first sync of a shared vault of N
notes they were just added to (their invitation, `vault member add`), and one edit afterwards.
No assertions: it prints the figures. Uses the real CLI, so process start-up is included.

Measured on the 2-core box (notes of ~270 bytes), with per-peer sync marks (engine/sync/marks.py),
while other engineers' test suites ran on the same two cores (load average ~6, so times are
inflated; bytes are exact):
  N=1000:  initial sync 1.85 s, 1.29 MiB moved, store files 2.26 MiB (ratio 0.57), copy 1.1 ms;
           one edit: 2,582 B sent / 4,359 B received, searchable on B 0.29 s after sync starts
  N=10000: initial sync 10.48 s, 12.86 MiB moved, store files 25.04 MiB (ratio 0.51), copy 26.7 ms;
           one edit: 2,583 B sent / 4,361 B received, searchable on B 0.33 s after sync starts
  1,000 offline edits on each side: merged both ways in 2.63 s
Issue 29, member of a shared vault, N=10000 (load average ~10 on the 2 cores; bytes are exact):
  first sync of the shared vault 10.90 s, 12.59 MiB moved; one edit afterwards: 1,796 B sent /
  3,447 B received by the member, 1.41 s. (Before the arriving vault got a sync mark: 531,735 B
  / 534,053 B for that edit, a full inventory each way.)
  Again after the cloud introductions and the relay-refusal fix (2026-12-07, `--member 1000,10000`,
  load average 22 on the 2 cores): N=1000 first sync 1.88 s, 1.26 MiB; N=10000 12.94 s, 12.59 MiB
  (x9.98); one edit 1,796 B sent / 3,444-3,447 B received at both sizes (x1.00). At load ~5:
  N=10000 first sync 4.72 s, one edit 0.63 s, the same bytes.
(Before the marks, on an idle box: one edit cost 55.9 KB at 1k and 534 KB at 10k, because each
inventory listed every revision ID; initial sync 0.92 s / 5.82 s, offline merge 0.96 s.)
The one-edit cost no longer grows with the vault: after a completed sync each inventory lists
only the IDs added since then (full inventories again only when the two sides' marks differ).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers import Cli
from tests.sync.support import Listener, free_port, make_pair, sync, token_for


def _import(cli: Cli, where: Path, prefix: str, count: int) -> None:
    source = where / f"{prefix}.jsonl"
    filler = "lorem ipsum " * 20
    lines = (json.dumps({"title": f"{prefix} note {i}", "body": f"{prefix} body {i} {filler}"}) for i in range(count))
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cli.ok("import", str(source))


def _store_files(home: Path) -> list[Path]:
    """The store and its WAL (SQLite keeps recent pages there until a checkpoint)."""
    return [p for p in (home / "store.db", home / "store.db-wal") if p.exists()]


def _copy_seconds(paths: list[Path], where: Path) -> float:
    start = time.perf_counter()
    for path in paths:
        shutil.copyfile(path, where / f"copy-{path.name}")
    return time.perf_counter() - start


def one_size(n: int, root: Path) -> None:
    home = root / f"n{n}"
    home.mkdir()
    a, b = make_pair(home)
    try:
        _import(a, home, "bulk", n)
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            start = time.perf_counter()
            first = sync(b, listener.url, token, timeout=3600)
            seconds = time.perf_counter() - start
            moved = first["sent_bytes"] + first["received_bytes"]
            files = _store_files(a.home)
            size = sum(p.stat().st_size for p in files)
            copy = _copy_seconds(files, home)
            print(
                f"N={n}: initial sync {seconds:.2f} s, {moved / 2**20:.2f} MiB moved; "
                f"store files {size / 2**20:.2f} MiB (bytes ratio {moved / size:.2f}), copy {copy * 1000:.1f} ms"
            )
            target = a.ok("list", "--limit", "1")["items"][0]["id"]
            a.ok("edit", target, "--body", f"zebracorn edit at size {n}")
            start = time.perf_counter()
            edit = sync(b, listener.url, token)
            while not b.ok("search", "zebracorn")["results"]:
                time.sleep(0.05)
            until = time.perf_counter() - start
            print(
                f"N={n}: one edit: sent {edit['sent_bytes']} B, received {edit['received_bytes']} B by B; "
                f"searchable on B {until:.2f} s after `memories sync` started"
            )
    finally:
        a.stop()
        b.stop()


def offline(count: int, root: Path) -> None:
    home = root / "offline"
    home.mkdir()
    a, b = make_pair(home)
    try:
        token = token_for(a, b)
        _import(a, home, "on-a", count)
        _import(b, home, "on-b", count)
        with Listener(a, free_port()).start() as listener:
            start = time.perf_counter()
            result = sync(b, listener.url, token, timeout=3600)
            seconds = time.perf_counter() - start
        added = [v["revisions_added"] for v in result["vaults"]], [v["revisions_added"] for v in result["peer_vaults"]]
        print(f"offline: {count} edits on each side merged in {seconds:.2f} s (added on B, on A: {added})")
    finally:
        a.stop()
        b.stop()


def member(n: int, root: Path) -> tuple[int, int]:
    """Issue 29 (PO-3): another person's first sync of an N-item shared vault, then one edit.
    Returns (bytes of the first sync, bytes of the edit's sync), both directions."""
    home = root / f"member{n}"
    home.mkdir()
    ann, ben = Cli(home=home / "ann"), Cli(home=home / "ben")
    try:
        ann.init()
        ben.init()
        ann.ok("vault", "new", "family")
        source = home / "family.jsonl"
        filler = "lorem ipsum " * 20
        lines = (json.dumps({"title": f"family note {i}", "body": f"family body {i} {filler}"}) for i in range(n))
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
        ann.ok("import", str(source), "--vault", "family")
        ben.sudo()
        invite = ben.ok("whoami", "--invite", "--owner", str(ann.ok("whoami")["user_fingerprint"]))
        ann.sudo()
        ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "editor", "--vault", "family", "--yes")
        token = token_for(ann, ben)
        with Listener(ann, free_port()).start() as listener:
            start = time.perf_counter()
            first = sync(ben, listener.url, token, timeout=3600)
            seconds = time.perf_counter() - start
            moved = first["sent_bytes"] + first["received_bytes"]
            print(f"member N={n}: first sync of the shared vault {seconds:.2f} s, {moved / 2**20:.2f} MiB moved")
            target = ann.ok("list", "--vault", "family", "--limit", "1")["items"][0]["id"]
            ann.ok("edit", target, "--body", f"zebracorn member edit at size {n}")
            start = time.perf_counter()
            edit = sync(ben, listener.url, token)
            seconds = time.perf_counter() - start
            print(
                f"member N={n}: one edit: sent {edit['sent_bytes']} B, received {edit['received_bytes']} B by the member; "
                f"{seconds:.2f} s"
            )
            return moved, int(edit["sent_bytes"]) + int(edit["received_bytes"])
    finally:
        ann.stop()
        ben.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--offline", type=int, default=1000)
    parser.add_argument("--member", default="10000", help="sizes of a shared vault another person syncs (issue 29)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memories-bench-sync-") as tmp:
        root = Path(tmp)
        for n in (int(x) for x in args.sizes.split(",") if x):
            one_size(n, root)
        if args.offline:
            offline(args.offline, root)
        members = [(n, member(n, root)) for n in (int(x) for x in args.member.split(",") if x)]
        if len(members) > 1:
            (small, (first_s, edit_s)), (large, (first_l, edit_l)) = members[0], members[-1]
            print(
                f"member N={large} vs N={small}, same run: first sync bytes x{first_l / first_s:.2f}, "
                f"one-edit bytes x{edit_l / edit_s:.2f} (should stay near 1: it must not grow with the vault)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
