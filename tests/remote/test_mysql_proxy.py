"""MySQL proxy (PX-2, PX-3): native and ed25519 against real MariaDB; caching_sha2 against a scripted upstream."""

from __future__ import annotations

import functools
import socket
import ssl

import pymysql
import pytest

from tests.helpers import Cli
from tests.remote import fakes
from tests.remote.clients import run_mariadb
from tests.remote.credentials import add_db, add_tls_ca
from tests.remote.servers import Mariadb, make_tls, shared_dir


@pytest.fixture(scope="module")
def maria(rvault: Cli, mariadb: Mariadb) -> Mariadb:
    mariadb.sql(
        "CREATE DATABASE px; CREATE USER pn@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('pn-pw');"
        "CREATE USER pe@'%' IDENTIFIED VIA ed25519 USING PASSWORD('pe-pw');"
        "GRANT ALL ON px.* TO pn@'%'; GRANT ALL ON px.* TO pe@'%';"
    )
    add_tls_ca(rvault, "px-ca", mariadb.tls.ca)
    return mariadb


# The client presents itself as root on the `mysql` database: the proxy must log in as the credential's user and database.
_mariadb = functools.partial(run_mariadb, user="root", db="mysql")


@pytest.mark.parametrize(("user", "password"), [("pn", "pn-pw"), ("pe", "pe-pw")])
def test_mariadb_client_through_proxy(rvault: Cli, maria: Mariadb, user: str, password: str) -> None:
    """PX-1/PX-2/PX-3: no local password; upstream TLS; native or ed25519 (auth switch); user/db from the credential."""
    name = f"px-{user}"
    add_db(rvault, "mysql", maria.port, name=name, user=user, database="px", password=password, tls_ca="px-ca")
    proxy = rvault.ok("proxy", "start", name)
    proc = _mariadb(
        proxy["port"],
        "SELECT current_user(), database(), (SELECT variable_value FROM "
        "information_schema.session_status WHERE variable_name = 'Ssl_version'); "
        "CREATE TABLE IF NOT EXISTS t(x INT); INSERT INTO t VALUES (1),(2); "
        "SELECT count(*) >= 2 FROM t",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    first = lines[0].split("\t")
    assert first[:2] == [f"{user}@%", "px"] and first[2].startswith("TLSv1.")
    assert lines[-1] == "1"
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_mysql_proxy_wrong_password_and_garbage(rvault: Cli, maria: Mariadb) -> None:
    """API-8/PX-2: a wrong upstream password reaches the client as error 1045; garbage closes only that client."""
    add_db(rvault, "mysql", maria.port, name="px-bad", user="pn", password="wrong", tls_ca="px-ca")
    bad = rvault.ok("proxy", "start", "px-bad")
    proc = _mariadb(bad["port"], "SELECT 1")
    assert proc.returncode != 0 and "1045" in proc.stderr and "remote_auth_failed" in proc.stderr
    rvault.ok("proxy", "stop", bad["proxy"])
    good = rvault.ok("proxy", "start", "px-pn")
    with socket.create_connection(("127.0.0.1", good["port"]), timeout=10) as sock:
        sock.recv(4096)  # greeting
        sock.sendall(b"\xff\xff\xff\x01" + b"x" * 100)  # an oversized length, then garbage
        sock.settimeout(10)
        while sock.recv(4096):  # an error packet at most, then the proxy closes (a hang would time out)
            pass
    assert _mariadb(good["port"], "SELECT 5").stdout.strip() == "5"
    rvault.ok("proxy", "stop", good["proxy"])


def _fake_tls() -> tuple[ssl.SSLContext, str]:
    directory = shared_dir()
    tls = make_tls(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    return context, str(tls.ca)


@pytest.mark.parametrize(("mode", "tls"), [("fast", False), ("switch", False), ("full", True), ("fast", True)])
def test_caching_sha2_against_scripted_upstream(rvault: Cli, mode: str, tls: bool) -> None:
    """PX-2: caching_sha2 fast path, auth switch, and full authentication over TLS."""
    context, ca = _fake_tls() if tls else (None, "")
    fake = fakes.MysqlFake("app", "sha2-secret", mode, context)
    with fakes.serve_blocking(fake.handle) as port:
        name = f"sha2-{mode}-{tls}"
        if tls:
            add_tls_ca(rvault, f"{name}-ca", ca)
            add_db(rvault, "mysql", port, name=name, user="app", password="sha2-secret", tls_ca=f"{name}-ca")
        else:
            add_db(
                rvault,
                "mysql",
                port,
                name=name,
                user="app",
                password="sha2-secret",
                host="127.0.0.1",
                extra=("--tls", "disabled"),
            )
        proxy = rvault.ok("proxy", "start", name)
        conn = pymysql.connect(host="127.0.0.1", port=proxy["port"], user="someone-else", password="", ssl_disabled=True)
        with conn.cursor() as cursor:
            cursor.execute("DO 1")
        conn.close()
        assert fake.logged_in_as == ["app"]  # PX-3: the local user name never reached upstream
        assert b"sha2-secret" not in bytes(fake.plaintext)
        rvault.ok("proxy", "stop", proxy["proxy"])


def test_caching_sha2_full_auth_refused_without_tls(rvault: Cli) -> None:
    """PX-2: the full caching_sha2 exchange sends the password, so over plaintext the proxy refuses it."""
    fake = fakes.MysqlFake("app", "sha2-secret", "full", None)
    with fakes.serve_blocking(fake.handle) as port:
        add_db(
            rvault,
            "mysql",
            port,
            name="sha2-full-plain",
            user="app",
            password="sha2-secret",
            host="127.0.0.1",
            extra=("--tls", "disabled"),
        )
        proxy = rvault.ok("proxy", "start", "sha2-full-plain")
        with pytest.raises(pymysql.err.MySQLError) as info:
            pymysql.connect(host="127.0.0.1", port=proxy["port"], user="x", password="", ssl_disabled=True)
        assert "needs TLS" in str(info.value)
        assert fake.logged_in_as == [] and b"sha2-secret" not in bytes(fake.plaintext)
        rvault.ok("proxy", "stop", proxy["proxy"])
