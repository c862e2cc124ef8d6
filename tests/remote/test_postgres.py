"""PostgreSQL: credentials, sessions with approval tickets, and the proxy, against a real TLS+SCRAM server."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import Cli, require
from tests.remote import fakes
from tests.remote.clients import run_psql
from tests.remote.conftest import other_namespace
from tests.remote.credentials import add_db, add_pg_database
from tests.remote.servers import Postgres
from tests.remote.tickets import run_ticket

APP_PASSWORD = "pg-canary-Qx81-upstream-secret"


@pytest.fixture(scope="module")
def db(rvault: Cli, pg: Postgres) -> str:
    return add_pg_database(
        rvault,
        pg,
        name="prod-db",
        role="app",
        database="appdb",
        password=APP_PASSWORD,
        ca="pg-ca",
        extra=("--allow-host", "localhost", "--allow-host", "127.0.0.1"),
    )


# psql presents itself as postgres/template1 here: the proxy must log in as the credential's user and database instead.
_psql = functools.partial(run_psql, user="postgres", dbname="template1")


def test_credential_summary_never_shows_the_password(rvault: Cli, db: str) -> None:
    """RM-1/CD-3: list and show return public fields only; TLS is required by default (RM-4)."""
    shown = rvault.ok("credential", "show", db)
    assert shown["type"] == "postgres"
    assert shown["public"]["tls"] == "required"
    assert APP_PASSWORD not in str(shown)
    listed = rvault.ok("credential", "list", "--type", "postgres")
    assert [c["name"] for c in listed["items"]] == [db]
    assert APP_PASSWORD not in str(listed)


def test_bad_credential_input_is_typed(rvault: Cli) -> None:
    """API-8: malformed credential input is a typed error and stores nothing."""
    before = rvault.ok("credential", "list")["items"]
    assert (
        rvault.err(
            "credential", "new", "postgres", "--name", "x", "--host", "bad host!", "--user", "u", "--password-stdin", input="pw\n"
        )["code"]
        == "invalid_input"
    )
    assert (
        rvault.err("credential", "new", "postgres", "--name", "x", "--host", "localhost", "--user", "u")["code"]
        == "invalid_input"
    )  # no password
    assert (
        rvault.err(
            "credential",
            "new",
            "postgres",
            "--name",
            "x",
            "--host",
            "localhost",
            "--user",
            "u",
            "--allow-host",
            "other",
            "--password-stdin",
            input="pw\n",
        )["code"]
        == "invalid_input"
    )
    assert rvault.ok("credential", "list")["items"] == before


def test_allowlist_is_checked_before_connecting(rvault: Cli, db: str) -> None:
    """RM-1: a host outside the credential's allowlist is refused before any connection."""
    assert rvault.err("remote", "open", db, "--host", "10.0.0.1")["code"] == "host_not_allowed"
    assert rvault.err("proxy", "start", db, "--host", "10.0.0.1")["code"] == "host_not_allowed"


def test_hostname_is_always_verified(rvault: Cli, db: str) -> None:
    """RM-4: the server certificate names only `localhost`; connecting by 127.0.0.1 fails verification."""
    assert rvault.err("remote", "open", db, "--host", "127.0.0.1")["code"] == "remote_tls_failed"


def test_system_trust_alone_rejects_the_test_ca(rvault: Cli, pg: Postgres) -> None:
    """RM-4: without the tls_ca credential the self-signed server certificate does not verify."""
    add_db(rvault, "postgres", pg.port, name="no-ca", user="app", password=APP_PASSWORD)
    assert rvault.err("remote", "open", "no-ca")["code"] == "remote_tls_failed"


