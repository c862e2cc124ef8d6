"""PX-2/RM-4: SCRAM-SHA-256-PLUS (tls-server-end-point channel binding) in the PostgreSQL proxy and sessions.

PostgreSQL 15 offers SCRAM-SHA-256-PLUS over TLS; the engine then binds the SCRAM proof to
the server certificate it saw. A TLS-terminating man in the middle with a certificate the
client trusts can relay plain SCRAM, but not PLUS: the real server rejects the binding.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.remote import pg_wire
from engine.remote.targets import Target
from engine.remote.tls import client_context
from tests.helpers import Cli
from tests.remote import fakes
from tests.remote.clients import run_psql
from tests.remote.credentials import add_db, add_pg_database, add_tls_ca
from tests.remote.servers import Postgres, Tls, issue_cert, make_tls, shared_dir
from tests.remote.tickets import run_ticket

PASSWORD = "cb-canary-7Hq2-password"


@pytest.fixture(scope="module")
def cb_db(rvault: Cli, pg: Postgres) -> str:
    return add_pg_database(rvault, pg, name="cb-db", role="cbuser", database="cbdb", password=PASSWORD, ca="cb-ca")


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    directory = shared_dir()
    yield directory
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def _server_context(tls: Tls) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    return context


def _target(pg: Postgres, **changes: Any) -> Target:
    base = Target(
        asset_id=b"t",
        name="t",
        ctype="postgres",
        host="localhost",
        port=pg.port,
        user="cbuser",
        database="cbdb",
        password=PASSWORD,
        tls_ca_pem=pg.tls.ca.read_text(),
    )
    return dataclasses.replace(base, **changes)


def test_real_server_negotiates_scram_plus(pg: Postgres, cb_db: str) -> None:
    """PX-2: against PostgreSQL 15 over TLS the upstream leg picks SCRAM-SHA-256-PLUS and the server accepts it."""

    async def login() -> str:
        target = _target(pg)
        streams = await pg_wire.connect(target, "localhost", client_context(target))
        try:
            streams[1].write(pg_wire.startup_message({"user": "cbuser", "database": "cbdb"}))
            return await pg_wire.authenticate(streams, target)
        finally:
            streams[1].transport.abort()

    assert asyncio.run(login()) == "SCRAM-SHA-256-PLUS"


def test_session_and_proxy_log_in_with_plus(rvault: Cli, cb_db: str) -> None:
    """PX-2/RM-4: `remote open` and the proxy (psql) both complete the PLUS login against the real server."""
    rvault.sudo()
    session = rvault.ok("remote", "open", cb_db)["session"]
    sql = "select current_user, (select ssl from pg_stat_ssl where pid = pg_backend_pid())"
    assert run_ticket(rvault, session, sql)["result"]["rows"] == [["cbuser", True]]
    rvault.ok("remote", "close", session)
    proxy = rvault.ok("proxy", "start", cb_db)
    proc = run_psql(proxy["port"], "select current_user")
    assert proc.stdout.strip() == "cbuser", proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


@pytest.mark.parametrize("binding", ["honest", "wrong"])
def test_scripted_plus_only_upstream(rvault: Cli, scratch: Path, binding: str) -> None:
    """PX-2: offered only PLUS, the client sends gs2 `p=tls-server-end-point`; a binding that does
    not match the server's certificate is refused (typed `remote_tls_failed`, session and proxy)."""
    directory = scratch / f"plus-{binding}"
    directory.mkdir()
    tls = make_tls(directory)
    (directory / "other").mkdir()
    other = make_tls(directory / "other")
    bound = tls.cert.read_text() if binding == "honest" else other.cert.read_text()
    seen: list[str] = []
    name = f"plus-{binding}"
    add_tls_ca(rvault, f"{name}-ca", tls.ca)
    with fakes.serve(fakes.pg_scram_plus_server(PASSWORD, _server_context(tls), bound, seen)) as port:
        add_db(rvault, "postgres", port, name=name, user="cbuser", password=PASSWORD, tls_ca=f"{name}-ca", host="127.0.0.1")
        proxy = rvault.ok("proxy", "start", name)
        proc = run_psql(proxy["port"], "select 1")
        rvault.ok("proxy", "stop", proxy["proxy"])
        if binding == "honest":
            # The fake answers no query, but psql got past authentication (AuthenticationOk + ReadyForQuery).
            assert "remote_" not in proc.stderr, proc.stderr
            session = rvault.ok("remote", "open", name)["session"]
            rvault.ok("remote", "close", session)
        else:
            assert "remote_tls_failed" in proc.stderr and "channel binding" in proc.stderr
            err = rvault.err("remote", "open", name)
            assert err["code"] == "remote_tls_failed" and "channel binding" in err["message"]
    assert seen and all(s == "SCRAM-SHA-256-PLUS p=tls-server-end-point" for s in seen), seen


