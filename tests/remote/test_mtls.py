"""RM-3/RM-4/PX-2: TLS client certificates (mTLS) for PostgreSQL, MariaDB and Redis credentials.

Each server here verifies client certificates against the test CA (servers.make_tls); the
credential names a `tls-cert` credential with `--tls-cert`. Certificates come from
`credential generate tls --csr` (signed by the test CA, then imported with `--key`) or are
imported from files. Without a certificate, or with one from another CA, the server refuses
and the user gets a typed error that says so (API-8).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.remote import tls as remote_tls
from engine.remote.targets import Target
from tests.helpers import Cli, require
from tests.remote import servers
from tests.remote.clients import run_mariadb, run_psql, run_redis_cli
from tests.remote.credentials import add_db, add_tls_ca
from tests.remote.servers import Issued, Mariadb, Postgres, Redis, issue_cert, make_tls, shared_dir, sign_csr
from tests.remote.tickets import run_once

PG_HBA = (
    "hostssl all ana 127.0.0.1/32 cert\n"  # certificate only (implies clientcert=verify-full: CN = user)
    "hostssl all certpw 127.0.0.1/32 scram-sha-256 clientcert=verify-ca\n"  # password and certificate
)
CERTPW_PASSWORD = "mtls-canary-Vb5e-password"


@pytest.fixture(scope="module")
def pg_mtls() -> Iterator[Postgres]:
    require(
        os.geteuid() == 0 and (servers.PG_BIN / "initdb").exists() and shutil.which("psql") is not None,
        "PostgreSQL 15 server binaries and psql (apt: postgresql postgresql-client), run as root",
    )
    with servers.postgres_server(client_ca=True, hba_first=PG_HBA) as server:
        server.psql(f"create role ana login; create role certpw login password '{CERTPW_PASSWORD}'")
        yield server


@pytest.fixture(scope="module")
def redis_mtls() -> Iterator[Redis]:
    require(
        shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None,
        "redis-server and redis-cli with TLS (apt: redis-server redis-tools)",
    )
    with servers.redis_server(tls_on=True, auth_clients=True) as server:
        yield server


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    directory = shared_dir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def foreign(scratch: Path) -> Issued:
    """A client certificate for `ana` from a CA no server here trusts."""
    (scratch / "foreign").mkdir()
    return issue_cert(make_tls(scratch / "foreign"), "ana", scratch / "foreign")


def _tls_cert_from_csr(cli: Cli, tls: servers.Tls, name: str, cn: str, scratch: Path) -> str:
    """RM-3: generate the key inside the engine, have the CA sign its CSR, import the signed certificate."""
    cli.sudo()
    cli.ok("credential", "generate", "tls", "--name", f"{name}-key", "--cn", cn, "--csr")
    csr = cli.ok("credential", "public", f"{name}-key")["csr"]
    signed = scratch / f"{name}.crt"
    signed.write_text(sign_csr(tls, csr))
    cli.ok("credential", "new", "tls-cert", "--name", name, "--key", f"{name}-key", "--certificate-file", str(signed))
    return name


def _tls_cert_from_files(cli: Cli, name: str, issued: Issued) -> str:
    cli.ok("credential", "new", "tls-cert", "--name", name, "--certificate-file", str(issued.cert), "--key-file", str(issued.key))
    return name


def _exec(cli: Cli, credential: str, instruction: str) -> dict[str, Any]:
    """One approved instruction on a session of its own, elevating first (sudo lasts minutes; tests run longer)."""
    cli.sudo()
    return run_once(cli, credential, instruction)


# -- credentials ---------------------------------------------------------------------------------
def test_tls_cert_credentials_are_validated(rvault: Cli, scratch: Path) -> None:
    """API-8/RM-3: a mismatched pair, a non-certificate, a wrong reference or a misplaced --tls-cert
    is a typed error that stores nothing; the certificate is public, the key never shown."""
    ca = make_tls(scratch)
    one, two = issue_cert(ca, "one", scratch), issue_cert(ca, "two", scratch)
    before = rvault.ok("credential", "list")["items"]
    bad = [
        ["tls-cert", "--name", "x", "--certificate-file", str(one.cert), "--key-file", str(two.key)],
        ["tls-cert", "--name", "x", "--certificate-file", str(one.key), "--key-file", str(one.key)],
        ["tls-cert", "--name", "x", "--certificate-file", str(one.cert)],
        ["postgres", "--name", "x", "--host", "localhost", "--user", "u", "--tls-cert", "no-such-cred"],
    ]
    for args in bad:
        assert rvault.err("credential", "new", *args)["code"] in {"invalid_input", "not_found"}, args
    assert rvault.ok("credential", "list")["items"] == before

    name = _tls_cert_from_files(rvault, "one-cert", one)
    add_tls_ca(rvault, "val-ca", ca.ca)
    for args in (
        ["postgres", "--name", "x", "--host", "localhost", "--user", "u", "--tls-cert", "val-ca"],  # not a tls_cert
        ["postgres", "--name", "x", "--host", "localhost", "--user", "u", "--tls", "disabled", "--tls-cert", name],
        ["tcp", "--name", "x", "--host", "localhost", "--port", "7", "--tls", "required", "--tls-cert", name],
        ["postgres", "--name", "x", "--host", "localhost", "--user", "u"],  # neither password nor certificate
    ):
        assert rvault.err("credential", "new", *args)["code"] == "invalid_input", args
    shown = rvault.ok("credential", "public", name)
    assert shown["certificate"] == one.cert.read_text()
    key_body = "".join(one.key.read_text().splitlines()[1:-1])
    for command in (("credential", "show", name), ("credential", "list"), ("credential", "public", name)):
        assert key_body[:40] not in rvault.run(*command, "--json").stdout


def test_client_key_is_handed_to_openssl_encrypted(scratch: Path) -> None:
    """RM-3: the only bytes written for OpenSSL are an encrypted PKCS#8 key (one-time passphrase);
    a key that does not match its certificate is a typed error."""
    (scratch / "unit").mkdir()
    ca = make_tls(scratch / "unit")
    one, two = issue_cert(ca, "one", scratch / "unit"), issue_cert(ca, "two", scratch / "unit")
    key_pem = one.key.read_text()
    blob = remote_tls._encrypted_key(key_pem, b"p" * 32)
    assert blob.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert "".join(key_pem.splitlines()[1:-1]).encode()[:40] not in blob
    context = ssl.create_default_context()
    remote_tls.load_client_cert(context, one.cert.read_text(), key_pem)  # no error: the pair loads
    with pytest.raises(MemoriesError) as info:
        remote_tls.load_client_cert(ssl.create_default_context(), one.cert.read_text(), two.key.read_text())
    assert info.value.code == "invalid_input"
    assert not [p for p in Path(tempfile.gettempdir()).glob("memories-tls-*")]  # nothing left behind


# -- PostgreSQL ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pg_creds(rvault: Cli, pg_mtls: Postgres, scratch: Path) -> Postgres:
    add_tls_ca(rvault, "pgm-ca", pg_mtls.tls.ca)
    _tls_cert_from_csr(rvault, pg_mtls.tls, "pg-ana", "ana", scratch)
    _tls_cert_from_files(rvault, "pg-certpw", issue_cert(pg_mtls.tls, "certpw", scratch))
    return pg_mtls


def test_postgres_certificate_only_login(rvault: Cli, pg_creds: Postgres) -> None:
    """RM-4/PX-2: `cert` authentication (no password in the credential) for sessions and the proxy."""
    add_db(
        rvault,
        "postgres",
        pg_creds.port,
        name="pgm-ana",
        user="ana",
        database="postgres",
        password=None,
        tls_ca="pgm-ca",
        extra=("--tls-cert", "pg-ana"),
    )
    result = _exec(rvault, "pgm-ana", "select current_user, (select client_dn from pg_stat_ssl where pid = pg_backend_pid())")
    assert result["rows"] == [["ana", "/CN=ana"]]
    proxy = rvault.ok("proxy", "start", "pgm-ana")
    proc = run_psql(proxy["port"], "select current_user")
    assert proc.stdout.strip() == "ana", proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_postgres_password_plus_certificate(rvault: Cli, pg_creds: Postgres) -> None:
    """RM-4/PX-2: `scram-sha-256 clientcert=verify-ca`: SCRAM (PLUS over TLS) and the certificate together."""
    add_db(
        rvault,
        "postgres",
        pg_creds.port,
        name="pgm-certpw",
        user="certpw",
        database="postgres",
        password=CERTPW_PASSWORD,
        tls_ca="pgm-ca",
        extra=("--tls-cert", "pg-certpw"),
    )
    assert _exec(rvault, "pgm-certpw", "select current_user")["rows"] == [["certpw"]]
    proxy = rvault.ok("proxy", "start", "pgm-certpw")
    proc = run_psql(proxy["port"], "select current_user")
    assert proc.stdout.strip() == "certpw", proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_postgres_refuses_missing_or_foreign_certificate(rvault: Cli, pg_creds: Postgres, foreign: Issued) -> None:
    """API-8: no certificate → `remote_auth_failed` naming --tls-cert; a certificate from another CA →
    `remote_auth_failed` saying it was rejected. The proxy tells psql the same."""
    add_db(rvault, "postgres", pg_creds.port, name="pgm-nocert", user="certpw", password=CERTPW_PASSWORD, tls_ca="pgm-ca")
    err = rvault.err("remote", "open", "pgm-nocert")
    assert err["code"] == "remote_auth_failed" and "--tls-cert" in err["message"], err
    proxy = rvault.ok("proxy", "start", "pgm-nocert")
    proc = run_psql(proxy["port"], "select 1")
    assert "remote_auth_failed" in proc.stderr and "client certificate" in proc.stderr, proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])

    _tls_cert_from_files(rvault, "pg-foreign", foreign)
    add_db(
        rvault,
        "postgres",
        pg_creds.port,
        name="pgm-foreign",
        user="ana",
        password=None,
        tls_ca="pgm-ca",
        extra=("--tls-cert", "pg-foreign"),
    )
    err = rvault.err("remote", "open", "pgm-foreign")
    assert err["code"] == "remote_auth_failed" and "rejected" in err["message"] and "certificate" in err["message"], err
    proxy = rvault.ok("proxy", "start", "pgm-foreign")
    proc = run_psql(proxy["port"], "select 1")
    assert "remote_auth_failed" in proc.stderr and "certificate" in proc.stderr, proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


# -- MariaDB -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def maria_creds(rvault: Cli, mariadb: Mariadb, scratch: Path) -> Mariadb:
    mariadb.sql(
        "CREATE DATABASE mt; CREATE USER xu@'%' IDENTIFIED BY 'x509-pw' REQUIRE SUBJECT '/CN=ana';GRANT ALL ON mt.* TO xu@'%';"
    )
    add_tls_ca(rvault, "mm-ca", mariadb.tls.ca)
    _tls_cert_from_csr(rvault, mariadb.tls, "mm-ana", "ana", scratch)
    return mariadb


def test_mariadb_require_subject(rvault: Cli, maria_creds: Mariadb, foreign: Issued) -> None:
    """RM-4/PX-2: an account with REQUIRE SUBJECT '/CN=ana' logs in with the certificate (session and
    proxy); without it, or with one from another CA, the error is typed and says why."""
    port = maria_creds.port
    add_db(
        rvault,
        "mysql",
        port,
        name="mm-x509",
        user="xu",
        database="mt",
        password="x509-pw",
        tls_ca="mm-ca",
        extra=("--tls-cert", "mm-ana"),
    )
    sql = (
        "SELECT CURRENT_USER(), (SELECT variable_value FROM information_schema.session_status WHERE variable_name='Ssl_version')"
    )
    row = _exec(rvault, "mm-x509", sql)["rows"]
    assert isinstance(row, list) and row[0][0] == "xu@%" and str(row[0][1]).startswith("TLSv1.")
    proxy = rvault.ok("proxy", "start", "mm-x509")
    proc = run_mariadb(proxy["port"], "SELECT CURRENT_USER()")
    assert proc.stdout.strip() == "xu@%", proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])

    add_db(rvault, "mysql", port, name="mm-nocert", user="xu", password="x509-pw", tls_ca="mm-ca")
    err = rvault.err("remote", "open", "mm-nocert")
    assert err["code"] == "remote_auth_failed" and "--tls-cert" in err["message"], err
    proxy = rvault.ok("proxy", "start", "mm-nocert")
    proc = run_mariadb(proxy["port"], "SELECT 1")
    assert "remote_auth_failed" in proc.stderr and "--tls-cert" in proc.stderr, proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])

    _tls_cert_from_files(rvault, "mm-foreign", foreign)
    add_db(
        rvault,
        "mysql",
        port,
        name="mm-foreign-db",
        user="xu",
        password="x509-pw",
        tls_ca="mm-ca",
        extra=("--tls-cert", "mm-foreign"),
    )
    # MariaDB sends "unknown CA" but closes at once, so the client sometimes sees only the EOF: then the
    # sentence can only suspect the certificate (remote_tls_failed) instead of naming the refusal.
    err = rvault.err("remote", "open", "mm-foreign-db")
    assert err["code"] in {"remote_auth_failed", "remote_tls_failed"} and "client certificate" in err["message"], err
    proxy = rvault.ok("proxy", "start", "mm-foreign-db")
    proc = run_mariadb(proxy["port"], "SELECT 1")
    assert "remote_" in proc.stderr and "client certificate" in proc.stderr, proc.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


# -- Redis ----------------------------------------------------------------------------------------------
def test_redis_tls_auth_clients(rvault: Cli, redis_mtls: Redis, scratch: Path) -> None:
    """RM-4/PX-2: `tls-auth-clients yes`: with the certificate the session and redis-cli (via the proxy)
    work; without it the server ends the handshake and the user sees `remote_auth_failed` naming --tls-cert."""
    add_tls_ca(rvault, "rm-ca", redis_mtls.tls.ca)
    _tls_cert_from_files(rvault, "rm-ana", issue_cert(redis_mtls.tls, "ana", scratch))
    add_db(
        rvault,
        "redis",
        redis_mtls.port,
        name="rm-cert",
        password=redis_mtls.password,
        tls_ca="rm-ca",
        extra=("--tls-cert", "rm-ana"),
    )
    assert _exec(rvault, "rm-cert", "set mtls yes")["reply"] == "OK"
    proxy = rvault.ok("proxy", "start", "rm-cert")
    out = run_redis_cli(proxy["port"], "get", "mtls")
    assert out.stdout.strip() == "yes", out.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])

    add_db(rvault, "redis", redis_mtls.port, name="rm-nocert", password=redis_mtls.password, tls_ca="rm-ca")
    err = rvault.err("remote", "open", "rm-nocert")
    assert err["code"] == "remote_auth_failed" and "--tls-cert" in err["message"], err
    proxy = rvault.ok("proxy", "start", "rm-nocert")
    out = run_redis_cli(proxy["port"], "ping")
    assert "remote_auth_failed" in out.stdout + out.stderr and "--tls-cert" in out.stdout + out.stderr
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_a_refused_certificate_is_named_even_when_its_alert_was_lost(redis_mtls: Redis, scratch: Path, foreign: Issued) -> None:
    """RM-4: a TLS 1.3 server checks the client certificate after the client has written its first
    command, and the reset of that unread command can discard the alert (CI once saw
    `protocol_error` here). The session then asks again with a handshake that writes nothing:
    no certificate names --tls-cert, a foreign one says it was rejected, an accepted one is no
    refusal (None, after the probe's short wait)."""

    def probe(cert: Issued | None, timeout: float = 2.0) -> MemoriesError | None:
        target = Target(
            b"t" * 16,
            "probe",
            "redis",
            "127.0.0.1",
            redis_mtls.port,
            tls_ca_pem=redis_mtls.tls.ca.read_text(),
            tls_client_cert=cert.cert.read_text() if cert else "",
            tls_client_key=cert.key.read_text() if cert else "",
        )
        return asyncio.run(remote_tls.refusal_after_handshake("127.0.0.1", redis_mtls.port, target, timeout))

    missing = probe(None)
    assert missing is not None and missing.code == "remote_auth_failed" and "--tls-cert" in missing.message
    rejected = probe(foreign)
    assert rejected is not None and rejected.code == "remote_auth_failed" and "rejected" in rejected.message
    assert probe(issue_cert(redis_mtls.tls, "probe", scratch), timeout=0.5) is None


def test_client_keys_never_reach_a_file(rvault: Cli, scratch: Path) -> None:
    """RM-3/ST-1 canary: an imported client key is in no file of the data directory and no
    `memories-tls-*` file is left in the temp directory after the sessions and proxies above."""
    keys = [p for p in scratch.glob("*.key")]
    assert keys
    files = [p for p in Path(rvault.home).rglob("*") if p.is_file() and not p.is_socket()]
    for key in keys:
        needle = "".join(key.read_text().splitlines()[1:-1])[:48].encode()
        for path in files:
            assert needle not in path.read_bytes(), path
    assert not list(Path(tempfile.gettempdir()).glob("memories-tls-*"))
