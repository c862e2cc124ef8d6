"""The real command-line clients (psql, mariadb, redis-cli) pointed at a loopback port, usually a proxy's.

They connect to 127.0.0.1 in plaintext with no password: what a proxy must turn into the credential's
upstream login. The user and database they present are placeholders unless a test passes others.
"""

from __future__ import annotations

import os
import subprocess


def run_psql(port: int, sql: str, user: str = "x", dbname: str = "x") -> subprocess.CompletedProcess[str]:
    """`psql -w -Atc SQL`, no PG* variable passed on from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run(
        ["psql", f"host=127.0.0.1 port={port} user={user} dbname={dbname} connect_timeout=10", "-w", "-Atc", sql],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def run_mariadb(port: int, sql: str, user: str = "x", db: str | None = None) -> subprocess.CompletedProcess[str]:
    """`mariadb -N -B -e SQL [DB]`, ignoring any option file."""
    database = [] if db is None else [db]
    return subprocess.run(
        ["mariadb", "--no-defaults", "-h", "127.0.0.1", "-P", str(port), "-u", user, "-N", "-B", "-e", sql, *database],
        capture_output=True,
        text=True,
        timeout=60,
    )


def run_redis_cli(port: int, *args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
    """`redis-cli ARGS`, or the commands of `script` (one a line) on its standard input."""
    return subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], input=script, capture_output=True, text=True, timeout=30
    )
