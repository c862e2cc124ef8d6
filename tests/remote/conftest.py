"""Fixtures for remote tests: one throw-away server per module and a module-wide vault."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli, require
from tests.remote import servers


def _root() -> bool:
    return os.geteuid() == 0


@pytest.fixture(scope="module")
def rvault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    """An initialized, unlocked vault shared by one test module (init is the slow part)."""
    cli = Cli(home=tmp_path_factory.mktemp("remote") / "home")
    cli.init()
    yield cli
    cli.stop()


@pytest.fixture(scope="module")
def pg() -> Iterator[servers.Postgres]:
    require(
        _root() and (servers.PG_BIN / "initdb").exists() and shutil.which("psql") is not None,
        "PostgreSQL 15 server binaries and psql (apt: postgresql postgresql-client), run as root",
    )
    with servers.postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def mariadb() -> Iterator[servers.Mariadb]:
    require(
        _root() and shutil.which("mariadbd") is not None and shutil.which("mariadb") is not None,
        "MariaDB server and client (apt: mariadb-server mariadb-client), run as root",
    )
    with servers.mariadb_server() as server:
        yield server


@pytest.fixture(scope="module")
def redis_tls() -> Iterator[servers.Redis]:
    require(
        shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None,
        "redis-server and redis-cli with TLS (apt: redis-server redis-tools)",
    )
    with servers.redis_server(tls_on=True) as server:
        yield server


@pytest.fixture(scope="module")
def sshd() -> Iterator[servers.Sshd]:
    require(
        _root() and Path("/usr/sbin/sshd").exists() and shutil.which("ssh-keygen") is not None,
        "OpenSSH server (apt: openssh-server), run as root",
    )
    with servers.sshd_server() as server:
        yield server


@pytest.fixture(scope="module")
def ftp() -> Iterator[servers.Ftp]:
    try:
        import pyftpdlib  # noqa: F401
    except ImportError:
        require(False, "pyftpdlib (pip, dev extra)")
    with servers.ftp_server() as server:
        yield server


@pytest.fixture(scope="module")
def ftps() -> Iterator[servers.Ftp]:
    """An explicit-FTPS server (pyftpdlib's TLS_FTPHandler, TLS required) with its own test CA."""
    try:
        import OpenSSL  # noqa: F401
        import pyftpdlib  # noqa: F401
    except ImportError:
        require(False, "pyftpdlib and pyOpenSSL (pip, dev extra)")
    directory = servers.shared_dir()
    try:
        with servers.ftp_server(servers.make_tls(directory)) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def other_namespace(cli: Cli, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI under a fresh `sh` so its elevation namespace (parent PID) differs from the test's."""
    command = " ".join(f"'{a}'" for a in cli.command(*args, "--json"))
    return subprocess.run(["sh", "-c", command], input=input, capture_output=True, text=True, timeout=60, env=cli.environ())
