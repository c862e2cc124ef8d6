"""Proxy benchmarks (issue 7). One command: `.venv/bin/python bench/proxy.py [--seconds 30]`.

Prints, measured side by side in one run on throw-away servers (needs root, PostgreSQL 15
server binaries, pgbench, redis-server and redis-benchmark):
- pgbench select-only, 4 clients, 30 s per path in interleaved rounds: TPS through the proxy
  ÷ TPS direct (both with TLS upstream; the proxy's local leg is loopback plaintext), and the
  p50 latency added per query (from pgbench's per-transaction log);
- as a reference for what any TLS-terminating relay costs on this machine, the same run
  through stunnel (a C relay, `protocol = pgsql`) when it is installed: our ratio ÷ its ratio
  separates "a relay hop on 2 shared cores" from "our relay", and each relay process's CPU
  time per transaction (from /proc) says how much of the hop is the relay's own work;
- redis-benchmark GET and SET, 8 clients: requests/s through the proxy ÷ direct (TLS).
Issue target for pgbench: ≥ 0.8.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import Cli  # noqa: E402
from tests.remote.credentials import add_db, add_pg_database, add_tls_ca  # noqa: E402
from tests.remote.servers import postgres_server, redis_server  # noqa: E402

PG_PASSWORD = "bench-pg-password"


class PgbenchRuns:
    """One path's rounds: throughput over all of them, and the median of the rounds' p50s."""

    def __init__(self) -> None:
        self.rounds: list[float] = []
        self.p50s: list[float] = []
        self.cpu_per_tx: list[float] = []  # the relay process's CPU µs per transaction (relayed paths)

    def add(self, tps: float, p50: float) -> None:
        self.rounds.append(tps)
        self.p50s.append(p50)

    @property
    def relay_us(self) -> str:
        return f"{statistics.median(self.cpu_per_tx):.0f} us" if self.cpu_per_tx else "n/a"

    @property
    def tps(self) -> float:
        return statistics.fmean(self.rounds)

    @property
    def p50(self) -> float:
        return statistics.median(self.p50s)


def pgbench(conninfo: str, seconds: int, env: dict[str, str]) -> tuple[float, float]:
    """(TPS, p50 latency in ms) of a select-only run with 4 clients."""
    with tempfile.TemporaryDirectory() as logs:
        out = subprocess.run(
            ["pgbench", "-n", "-S", "-c", "4", "-j", "2", "-T", str(seconds), "-l", f"--log-prefix={logs}/tx", conninfo],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
        tps_match = re.search(r"tps = ([0-9.]+)", out)
        if tps_match is None:
            raise SystemExit(f"pgbench printed no tps line:\n{out}")
        # Per-transaction log lines: client_id tx_no latency_us script_no epoch epoch_us.
        latencies = [int(line.split()[2]) for log in Path(logs).iterdir() for line in log.read_text().splitlines()]
    if not latencies:
        raise SystemExit("pgbench wrote no per-transaction log")
    return float(tps_match.group(1)), statistics.median(latencies) / 1000


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a whole process so far (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def stunnel(pg_port: int, ca: Path) -> Iterator[tuple[int, int] | None]:
    """A C TLS relay in front of the same server (reference only): (port, pid); None when not installed."""
    binary = shutil.which("stunnel4") or shutil.which("stunnel")
    if binary is None:
        yield None
        return
    from tests.remote.servers import free_port, wait_port

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "stunnel.conf"
        conf.write_text(
            f"foreground = yes\npid =\n[pg]\nclient = yes\naccept = 127.0.0.1:{port}\nconnect = localhost:{pg_port}\n"
            f"protocol = pgsql\nCAfile = {ca}\nverifyChain = yes\ncheckHost = localhost\n"
            "socket = l:TCP_NODELAY=1\nsocket = r:TCP_NODELAY=1\n"
        )
        proc = subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            yield port, proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


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
    parser.add_argument("--seconds", type=int, default=30, help="pgbench time per path, all rounds together (issue: 30 s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds the time is split into")
    args = parser.parse_args()
    cli = Cli(home=Path(tempfile.mkdtemp(prefix="memories-bench-")) / "home")
    cli.init()
    try:
        with postgres_server() as pg:
            add_pg_database(cli, pg, name="bench", role="bench", database="bench", password=PG_PASSWORD, ca="pg-ca")
            env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
            direct = f"host=localhost port={pg.port} user=bench dbname=bench sslmode=verify-full sslrootcert={pg.tls.ca}"
            subprocess.run(
                ["pgbench", "-i", "-s", "2", "-q", direct],
                env={**env, "PGPASSWORD": PG_PASSWORD},
                check=True,
                capture_output=True,
            )
            # stunnel speaks plaintext to pgbench, so the server's SCRAM-SHA-256-PLUS offer
            # (it sees TLS) would be refused by libpq: the reference path uses an md5 role
            # (pg_hba allows md5 for `md5user` over TLS only). The login method only affects the
            # connect, which pgbench does once per client.
            pg.psql("set password_encryption = 'md5'; create role md5user login password 'bench-md5'")
            pg.psql("grant select on all tables in schema public to md5user", db="bench")
            proxy = cli.ok("proxy", "start", "bench")
            with stunnel(pg.port, pg.tls.ca) as stunnel_ref:
                paths = {
                    "direct": (direct, {**env, "PGPASSWORD": PG_PASSWORD}),
                    "proxy": (f"host=127.0.0.1 port={proxy['port']} user=x dbname=x sslmode=disable", env),
                }
                relays = {"proxy": cli.daemon_pid()}
                if stunnel_ref is not None:
                    via_stunnel = f"host=127.0.0.1 port={stunnel_ref[0]} user=md5user dbname=bench sslmode=disable"
                    paths["stunnel"] = (via_stunnel, {**env, "PGPASSWORD": "bench-md5"})
                    relays["stunnel"] = stunnel_ref[1]
                # Interleaved rounds: on a shared machine the load drifts over a minute, and a
                # ratio of two runs far apart in time measures the drift as much as the relay.
                runs = {name: PgbenchRuns() for name in paths}
                seconds = args.seconds // args.rounds
                for _ in range(args.rounds):
                    for name, (conninfo, run_env) in paths.items():
                        relay_pid = relays.get(name)
                        cpu_before = cpu_seconds(relay_pid) if relay_pid else 0.0
                        tps, p50 = pgbench(conninfo, seconds, run_env)
                        runs[name].add(tps, p50)
                        if relay_pid:
                            # The daemon's figure includes its other (idle) threads: an upper bound.
                            runs[name].cpu_per_tx.append((cpu_seconds(relay_pid) - cpu_before) / (tps * seconds) * 1e6)
            cli.ok("proxy", "stop", proxy["proxy"])
            d, p = runs["direct"], runs["proxy"]
            print(
                f"pgbench -S -c4, {args.rounds} interleaved rounds of {args.seconds // args.rounds} s per path: "
                f"direct {d.tps:.0f} tps, proxy {p.tps:.0f} tps, ratio {p.tps / d.tps:.2f} (target >= 0.8; "
                f"per round {', '.join(f'{x / y:.2f}' for x, y in zip(p.rounds, d.rounds, strict=True))}); "
                f"p50 latency {d.p50:.3f} -> {p.p50:.3f} ms (+{(p.p50 - d.p50) * 1000:.0f} us per query); "
                f"relay CPU per transaction {p.relay_us}; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
            if "stunnel" not in runs:
                print("stunnel reference: not installed (apt-get install stunnel4)")
            else:
                st = runs["stunnel"]
                print(
                    f"stunnel reference (C relay, same path, same rounds): {st.tps:.0f} tps, ratio {st.tps / d.tps:.2f} "
                    f"(per round {', '.join(f'{x / y:.2f}' for x, y in zip(st.rounds, d.rounds, strict=True))}), "
                    f"p50 {st.p50:.3f} ms, relay CPU per transaction {st.relay_us}; our ratio / stunnel's {p.tps / st.tps:.2f}"
                )
        with redis_server(tls_on=True) as rs:
            add_tls_ca(cli, "redis-ca", rs.tls.ca)
            add_db(cli, "redis", rs.port, name="cache", password=rs.password, tls_ca="redis-ca")
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
