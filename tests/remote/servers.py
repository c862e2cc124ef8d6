"""Throw-away servers for remote tests: TLS PostgreSQL (SCRAM), TLS MariaDB, TLS Redis, OpenSSH, FTP.

Each starts on a free loopback port in a directory the server's own user can
reach (see RECIPES §4–§6), and is stopped by its fixture. Nothing here patches
project code: the tests drive the real CLI and daemon against these servers.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes

from tests.helpers import free_port as free_port  # one port picker for every server a test starts

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def wait_port(port: int, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def shared_dir() -> Path:
    """A directory other users (postgres, mysql) can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="memories-remote-"))
    path.chmod(0o755)
    return path


@dataclass
class Tls:
    ca: Path  # self-signed (CA:TRUE) server certificate for localhost / 127.0.0.1
    cert: Path
    key: Path


def make_tls(directory: Path, cn: str = "localhost", san: str = "DNS:localhost,IP:127.0.0.1") -> Tls:
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={cn}",
            "-addext",
            f"subjectAltName={san}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ca = directory / "ca.crt"
    shutil.copy(cert, ca)
    for p in (cert, ca):
        p.chmod(0o644)
    return Tls(ca, cert, key)


@dataclass
class Issued:
    cert: Path
    key: Path


def _signed(
    tls: Tls, subject: x509.Name, public_key: CertificatePublicKeyTypes, *, server: bool, sans: tuple[str, ...], days: int
) -> bytes:
    """A leaf certificate signed by the test CA (``tls.cert`` doubles as the CA, see make_tls)."""
    import datetime
    import ipaddress

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_cert = x509.load_pem_x509_certificate(tls.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(tls.key.read_bytes(), password=None)
    ca_public = ca_cert.public_key()
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey) and isinstance(ca_public, ec.EllipticCurvePublicKey)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # Key identifiers: a leaf named like its CA (CN=localhost) must not look self-issued to OpenSSL.
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    if sans:
        names: list[x509.GeneralName] = []
        for san in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(san)))
            except ValueError:
                names.append(x509.DNSName(san))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM)


