"""Cloud sync benchmark (issue 21): real engines and a real S3 wire-protocol server (moto's
server mode) on this machine.

    .venv/bin/python bench/cloud.py [--sizes 1000,10000]

For each vault size N (notes imported on A, B joined through A, both with an account on the
same bucket; the devices never talk to each other):
  * A publishes the vault (`cloud sync`): seconds, objects and bytes uploaded;
  * B restores it from the bucket alone (`cloud sync`): seconds, objects, requests (list +
    get) per object and per note; and, for comparison, the peer-to-peer initial sync of the
    same vault to a third device over `memories serve` (issue 14): the ratio of the two;
  * one edit on A: bytes uploaded by A's next `cloud sync` and downloaded by B's (must not
    grow with N).
No assertions: it prints the figures. Uses the real CLI, so process start-up is included.
Figures measured on the 2-core box are in docs/cloud.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sync import _import
from tests.cloud.support import S3Server, add_account, bucket_objects
from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, C_PASSWORD, Listener, add_device, free_port, make_pair, sync, token_for


def _cloud_sync(cli: Cli) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    proc = cli.run("cloud", "sync", "--json", timeout=3600)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    result: dict[str, Any] = json.loads(proc.stdout)
    return seconds, result


def one_size(n: int, root: Path, s3: S3Server) -> None:
    home = root / f"n{n}"
    home.mkdir()
    a, b = make_pair(home)
    c = Cli(home=home / "c")
    try:
        _import(a, home, "bulk", n)
        bucket = s3.bucket(f"bench-{n}")
        add_account(a, s3.endpoint, bucket)
        add_account(b, s3.endpoint, bucket, password=B_PASSWORD)
        seconds, up = _cloud_sync(a)
        objects = sum(1 for k in bucket_objects(s3, bucket) if k.startswith("o/"))
        print(f"N={n}: A publishes: {seconds:.2f} s, {objects} objects, {up['requests']['sent_bytes'] / 2**20:.2f} MiB uploaded")
        seconds, down = _cloud_sync(b)
        req = down["requests"]
        calls = req["gets"] + req["lists"]
        got = sum(int(r["revisions_added"]) for r in down["merged"])
        print(
            f"N={n}: B restores from the bucket alone: {seconds:.2f} s, {got} revisions, "
            f"{req['received_bytes'] / 2**20:.2f} MiB, {calls} requests ({calls / max(1, objects):.2f} per object, "
            f"{calls / n:.4f} per note)"
        )
        add_device(a, c, "third", C_PASSWORD)
        token = token_for(a, c)
        with Listener(a, free_port()).start() as listener:
            start = time.perf_counter()
            sync(c, listener.url, token, timeout=3600)
            p2p = time.perf_counter() - start
        print(f"N={n}: peer-to-peer initial sync of the same vault: {p2p:.2f} s; cloud restore / p2p = {seconds / p2p:.2f}")
        _cloud_sync(a)  # publish the policy change (device C) so the next edit is measured alone
        _cloud_sync(b)
        _cloud_sync(a)
        target = a.ok("list", "--limit", "1")["items"][0]["id"]
        a.ok("edit", target, "--body", f"zebracorn edit at size {n}")
        _, edit_up = _cloud_sync(a)
        seconds, edit_down = _cloud_sync(b)
        print(
            f"N={n}: one edit: A uploaded {edit_up['requests']['sent_bytes']} B in {edit_up['uploaded']} bundle(s) "
            f"(to B and C), B downloaded {edit_down['requests']['received_bytes']} B; B's sync {seconds:.2f} s"
        )
    finally:
        a.stop()
        b.stop()
        c.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="comma-separated vault sizes")
    args = parser.parse_args()
    s3 = S3Server().start()
    try:
        with tempfile.TemporaryDirectory(prefix="memories-bench-cloud-") as tmp:
            for n in (int(x) for x in args.sizes.split(",")):
                one_size(n, Path(tmp), s3)
    finally:
        s3.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
