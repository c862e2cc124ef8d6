"""saas-mode throughput (issue 30): twenty clients of a local daemon in ``mode = "saas"``.

    .venv/bin/python bench/center_saas.py [--clients 20] [--rounds 40] [--no-postgres]

The path a user's CLI or agent takes in saas mode: IPC to the local engine, which sends each
content op to the Center's ``POST /v1/rpc`` (HTTPS, kept-alive connections). Measured in one
run, interleaved, with the same clients and ops as bench/center.py (``put`` then ``get``):

  * saas/sqlite       — a saas daemon in front of a Center with its store in SQLite;
  * saas/postgresql   — the same in front of a Center with its store in PostgreSQL;
  * center/sqlite     — the Center's HTTP API called directly (what the daemon's hop costs);
  * local IPC         — the same ops on a local daemon's own store.

Printed: requests/s, p50 and p99 per request, each row's ratio to local IPC, and the load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import center as direct  # noqa: E402  (bench/center.py: clients, Center process, summaries)
from tests.center.support import PASSWORD, Center, make_tls  # noqa: E402

TOKEN_ENV = "MEMORIES_CENTER_TOKEN"


def saas_daemon(home: Path, center: Center, token: str) -> None:
    """A local engine whose content ops go to ``center`` (started with the token in its environment)."""
    key = center.request("GET", "/v1/info").body["key"]
    home.mkdir(parents=True, mode=0o700)
    (home / "config.toml").write_text(
        f'[[centers]]\nurl = "{center.url}"\nkey = "{key}"\nmode = "saas"\nca = "{center.tls.ca}"\ntoken_env = "{TOKEN_ENV}"\n'
    )
    os.environ[TOKEN_ENV] = token  # the daemon `init` starts inherits it
    try:
        direct.cli(home, "init", "--password-stdin", input=PASSWORD + "\n")
    finally:
        del os.environ[TOKEN_ENV]


def stop(home: Path) -> None:
    subprocess.run([sys.executable, "-m", "engine.cli", "--home", str(home), "daemon", "stop"], capture_output=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-postgres", action="store_true", help="measure the SQLite Center and IPC only")
    args = parser.parse_args()
    os.environ.update(direct.ENV)
    work = Path(tempfile.mkdtemp(prefix="memories-bench-saas-"))
    results: list[dict[str, Any]] = []
    stack = contextlib.ExitStack()
    try:
        tls = make_tls(work / "tls")
        local = work / "local"
        direct.cli(local, "init", "--password-stdin", input=PASSWORD + "\n")
        direct.cli(local, "sudo", "--password-stdin", input=PASSWORD + "\n")
        direct.cli(local, "vault", "new", "team")
        stack.callback(stop, local)
        stores: list[tuple[str, str | None]] = [("sqlite", None)]
        if not args.no_postgres:
            stores.append(("postgresql", stack.enter_context(direct.pg_database())))
        paths: list[tuple[str, Any]] = []
        for kind, url in stores:
            center = Center(work / f"center-{kind}", tls, url, extra=("--rate", "100000", "--burst", "100000")).start()
            stack.callback(center.stop)
            assert center.unlock().status == 200
            home = work / f"saas-{kind}"
            saas_daemon(home, center, center.grant("daemon", "read_write", ["team"])["token"])
            stack.callback(stop, home)
            paths.append((f"saas/{kind}", direct.ipc_connect(home)))
            if kind == "sqlite":
                paths.append(
                    ("center/sqlite", direct.center_connect(center, center.grant("direct", "read_write", ["team"])["token"]))
                )
        paths.append(("local IPC", direct.ipc_connect(local)))
        for _name, connect in paths:  # warm every path once: first-use costs are not measured
            direct.run_clients(2, 2, connect)
        for name, connect in paths:
            results.append(direct.summary(name, args.clients, *direct.run_clients(args.clients, args.rounds, connect)))
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
    ipc = next(r for r in results if r["path"] == "local IPC")
    load = os.getloadavg()
    print(
        f"{args.clients} concurrent clients × {args.rounds} × (put, get); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'path':<20}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'req/s ÷ IPC':>14}{'p50 ÷ IPC':>12}{'p99 ÷ IPC':>12}")
    for r in results:
        print(
            f"{r['path']:<20}{r['rps']:>10.1f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}"
            f"{r['rps'] / ipc['rps']:>14.2f}{r['p50_ms'] / ipc['p50_ms']:>12.2f}{r['p99_ms'] / ipc['p99_ms']:>12.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
