"""Proxy benchmarks (issue 7). One command: `.venv/bin/python bench/proxy.py [--seconds 10]`.

Prints, measured side by side in one run on throw-away servers (needs root, PostgreSQL 15
server binaries, pgbench, redis-server and redis-benchmark):
- pgbench select-only, 4 clients: TPS through the proxy ÷ TPS direct (both with TLS upstream;
  the proxy's local leg is loopback plaintext), plus the added average latency per query;
- redis-benchmark GET and SET, 8 clients: requests/s through the proxy ÷ direct (TLS).
Issue target for pgbench: ≥ 0.8.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import Cli  # noqa: E402
from tests.remote.servers import postgres_server, redis_server  # noqa: E402

PG_PASSWORD = "bench-pg-password"


def pgbench(conninfo: str, seconds: int, env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run(
        ["pgbench", "-n", "-S", "-c", "4", "-j", "2", "-T", str(seconds), conninfo],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    tps_match = re.search(r"tps = ([0-9.]+)", out)
    latency_match = re.search(r"latency average = ([0-9.]+) ms", out)
    if tps_match is None or latency_match is None:
        raise SystemExit(f"pgbench printed no tps/latency line:\n{out}")
    tps, latency = float(tps_match.group(1)), float(latency_match.group(1))
    return tps, latency


def redis_bench(args: list[str]) -> dict[str, float]:
    out = subprocess.run(
        ["redis-benchmark", *args, "-t", "get,set", "-n", "100000", "-c", "8", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    found = re.findall(r"(GET|SET): ([0-9.]+) requests per second", out)
    return {name: float(value) for name, value in found}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10, help="pgbench duration per side")
    args = parser.parse_args()
    cli = Cli(home=Path(tempfile.mkdtemp(prefix="memories-bench-")) / "home")
    cli.init()
    try:
        with postgres_server() as pg:
            pg.psql(f"create role bench login password '{PG_PASSWORD}'")
            pg.psql("create database bench owner bench")
            env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
            direct = f"host=localhost port={pg.port} user=bench dbname=bench sslmode=verify-full sslrootcert={pg.tls.ca}"
            subprocess.run(
                ["pgbench", "-i", "-s", "2", "-q", direct],
                env={**env, "PGPASSWORD": PG_PASSWORD},
                check=True,
                capture_output=True,
            )
            cli.ok("credential", "new", "tls-ca", "--name", "pg-ca", "--pem-file", str(pg.tls.ca))
            cli.ok(
                "credential",
                "new",
                "postgres",
                "--name",
                "bench",
                "--host",
                "localhost",
                "--port",
                str(pg.port),
                "--user",
                "bench",
                "--database",
                "bench",
                "--password-stdin",
                "--tls-ca",
                "pg-ca",
                input=PG_PASSWORD + "\n",
            )
            proxy = cli.ok("proxy", "start", "bench")
            via = f"host=127.0.0.1 port={proxy['port']} user=x dbname=x sslmode=disable"
            d_tps, d_lat = pgbench(direct, args.seconds, {**env, "PGPASSWORD": PG_PASSWORD})
            p_tps, p_lat = pgbench(via, args.seconds, env)
            cli.ok("proxy", "stop", proxy["proxy"])
            print(
                f"pgbench -S -c4 {args.seconds}s: direct {d_tps:.0f} tps, proxy {p_tps:.0f} tps, "
                f"ratio {p_tps / d_tps:.2f} (target >= 0.8); avg latency {d_lat:.3f} -> {p_lat:.3f} ms "
                f"(+{(p_lat - d_lat) * 1000:.0f} us per query)"
            )
        with redis_server(tls_on=True) as rs:
            cli.ok("credential", "new", "tls-ca", "--name", "redis-ca", "--pem-file", str(rs.tls.ca))
            cli.ok(
                "credential",
                "new",
                "redis",
                "--name",
                "cache",
                "--host",
                "localhost",
                "--port",
                str(rs.port),
                "--password-stdin",
                "--tls-ca",
                "redis-ca",
                input=rs.password + "\n",
            )
            proxy = cli.ok("proxy", "start", "cache")
            direct_r = redis_bench(
                ["-h", "localhost", "-p", str(rs.port), "--tls", "--cacert", str(rs.tls.ca), "-a", rs.password]
            )
            via_r = redis_bench(["-h", "127.0.0.1", "-p", str(proxy["port"])])
            cli.ok("proxy", "stop", proxy["proxy"])
            for name in ("GET", "SET"):
                print(
                    f"redis-benchmark {name} -c8: direct {direct_r[name]:.0f} rps, proxy {via_r[name]:.0f} rps, "
                    f"ratio {via_r[name] / direct_r[name]:.2f}"
                )
    finally:
        cli.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
