"""`credential new` calls shared by the remote tests and bench/proxy.py.

Each helper runs one `credential new …` through the CLI, fails the caller if the engine refuses it,
and returns the credential's name. A password always goes in on standard input (`--password-stdin`),
never in argv; `password=None` leaves `--password-stdin` out (a certificate-only or key-only login).
Flags a helper does not name (`--allow-host`, `--tls-cert`, `--tls disabled`, …) go through `extra`,
after the named ones and in the caller's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from tests.helpers import Cli
from tests.remote.servers import Ftp, Postgres, Redis


def add_tls_ca(cli: Cli, name: str, pem: Path | str) -> str:
    """A `tls-ca` credential holding the CA certificate in `pem`."""
    cli.ok("credential", "new", "tls-ca", "--name", name, "--pem-file", str(pem))
    return name


def _add(
    cli: Cli,
    ctype: str,
    name: str,
    *,
    host: str,
    port: int | None,
    user: str | None,
    database: str | None = None,
    password: str | None,
    tls_ca: str | None = None,
    extra: Sequence[str],
) -> str:
    args = ["credential", "new", ctype, "--name", name, "--host", host]
    if port is not None:
        args += ["--port", str(port)]
    if user is not None:
        args += ["--user", user]
    if database is not None:
        args += ["--database", database]
    if password is not None:
        args.append("--password-stdin")
    if tls_ca is not None:
        args += ["--tls-ca", tls_ca]
    cli.ok(*args, *extra, input=None if password is None else password + "\n")
    return name


def add_db(
    cli: Cli,
    ctype: Literal["postgres", "mysql", "redis"],
    port: int,
    *,
    name: str,
    password: str | None,
    user: str | None = None,
    database: str | None = None,
    tls_ca: str | None = None,
    host: str = "localhost",
    extra: Sequence[str] = (),
) -> str:
    """A `postgres`, `mysql` (MySQL or MariaDB) or `redis` credential for `host:port`, its server certificate
    verified against the `tls_ca` credential when one is named; a Redis `user` is an ACL user."""
    return _add(
        cli, ctype, name, host=host, port=port, user=user, database=database, password=password, tls_ca=tls_ca, extra=extra
    )


def add_pg_database(
    cli: Cli, pg: Postgres, *, name: str, role: str, database: str, password: str, ca: str, extra: Sequence[str] = ()
) -> str:
    """A login `role` with its own `database` on the throw-away server `pg`, then the `tls-ca` credential `ca`
    for that server's certificate and the `postgres` credential `name` logging in as `role`."""
    pg.psql(f"create role {role} login password '{password}'")
    pg.psql(f"create database {database} owner {role}")
    add_tls_ca(cli, ca, pg.tls.ca)
    return add_db(cli, "postgres", pg.port, name=name, user=role, database=database, password=password, tls_ca=ca, extra=extra)


def redis_vault(home: Path, redis: Redis, config: str = "", name: str = "cache") -> Cli:
    """A new initialized vault in `home` whose config.toml's `[engine]` table says `config`, holding the
    `tls-ca` credential `redis-ca` for the test Redis and the `redis` credential `name` for it."""
    cli = Cli(home=home)
    cli.home.mkdir(parents=True, mode=0o700)
    (cli.home / "config.toml").write_text("[engine]\n" + config)
    cli.init()
    add_tls_ca(cli, "redis-ca", redis.tls.ca)
    add_db(cli, "redis", redis.port, name=name, password=redis.password, tls_ca="redis-ca")
    return cli


def add_ftp(
    cli: Cli, name: str, server: Ftp, *, password: str | None = None, host: str = "127.0.0.1", tls_ca: str | None = None
) -> str:
    """An `ftp` credential for the test server (its own password unless `password` says otherwise);
    with `tls_ca` it requires explicit FTPS verified against that tls-ca credential."""
    extra = () if tls_ca is None else ("--tls", "required")
    secret = server.password if password is None else password
    return _add(cli, "ftp", name, host=host, port=server.port, user=server.user, password=secret, tls_ca=tls_ca, extra=extra)


def add_ssh(
    cli: Cli,
    name: str,
    *,
    user: str,
    host_key: str | None,
    port: int | None = None,
    password: str | None = None,
    host: str = "127.0.0.1",
    extra: Sequence[str] = (),
) -> str:
    """An `ssh` credential; the key or identity file goes in `extra`, `host_key=None` when `extra` pins it otherwise."""
    pin = () if host_key is None else ("--host-key", host_key)
    return _add(cli, "ssh", name, host=host, port=port, user=user, password=password, extra=(*pin, *extra))
