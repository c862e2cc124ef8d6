"""FTP file operations and raw TCP sessions through approval tickets (RM-1, RM-5)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.remote import fakes
from tests.remote.credentials import add_ftp, add_tls_ca
from tests.remote.servers import Ftp
from tests.remote.tickets import run_ticket


@pytest.fixture(scope="module")
def elevated(rvault: Cli) -> Cli:
    rvault.sudo()
    return rvault


def test_ftp_list_get_put(elevated: Cli, ftp: Ftp, tmp_path: Path) -> None:
    """RM-5: FTP carries file operations; a put's bytes are part of the fingerprinted ticket."""
    add_ftp(elevated, "files", ftp)
    session = elevated.ok("remote", "open", "files")["session"]
    listing = run_ticket(elevated, session, "list")["result"]["output"]
    assert "hello.txt" in listing
    out = tmp_path / "got.txt"
    got = run_ticket(
        elevated,
        session,
        "get hello.txt",
    )
    assert got["result"]["bytes"] == len("hello from ftp\n")
    ticket = elevated.ok("remote", "propose", session, "get hello.txt")
    elevated.ok("remote", "approve", ticket["ticket"])
    elevated.ok("remote", "exec", ticket["ticket"], "--output", str(out))
    assert out.read_text() == "hello from ftp\n"
    upload = tmp_path / "up.bin"
    upload.write_bytes(b"\x00\x01payload")
    a = elevated.ok("remote", "propose", session, "put up.bin", "--data-file", str(upload))
    upload.write_bytes(b"\x00\x01changed")
    b = elevated.ok("remote", "propose", session, "put up.bin", "--data-file", str(upload))
    assert a["fingerprint"] != b["fingerprint"] and "sha256" in a["instruction"]
    elevated.ok("remote", "approve", a["ticket"])
    assert elevated.ok("remote", "exec", a["ticket"])["result"]["stored"] == 9
    assert (ftp.root / "up.bin").read_bytes() == b"\x00\x01payload"
    missing = elevated.ok("remote", "propose", session, "get nope.txt")
    elevated.ok("remote", "approve", missing["ticket"])
    assert elevated.err("remote", "exec", missing["ticket"])["code"] == "remote_error"
    assert elevated.err("remote", "propose", session, "chmod 777 x")["code"] == "invalid_input"
    elevated.ok("remote", "close", session)


def test_ftp_wrong_password(elevated: Cli, ftp: Ftp) -> None:
    """API-8: a rejected FTP login is typed."""
    add_ftp(elevated, "files-bad", ftp, password="wrong")
    assert elevated.err("remote", "open", "files-bad")["code"] == "remote_auth_failed"


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(b"echo:" + data)
        await writer.drain()


def test_tcp_send_receive(elevated: Cli) -> None:
    """RM-5: a TCP session sends exactly the approved bytes and returns the answer."""
    with fakes.serve(_echo) as port:
        elevated.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
        session = elevated.ok("remote", "open", "echo")["session"]
        result = run_ticket(elevated, session, "ping")["result"]
        assert result["output"] == "echo:ping"
        elevated.ok("remote", "close", session)
    assert elevated.err("remote", "open", "echo")["code"] == "remote_unreachable"


def test_tcp_over_verified_tls(elevated: Cli) -> None:
    """RM-4: a TCP credential with TLS verifies the server against its tls_ca and the hostname."""
    import ssl

    from tests.remote.servers import make_tls, shared_dir

    tls = make_tls(shared_dir())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    with fakes.serve(_echo, tls=context) as port:
        add_tls_ca(elevated, "echo-ca", tls.ca)
        for name, host, ca in (("echo-tls", "localhost", ["--tls-ca", "echo-ca"]), ("echo-tls-noca", "localhost", [])):
            elevated.ok("credential", "new", "tcp", "--name", name, "--host", host, "--port", str(port), "--tls", "required", *ca)
        session = elevated.ok("remote", "open", "echo-tls")["session"]
        assert run_ticket(elevated, session, "over tls")["result"]["output"] == "echo:over tls"
        elevated.ok("remote", "close", session)
        assert elevated.err("remote", "open", "echo-tls-noca")["code"] == "remote_tls_failed"