def issue_cert(tls: Tls, cn: str, directory: Path, *, server: bool = False, sans: tuple[str, ...] = (), days: int = 2) -> Issued:
    """A fresh EC key and a certificate for ``cn`` signed by the test CA: a TLS client
    certificate (clientAuth) for mTLS tests, or with ``server`` one a scripted server presents."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    issued = Issued(directory / f"{cn}-{secrets.token_hex(3)}.crt", directory / f"{cn}-{secrets.token_hex(3)}.key")
    issued.cert.write_bytes(_signed(tls, subject, key.public_key(), server=server, sans=sans, days=days))
    issued.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    issued.key.chmod(0o600)
    return issued


def sign_csr(tls: Tls, csr_pem: str, days: int = 2) -> str:
    """Sign a client CSR (e.g. from `memories credential generate tls --csr`) with the test CA."""
    csr = x509.load_pem_x509_csr(csr_pem.encode("ascii"))
    assert csr.is_signature_valid
    return _signed(tls, csr.subject, csr.public_key(), server=False, sans=(), days=days).decode("ascii")


# -- PostgreSQL ------------------------------------------------------------------------
@dataclass
class Postgres:
    port: int
    root: Path
    tls: Tls
    superpw: str

    def psql(self, sql: str, user: str = "postgres", password: str | None = None, db: str = "postgres") -> str:
        env = dict(os.environ, PGPASSWORD=password or self.superpw)
        out = subprocess.run(
            [
                "psql",
                f"host=localhost port={self.port} user={user} dbname={db} sslmode=verify-full sslrootcert={self.tls.ca}",
                "-Atqc",
                sql,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip()


@contextmanager
def postgres_server(client_ca: bool = False, hba_first: str = "") -> Iterator[Postgres]:
    """``client_ca``: the test CA also verifies client certificates (``ssl_ca_file``);
    ``hba_first``: pg_hba.conf lines matched before the default ones (e.g. ``cert`` logins)."""
    root = shared_dir()
    port = free_port()
    # DNS:localhost only: connecting by 127.0.0.1 must then fail hostname verification (RM-4).
    tls = make_tls(root, san="DNS:localhost")
    superpw = secrets.token_hex(16)
    (root / "pwfile").write_text(superpw)
    shutil.chown(root / "pwfile", "postgres")
    shutil.chown(tls.key, "postgres")
    tls.key.chmod(0o600)
    (root / "data").mkdir()
    (root / "sock").mkdir()
    shutil.chown(root / "data", "postgres")
    shutil.chown(root / "sock", "postgres")
    run = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [
            *run,
            str(PG_BIN / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            "postgres",
            f"--pwfile={root / 'pwfile'}",
            "--auth-local=scram-sha-256",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with open(root / "data" / "postgresql.conf", "a") as conf:
        conf.write(
            f"listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{root / 'sock'}'\n"
            f"ssl = on\nssl_cert_file = '{tls.cert}'\nssl_key_file = '{tls.key}'\n"
            + (f"ssl_ca_file = '{tls.ca}'\n" if client_ca else "")
            + "password_encryption = 'scram-sha-256'\nfsync = off\nmax_connections = 50\n"
        )
    (root / "data" / "pg_hba.conf").write_text(
        hba_first + "local all all scram-sha-256\n"
        "hostssl all md5user 127.0.0.1/32 md5\n"
        "hostssl all all 127.0.0.1/32 scram-sha-256\n"
        "hostnossl all all 0.0.0.0/0 reject\n"
    )
    subprocess.run(
        [
            *run,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(root / "data"),
            "-l",
            str(root / "data" / "server.log"),
            "-w",
            "-t",
            "30",
            "start",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Postgres(port, root, tls, superpw)
    finally:
        subprocess.run(
            [*run, str(PG_BIN / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        shutil.rmtree(root, ignore_errors=True)


# -- MariaDB -----------------------------------------------------------------------------
@dataclass
class Mariadb:
    port: int
    root: Path
    tls: Tls

    def sql(self, statement: str) -> str:
        out = subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.root / 'data' / 'mysqld.sock'}", "-uroot", "-N", "-B", "-e", statement],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip()


@contextmanager
def mariadb_server() -> Iterator[Mariadb]:
    root = shared_dir()
    port = free_port()
    tls = make_tls(root)
    shutil.chown(tls.key, "mysql")
    (root / "data").mkdir()
    shutil.chown(root / "data", "mysql")
    subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={root / 'data'}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc = subprocess.Popen(
        [
            "mariadbd",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={root / 'data'}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={root / 'data' / 'mysqld.sock'}",
            f"--pid-file={root / 'data' / 'mysqld.pid'}",
            f"--log-error={root / 'data' / 'err.log'}",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
            "--plugin-load-add=auth_ed25519",
            f"--ssl-cert={tls.cert}",
            f"--ssl-key={tls.key}",
            f"--ssl-ca={tls.ca}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, 30)
        yield Mariadb(port, root, tls)
    finally:
        proc.terminate()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


# -- Redis ---------------------------------------------------------------------------------
@dataclass
class Redis:
    port: int
    tls: Tls
    password: str


@contextmanager
def redis_server(tls_on: bool = True, auth_clients: bool = False) -> Iterator[Redis]:
    """``auth_clients``: TLS clients must present a certificate signed by the test CA (mTLS)."""
    root = shared_dir()
    port = free_port()
    tls = make_tls(root)
    password = secrets.token_hex(12)
    args = [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(root),
        "--requirepass",
        password,
    ]
    if tls_on:
        args += [
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(tls.cert),
            "--tls-key-file",
            str(tls.key),
            "--tls-ca-cert-file",
            str(tls.ca),
            "--tls-auth-clients",
            "yes" if auth_clients else "no",
        ]
    else:
        args += ["--port", str(port)]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield Redis(port, tls, password)
    finally:
        proc.terminate()
        proc.wait(120)
        shutil.rmtree(root, ignore_errors=True)


# -- OpenSSH -------------------------------------------------------------------------------
@dataclass
class Sshd:
    port: int
    root: Path
    host_pub: str  # "ssh-ed25519 AAAA…"
    client_key: Path
    user_ca: Path


@contextmanager
def sshd_server(password_user: str | None = None) -> Iterator[Sshd]:
    root = Path(tempfile.mkdtemp(prefix="memories-sshd-"))
    port = free_port()
    for name in ("host_key", "client_key", "user_ca"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nTrustedUserCAKeys {root / 'user_ca.pub'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "Subsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    with open(root / "sshd.log", "wb") as log:
        proc = subprocess.Popen(
            ["/usr/sbin/sshd", "-D", "-e", "-f", str(root / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        wait_port(port)
        host_pub = " ".join((root / "host_key.pub").read_text().split()[:2])
        yield Sshd(port, root, host_pub, root / "client_key", root / "user_ca")
    finally:
        proc.terminate()
        proc.wait(120)
        shutil.rmtree(root, ignore_errors=True)


# -- FTP -------------------------------------------------------------------------------------
@dataclass
class Ftp:
    port: int
    root: Path
    user: str
    password: str
    commands: Path  # one received command verb per line (never its argument): what the server was sent
    tls: Tls | None = None

    def received(self) -> list[str]:
        return self.commands.read_text().split() if self.commands.exists() else []


_FTP_SCRIPT = """
import sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.servers import FTPServer
port, home, password, log, cert, key = sys.argv[1:7]
if cert:
    from pyftpdlib.handlers import TLS_FTPHandler as Base
    Base.certfile, Base.keyfile = cert, key
    Base.tls_control_required = Base.tls_data_required = True
else:
    from pyftpdlib.handlers import FTPHandler as Base
class Handler(Base):
    def pre_process_command(self, line, cmd, arg):
        with open(log, "a") as out:
            out.write(cmd + chr(10))
        return super().pre_process_command(line, cmd, arg)
a = DummyAuthorizer(); a.add_user("ana", password, home, perm="elradfmw")
Handler.authorizer = a
Handler.passive_ports = range(60000, 60100)
FTPServer(("127.0.0.1", int(port)), Handler).serve_forever()
"""


@contextmanager
def ftp_server(tls: Tls | None = None) -> Iterator[Ftp]:
    """pyftpdlib; with ``tls`` it is an explicit-FTPS server (TLS_FTPHandler) that requires TLS
    on the control and data channels, presenting ``tls.cert``."""
    root = Path(tempfile.mkdtemp(prefix="memories-ftp-"))
    (root / "files").mkdir()
    (root / "files" / "hello.txt").write_text("hello from ftp\n")
    port = free_port()
    password = secrets.token_hex(8)
    commands = root / "commands.log"
    cert, key = (str(tls.cert), str(tls.key)) if tls else ("", "")
    proc = subprocess.Popen(
        [sys.executable, "-c", _FTP_SCRIPT, str(port), str(root / "files"), password, str(commands), cert, key],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield Ftp(port, root / "files", "ana", password, commands, tls)
    finally:
        proc.terminate()
        proc.wait(120)
        shutil.rmtree(root, ignore_errors=True)
