"""Real Center processes for the tests: `memories center serve|standby` over TLS on loopback,
a private CA made with `cryptography`, and a PostgreSQL role + database per test run."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import TEST_ENV, require

PASSWORD = "operator password 7"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: Path
    key: Path


def make_tls(where: Path) -> Tls:
    """A private CA and a server certificate for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memories test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    where.mkdir(parents=True, exist_ok=True)
    tls = Tls(where / "ca.pem", where / "cert.pem", where / "key.pem")
    tls.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    tls.key.chmod(0o600)
    return tls


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """A role and a database of their own on the machine's PostgreSQL (trust auth), dropped after."""
    import psycopg

    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        require(False, f"PostgreSQL on 127.0.0.1:5432 is not reachable ({type(exc).__name__})")
        raise
    name = f"memories_center_{secrets.token_hex(4)}"
    try:
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
        admin.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
        yield f"postgresql://{name}@127.0.0.1:5432/{name}"
    finally:
        with contextlib.suppress(psycopg.Error):
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            admin.execute(f'DROP ROLE IF EXISTS "{name}"')
        admin.close()


def wait_for(condition: Callable[[], Any], what: str, deadline: float = 60.0) -> Any:
    """Poll ``condition`` until it returns something truthy (a generous deadline, never a fixed sleep)."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def code(self) -> str | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get("code") if isinstance(error, dict) else None


@dataclass
class Center:
    """One `memories center serve` (or `standby`) process and an HTTPS client for it."""

    data: Path
    tls: Tls
    store: str | None = None
    extra: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def command(self, *words: str) -> list[str]:
        return [sys.executable, "-m", "engine.cli", "center", *words]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **TEST_ENV, **self.env}

    def start(self, mode: str = "serve") -> Center:
        url_file = self.data / "center.url"
        with contextlib.suppress(FileNotFoundError):
            url_file.unlink()
        args = [mode, "--data", str(self.data), "--listen", "127.0.0.1:0", "--tls-cert", str(self.tls.cert)]
        args += ["--tls-key", str(self.tls.key), *(["--store", self.store] if self.store else []), *self.extra]
        self.data.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.data.parent / f"{self.data.name}.stderr", "ab")
        self.proc = subprocess.Popen(
            self.command(*args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=self.environ()
        )
        log.close()

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the Center exited with {self.proc.returncode}: {self.stderr()}")
            try:
                info = json.loads(url_file.read_text())
            except (OSError, ValueError):
                return False
            return bool(info.get("pid") == self.proc.pid)

        wait_for(ready, "the Center to listen")
        port = json.loads(url_file.read_text())["port"]
        self.url = f"https://127.0.0.1:{port}"
        return self

    def stderr(self) -> str:
        path = self.data.parent / f"{self.data.name}.stderr"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None

    @property
    def admin_token(self) -> str:
        return (self.data / "admin.token").read_text().strip()

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=raw, method=method, headers=hdrs)
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        try:
            with urllib.request.urlopen(req, timeout=120, context=context) as response:
                return Answer(response.status, json.loads(response.read()), dict(response.headers))
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = {"raw": text.decode(errors="replace")}
            return Answer(exc.code, parsed, dict(exc.headers))

    def admin(self, method: str, path: str, body: Any = None) -> Answer:
        return self.request(method, path, body, token=self.admin_token)

    def unlock(self, password: str = PASSWORD) -> Answer:
        return self.admin("POST", "/v1/admin/unlock", {"password": password})

    def grant(self, name: str, scope: str, vaults: list[str], **extra: Any) -> dict[str, Any]:
        answer = self.admin("POST", "/v1/admin/grants", {"name": name, "scope": scope, "vaults": vaults, **extra})
        assert answer.status == 200, answer.body
        result: dict[str, Any] = answer.body
        return result

    def rpc(self, token: str, body: dict[str, Any]) -> Answer:
        return self.request("POST", "/v1/rpc", body, token=token)

    def cli(self, *words: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*words, "--data", str(self.data), "--ca", str(self.tls.ca), "--json"),
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=120,
            env=self.environ(),
        )