def test_ticket_lifecycle(rvault: Cli, db: str) -> None:
    """RM-5: exec needs approval; approval needs elevation, is single-use and bound to the approving namespace."""
    session = rvault.ok("remote", "open", db)["session"]
    ticket = rvault.ok("remote", "propose", session, "select current_user, current_database()")
    assert len(ticket["fingerprint"]) == 64  # full SHA-256 (ID-4)
    assert rvault.err("remote", "exec", ticket["ticket"])["code"] == "ticket_not_approved"

    # A caller in another shell session (another namespace), not elevated, cannot approve.
    proc = other_namespace(rvault, "remote", "approve", ticket["ticket"])
    assert proc.returncode != 0 and '"elevation_required"' in proc.stdout

    rvault.sudo()
    assert rvault.err("remote", "approve", ticket["ticket"], "--fingerprint", "0" * 64)["code"] == "invalid_input"
    approved = rvault.ok("remote", "approve", ticket["ticket"], "--fingerprint", ticket["fingerprint"])
    assert approved["state"] == "approved"
    assert rvault.err("remote", "approve", ticket["ticket"])["code"] == "ticket_used"

    # Another namespace cannot execute what this one approved.
    proc = other_namespace(rvault, "remote", "exec", ticket["ticket"])
    assert proc.returncode != 0 and '"permission_denied"' in proc.stdout

    done = rvault.ok("remote", "exec", ticket["ticket"])
    assert done["result"]["rows"] == [["app", "appdb"]]
    assert rvault.err("remote", "exec", ticket["ticket"])["code"] == "ticket_used"
    rvault.ok("remote", "close", session)
    assert rvault.err("remote", "propose", session, "select 1")["code"] == "session_closed"


def test_fingerprint_covers_session_sequence_and_instruction(rvault: Cli, db: str) -> None:
    """RM-5: a changed instruction, a later sequence number or another session each change the fingerprint."""
    s1 = rvault.ok("remote", "open", db)["session"]
    s2 = rvault.ok("remote", "open", db)["session"]
    a = rvault.ok("remote", "propose", s1, "select 1")
    b = rvault.ok("remote", "propose", s1, "select 1")  # same text, next sequence number
    c = rvault.ok("remote", "propose", s1, "select 2")
    d = rvault.ok("remote", "propose", s2, "select 1")
    e = rvault.ok("remote", "propose", s2, "  select 1\r\n")  # normalizes to the same text
    assert e["instruction"] == "select 1"
    assert len({a["fingerprint"], b["fingerprint"], c["fingerprint"], d["fingerprint"], e["fingerprint"]}) == 5
    assert (a["seq"], b["seq"], c["seq"]) == (1, 2, 3)
    rvault.ok("remote", "close", s1)
    rvault.ok("remote", "close", s2)


def test_remote_errors_are_typed_and_bounded(rvault: Cli, db: str) -> None:
    """API-8 / RM-5: a failing query is a typed error; a large result is cut and flagged."""
    rvault.sudo()
    session = rvault.ok("remote", "open", db)["session"]
    bad = rvault.ok("remote", "propose", session, "select * from no_such_table")
    rvault.ok("remote", "approve", bad["ticket"])
    err = rvault.err("remote", "exec", bad["ticket"])
    assert err["code"] == "remote_error" and "42P01" in err["message"]
    result = run_ticket(rvault, session, "select g from generate_series(1, 5000) g")["result"]
    assert result["truncated"] is True and len(result["rows"]) == 1000 and result["row_count"] == 5000
    rvault.ok("remote", "close", session)


def test_wrong_upstream_password_is_typed(rvault: Cli, pg: Postgres) -> None:
    """API-8: a rejected upstream login is `remote_auth_failed`, for sessions and through the proxy."""
    add_db(rvault, "postgres", pg.port, name="wrong-pw", user="app", database="appdb", password="nope", tls_ca="pg-ca")
    assert rvault.err("remote", "open", "wrong-pw")["code"] == "remote_auth_failed"
    proxy = rvault.ok("proxy", "start", "wrong-pw")
    proc = _psql(proxy["port"], "select 1")
    assert proc.returncode != 0 and "remote_auth_failed" in proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_proxy_runs_psql_as_the_configured_identity(rvault: Cli, db: str) -> None:
    """PX-1/PX-2/PX-3: psql connects with no password; TLS+SCRAM upstream; startup user/db do not override."""
    proxy = rvault.ok("proxy", "start", db)
    assert proxy["address"].startswith("127.0.0.1:")
    proc = _psql(
        proxy["port"],
        "select current_user, current_database(), (select ssl from pg_stat_ssl where pid = pg_backend_pid())",
        user="postgres",
        dbname="template1",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "app|appdb|t"
    # Several statements and a larger result relay intact.
    proc = _psql(
        proxy["port"], "create temp table t(x int); insert into t select generate_series(1,20000); select count(*), sum(x) from t"
    )
    assert proc.stdout.strip().splitlines()[-1] == "20000|200010000"
    assert [p["proxy"] for p in rvault.ok("proxy", "list")["proxies"]] == [proxy["proxy"]]
    rvault.ok("proxy", "stop", proxy["proxy"])
    assert rvault.ok("proxy", "list")["proxies"] == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy["port"]), timeout=2).close()


