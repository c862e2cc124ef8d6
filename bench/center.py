"""Center throughput benchmark (issue 30): one command, measured side by side in one run.

    .venv/bin/python bench/center.py [--clients 20] [--rounds 40] [--no-postgres]

Twenty concurrent clients each write a memory and read it back, ``--rounds`` times, through:

  * center/sqlite     — `memories center serve` (HTTPS on loopback, a private CA) with its
                        hosted store in DIR/store (SQLite); one keep-alive connection per client;
  * center/postgresql — the same Center with its store in PostgreSQL on 127.0.0.1:5432 (a role
                        and database made for the run and dropped after);
  * local IPC         — the same ops on a local daemon over its Unix socket (`IpcClient`): the
                        path a CLI call takes. The daemon serves 16 connections at once, so the
                        twenty clients share 15 connections (a request waits for a free one).

Every path serves the same two ops (``put`` then ``get`` of what was put) from the same kind
of client (one thread per client, synchronous, connection reused), interleaved path by path
in the same process. Printed: requests/s, p50 and p99 per request, and each Center row's ratio
to local IPC. The machine's load average is printed with them (a shared 2-core box).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import queue
import secrets
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.config import Paths  # noqa: E402
from engine.ipc.client import IpcClient  # noqa: E402
from tests.center.support import PASSWORD, Center, make_tls  # noqa: E402

ENV = {"MEMORIES_KDF_TARGET_MS": "10"}
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

Call = Callable[[dict[str, Any]], dict[str, Any]]


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    import psycopg

    admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    name = f"memories_bench_{secrets.token_hex(4)}"
    try:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
        yield f"postgresql://{name}@127.0.0.1:5432/{name}"
    finally:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        admin.close()


def run_clients(clients: int, rounds: int, connect: Callable[[], Call]) -> tuple[float, list[float]]:
    """``clients`` threads, each ``rounds`` × (put, get): wall time and every request's latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        try:
            call = connect()
            mine: list[float] = []
            start.wait()
            for n in range(rounds):
                t0 = time.perf_counter()
                put = call({"op": "put", "title": f"c{index} r{n}", "body": "bench body " * 20, "vault": "team"})
                t1 = time.perf_counter()
                call({"op": "get", "id": put["id"]})
                t2 = time.perf_counter()
                mine += [t1 - t0, t2 - t1]
            with lock:
                latencies.extend(mine)
        except BaseException as exc:
            errors.append(exc)
            with contextlib.suppress(threading.BrokenBarrierError):
                start.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if errors:
        raise errors[0]
    return wall, latencies


def center_connect(center: Center, token: str) -> Callable[[], Call]:
    context = ssl.create_default_context(cafile=str(center.tls.ca))
    port = int(center.url.rsplit(":", 1)[1])

    def connect() -> Call:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=120)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        def call(body: dict[str, Any]) -> dict[str, Any]:
            conn.request("POST", "/v1/rpc", json.dumps(body), headers)
            response = conn.getresponse()
            data = json.loads(response.read())
            if response.status != 200:
                raise RuntimeError(f"center answered {response.status}: {data}")
            result: dict[str, Any] = data["result"]
            return result

        return call

    return connect


IPC_CONNECTIONS = 15  # the daemon serves 16 connections at once (engine/ipc/server.py); one stays free


def ipc_connect(home: Path) -> Callable[[], Call]:
    """The clients share IPC_CONNECTIONS connections: a request waits for a free one, as
    twenty local programs would wait for the daemon's connection limit."""
    pool: queue.SimpleQueue[IpcClient] = queue.SimpleQueue()
    for _ in range(IPC_CONNECTIONS):
        pool.put(IpcClient(Paths(home).socket, timeout=120))

    def call(body: dict[str, Any]) -> dict[str, Any]:
        client = pool.get()
        try:
            return client.request(body)
        finally:
            pool.put(client)

    return lambda: call


def cli(home: Path, *args: str, input: str | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args, "--json"],
        input=input,
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        cwd=ROOT,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def summary(name: str, clients: int, wall: float, latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "path": name,
        "requests": len(latencies),
        "rps": len(latencies) / wall,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--no-postgres", action="store_true", help="measure the SQLite Center and IPC only")
    args = parser.parse_args()
    os.environ.update(ENV)
    work = Path(tempfile.mkdtemp(prefix="memories-bench-center-"))
    results: list[dict[str, Any]] = []
    stack = contextlib.ExitStack()
    try:
        tls = make_tls(work / "tls")
        # The local daemon, with a vault named like the Center's.
        home = work / "home"
        cli(home, "init", "--password-stdin", input=PASSWORD + "\n")
        cli(home, "sudo", "--password-stdin", input=PASSWORD + "\n")
        cli(home, "vault", "new", "team")
        stack.callback(
            lambda: subprocess.run(
                [sys.executable, "-m", "engine.cli", "--home", str(home), "daemon", "stop"],
                capture_output=True,
                cwd=ROOT,
                check=False,
            )
        )
        stores: list[tuple[str, str | None]] = [("center/sqlite", None)]
        if not args.no_postgres:
            stores.append(("center/postgresql", stack.enter_context(pg_database())))
        centers: list[tuple[str, Center, str]] = []
        for name, url in stores:
            center = Center(work / name.replace("/", "-"), tls, url, extra=("--rate", "100000", "--burst", "100000")).start()
            stack.callback(center.stop)
            assert center.unlock().status == 200
            centers.append((name, center, center.grant("bench", "read_write", ["team"])["token"]))
        # Warm every path once (first-use costs are not what is measured), then measure each.
        for _name, center, token in centers:
            run_clients(2, 2, center_connect(center, token))
        run_clients(2, 2, ipc_connect(home))
        for name, center, token in centers:
            results.append(summary(name, args.clients, *run_clients(args.clients, args.rounds, center_connect(center, token))))
        results.append(summary("local IPC", args.clients, *run_clients(args.clients, args.rounds, ipc_connect(home))))
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