def _caught_up(server: Ftp) -> None:
    """Positive synchronisation instead of a sleep: two NOOP round trips on a fresh connection.

    pyftpdlib serves every connection from one event loop and logs a command before handling
    it; the second NOOP can only be read in a loop iteration after the one that answered the
    first, so by its reply everything that reached the server earlier has been logged.
    """
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock, sock.makefile("rb") as replies:
        assert replies.readline().startswith(b"220")
        for _ in range(2):
            sock.sendall(b"NOOP\r\n")
            assert replies.readline()[:1] in (b"2", b"5")  # 200, or 550 where TLS is required first


def _ftps_credential(cli: Cli, name: str, server: Ftp, ca: str) -> None:
    add_ftp(cli, name, server, host="localhost", tls_ca=ca)


def test_ftps_list_get_put_with_verified_certificate(elevated: Cli, ftps: Ftp, tmp_path: Path) -> None:
    """RM-4/RM-5: `--tls required` is explicit FTPS: AUTH TLS first, certificate verified against the tls-ca
    credential, data channel protected (PROT P); list, get and put work over it."""
    assert ftps.tls is not None
    add_tls_ca(elevated, "ftps-ca", ftps.tls.ca)
    _ftps_credential(elevated, "ftps-files", ftps, "ftps-ca")
    assert elevated.ok("credential", "show", "ftps-files")["public"]["tls"] == "required"
    session = elevated.ok("remote", "open", "ftps-files")["session"]
    assert "hello.txt" in run_ticket(elevated, session, "list")["result"]["output"]
    out = tmp_path / "got.txt"
    ticket = elevated.ok("remote", "propose", session, "get hello.txt")
    elevated.ok("remote", "approve", ticket["ticket"])
    elevated.ok("remote", "exec", ticket["ticket"], "--output", str(out))
    assert out.read_text() == "hello from ftp\n"
    upload = tmp_path / "secure.bin"
    payload = b"\x00over ftps\xff"
    upload.write_bytes(payload)
    assert run_ticket(elevated, session, "put secure.bin", "--data-file", str(upload))["result"]["stored"] == len(payload)
    assert (ftps.root / "secure.bin").read_bytes() == payload
    elevated.ok("remote", "close", session)
    received = ftps.received()
    # The server requires TLS on both channels (tls_control/data_required); AUTH came before any login.
    assert received[0] == "AUTH" and received.index("AUTH") < received.index("USER") < received.index("PASS")
    assert "PROT" in received


def test_ftps_certificate_from_another_ca_is_refused(elevated: Cli, ftps: Ftp, tmp_path: Path) -> None:
    """RM-4: an FTPS server whose certificate another CA issued is refused (typed); no login is attempted."""
    from tests.remote.servers import make_tls

    other = make_tls(tmp_path)
    add_tls_ca(elevated, "ftps-other-ca", other.ca)
    _ftps_credential(elevated, "ftps-wrong-ca", ftps, "ftps-other-ca")
    before = len(ftps.received())
    err = elevated.err("remote", "open", "ftps-wrong-ca")
    assert err["code"] == "remote_tls_failed" and ftps.password not in err["message"]
    _caught_up(ftps)
    assert ftps.received()[before:] == ["AUTH", "NOOP", "NOOP"]


def test_ftps_required_refuses_a_plaintext_only_server(elevated: Cli, tmp_path: Path) -> None:
    """RM-4: FTPS required against a server without AUTH TLS is refused, and the password is never sent in clear."""
    from tests.remote.servers import ftp_server, make_tls

    ca = make_tls(tmp_path)
    add_tls_ca(elevated, "ftps-plain-ca", ca.ca)
    with ftp_server() as plain:
        _ftps_credential(elevated, "ftps-plain", plain, "ftps-plain-ca")
        err = elevated.err("remote", "open", "ftps-plain")
        assert err["code"] == "remote_tls_failed" and "AUTH TLS" in err["message"]
        assert plain.password not in err["message"]
        _caught_up(plain)
        received = plain.received()
    assert received == ["AUTH", "NOOP", "NOOP"], received  # no USER, and above all no PASS, ever reached the server