def _handshake_garbage(port: int, data: bytes) -> bytes:
    """Send ``data``; return what the proxy answered before it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        except TimeoutError:
            pytest.fail("the proxy kept a malformed connection open")
        except ConnectionResetError:
            pass  # closed with unread input: also a close
        return b"".join(chunks)


def test_malformed_local_input_closes_only_that_connection(rvault: Cli, db: str) -> None:
    """PX-2: an oversized packet, garbage before startup and a stalled handshake close only their own connection."""
    proxy = rvault.ok("proxy", "start", db)
    port = proxy["port"]
    stalled = socket.create_connection(("127.0.0.1", port), timeout=10)
    stalled.sendall(b"\x00\x00")  # slowloris: half a length field, then silence
    oversized = (1 << 20).to_bytes(4, "big") + (196608).to_bytes(4, "big")
    assert b"FATAL" in _handshake_garbage(port, oversized)  # told why, in its own protocol, then closed
    assert b"postgres" not in _handshake_garbage(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").lower()
    _handshake_garbage(port, (12).to_bytes(4, "big") + (1234).to_bytes(4, "big") + b"abcd")
    proc = _psql(port, "select 42")
    assert proc.returncode == 0 and proc.stdout.strip() == "42"
    stalled.close()
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_client_limit_is_sixteen(rvault: Cli, db: str) -> None:
    """PX-2: at most 16 clients per listener; the 17th is closed at once and others keep working."""
    proxy = rvault.ok("proxy", "start", db)
    port = proxy["port"]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(16)]
    try:
        deadline = time.monotonic() + 120
        while rvault.ok("proxy", "list")["proxies"][0]["clients"] < 16 and time.monotonic() < deadline:
            time.sleep(0.05)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert extra.recv(1) == b""  # closed by the proxy
        extra.close()
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 120
    while rvault.ok("proxy", "list")["proxies"][0]["clients"] > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _psql(port, "select 7").stdout.strip() == "7"
    rvault.ok("proxy", "stop", proxy["proxy"])


@pytest.mark.parametrize("tamper", ["signature", "nonce", "skip_final"])
def test_tampered_scram_is_rejected(rvault: Cli, tamper: str) -> None:
    """PX-2: the proxy checks the server nonce and the server signature (a scripted upstream tampers them)."""
    with fakes.serve(fakes.pg_scram_server("fake-pw", tamper)) as port:
        name = f"fake-{tamper}"
        add_db(rvault, "postgres", port, name=name, user="app", password="fake-pw", host="127.0.0.1", extra=("--tls", "disabled"))
        proxy = rvault.ok("proxy", "start", name)
        proc = _psql(proxy["port"], "select 1")
        assert proc.returncode != 0
        assert "protocol_error" in proc.stderr and "SCRAM" in proc.stderr
        rvault.ok("proxy", "stop", proxy["proxy"])


def test_scripted_upstream_accepts_the_honest_exchange(rvault: Cli) -> None:
    """Control for the tamper test: the same scripted upstream without tampering completes the handshake."""
    with fakes.serve(fakes.pg_scram_server("fake-pw", "none")) as port:
        add_db(
            rvault,
            "postgres",
            port,
            name="fake-honest",
            user="app",
            password="fake-pw",
            host="127.0.0.1",
            extra=("--tls", "disabled"),
        )
        proxy = rvault.ok("proxy", "start", "fake-honest")
        sock = socket.create_connection(("127.0.0.1", proxy["port"]), timeout=10)
        body = (196608).to_bytes(4, "big") + b"user\x00x\x00\x00"
        sock.sendall((len(body) + 4).to_bytes(4, "big") + body)
        reply = sock.recv(64)
        assert reply.startswith(b"R\x00\x00\x00\x08\x00\x00\x00\x00")  # AuthenticationOk
        sock.close()
        rvault.ok("proxy", "stop", proxy["proxy"])


def test_md5_refused_unless_allowed(rvault: Cli, pg: Postgres) -> None:
    """PX-2: an upstream asking for MD5 is refused unless the credential allows it."""
    pg.psql("set password_encryption = 'md5'; create role md5user login password 'md5-secret'")
    pg.psql("grant connect on database appdb to md5user")
    for name, extra in (("md5-strict", []), ("md5-allowed", ["--allow-auth", "md5"])):
        add_db(
            rvault,
            "postgres",
            pg.port,
            name=name,
            user="md5user",
            database="appdb",
            password="md5-secret",
            tls_ca="pg-ca",
            extra=extra,
        )
    strict = rvault.ok("proxy", "start", "md5-strict")
    proc = _psql(strict["port"], "select current_user")
    assert proc.returncode != 0 and "protocol_error" in proc.stderr
    allowed = rvault.ok("proxy", "start", "md5-allowed")
    proc = _psql(allowed["port"], "select current_user")
    assert proc.stdout.strip() == "md5user", proc.stderr
    rvault.ok("proxy", "stop", strict["proxy"])
    rvault.ok("proxy", "stop", allowed["proxy"])


def test_lock_drops_sessions_tickets_and_proxies(rvault: Cli, db: str) -> None:
    """RM-5/PX-4/ST-10: lock closes sessions, voids tickets and stops proxies before its answer returns."""
    session = rvault.ok("remote", "open", db)["session"]
    ticket = rvault.ok("remote", "propose", session, "select 1")["ticket"]
    proxy = rvault.ok("proxy", "start", db)
    live = socket.create_connection(("127.0.0.1", proxy["port"]), timeout=10)  # a client mid-handshake
    rvault.ok("lock")
    # The lock answer has returned: the listener is gone and the live client was closed.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", proxy["port"]), timeout=2).close()
    assert live.recv(1) == b""
    live.close()
    rvault.unlock()
    listed = rvault.ok("remote", "list")
    assert listed == {"sessions": [], "tickets": [], "proxies": []}
    rvault.sudo()
    assert rvault.err("remote", "approve", ticket)["code"] == "not_found"
    assert rvault.err("remote", "propose", session, "select 1")["code"] == "session_closed"


def test_upstream_password_never_leaks(rvault: Cli, db: str) -> None:
    """ST-1/API-8 canary: the upstream password is in no output, log or database file."""
    outputs = [
        rvault.run("credential", "show", db, "--json").stdout,
        rvault.run("credential", "list", "--json").stdout,
        rvault.run("remote", "list", "--json").stdout,
    ]
    assert all(APP_PASSWORD not in o for o in outputs)
    needle = APP_PASSWORD.encode()
    files = [p for p in Path(rvault.home).rglob("*") if p.is_file() and not p.is_socket()]
    assert files
    for path in files:
        assert needle not in path.read_bytes(), path


def test_dependencies_present(pg: Postgres) -> None:
    """The psql client these tests drive is installed and talks to the test server directly."""
    require(shutil.which("psql") is not None, "psql (apt: postgresql-client)")
    assert pg.psql("select 6 * 7") == "42"


def test_cancel_request_reaches_the_server(rvault: Cli, db: str, pg: Postgres) -> None:
    """PX-2: a query cancel (psql's Ctrl-C) sent to the proxy is forwarded over TLS and stops the query."""
    import signal

    proxy = rvault.ok("proxy", "start", db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    proc = subprocess.Popen(
        ["psql", f"host=127.0.0.1 port={proxy['port']} user=x dbname=x", "-w", "-Atc", "select pg_sleep(60)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        running = "select count(*) from pg_stat_activity where query = 'select pg_sleep(60)' and state = 'active'"
        while pg.psql(running) != "1" and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "canceling statement due to user request" in err
    rvault.ok("proxy", "stop", proxy["proxy"])