@pytest.mark.parametrize("strip_plus", [False, True], ids=["relay", "strip-plus"])
def test_tls_intercepting_middlebox_is_detected(rvault: Cli, pg: Postgres, cb_db: str, scratch: Path, strip_plus: bool) -> None:
    """PX-2/RM-4: a man in the middle holding a certificate the credential trusts (same CA, right
    name) cannot relay the login to the real server: PLUS binds the proof to *its* certificate, and
    stripping PLUS from the offer makes the client's `y` flag reveal the downgrade."""
    directory = scratch / f"mitm-{strip_plus}"
    directory.mkdir()
    issued = issue_cert(pg.tls, "localhost", directory, server=True, sans=("localhost", "127.0.0.1"))
    mitm_tls = Tls(pg.tls.ca, issued.cert, issued.key)
    upstream = ssl.create_default_context(cafile=str(pg.tls.ca))
    handler = fakes.pg_tls_mitm(pg.port, _server_context(mitm_tls), upstream, strip_plus)
    name = f"mitm-{'strip' if strip_plus else 'relay'}"
    with fakes.serve(handler) as port:
        # Control: without channel binding (libpq's channel_binding=disable) the middlebox relays a login fine.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["PGPASSWORD"] = PASSWORD
        control = subprocess.run(
            [
                "psql",
                f"host=localhost port={port} user=cbuser dbname=cbdb sslmode=verify-full sslrootcert={pg.tls.ca} "
                "channel_binding=disable",
                "-Atc",
                "select current_user",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        if not strip_plus:
            assert control.stdout.strip() == "cbuser", control.stderr
        add_db(rvault, "postgres", port, name=name, user="cbuser", database="cbdb", password=PASSWORD, tls_ca="cb-ca")
        err = rvault.err("remote", "open", name)
        assert err["code"] == "remote_tls_failed" and "channel binding" in err["message"], err
        proxy = rvault.ok("proxy", "start", name)
        proc = run_psql(proxy["port"], "select 1")
        assert proc.returncode != 0 and "remote_tls_failed" in proc.stderr and "channel binding" in proc.stderr
        rvault.ok("proxy", "stop", proxy["proxy"])


def test_choose_scram_prefers_plus_only_with_tls(pg: Postgres) -> None:
    """PX-2: PLUS when offered over TLS; `y` when TLS but no PLUS offer; `n` without TLS; no SCRAM at all is refused."""
    target = _target(pg)
    der = ssl.PEM_cert_to_DER_cert(pg.tls.cert.read_text())
    both = ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]
    client, mechanism = pg_wire.choose_scram(both, target, der)
    assert mechanism == "SCRAM-SHA-256-PLUS" and client.get_client_first().startswith("p=tls-server-end-point,,")
    client, mechanism = pg_wire.choose_scram(["SCRAM-SHA-256"], target, der)
    assert mechanism == "SCRAM-SHA-256" and client.get_client_first().startswith("y,,")
    client, mechanism = pg_wire.choose_scram(both, target, None)
    assert mechanism == "SCRAM-SHA-256" and client.get_client_first().startswith("n,,")
    with pytest.raises(MemoriesError) as info:
        pg_wire.choose_scram(["SCRAM-SHA-256-PLUS"], target, None)
    assert info.value.code == "protocol_error"
    # The binding is RFC 5929's: SHA-256 of the DER certificate (signed with SHA-256).
    import hashlib

    assert pg_wire.end_point_binding(der) == hashlib.sha256(der).digest()
