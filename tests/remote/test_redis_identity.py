"""PX-3 for Redis: a local client cannot change the proxy's upstream identity (AUTH, HELLO … AUTH, RESET).

Against a real TLS redis-server with ACL users: the credential logs in as `reader`; a
client's own AUTH (even with another user's right password) is answered `OK` but leaves
`ACL WHOAMI` at `reader`; HELLO keeps its protocol switch and name but loses its AUTH
clause; RESET is refused. The request filter itself is fuzzed in test_redis_filter.py.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from tests.helpers import Cli
from tests.remote.clients import run_redis_cli
from tests.remote.credentials import add_db, add_tls_ca
from tests.remote.servers import Redis


def _direct(server: Redis) -> ssl.SSLSocket:
    """A TLS connection straight to the server (no proxy)."""
    context = ssl.create_default_context(cafile=str(server.tls.ca))
    return context.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=10), server_hostname="localhost")


@pytest.fixture(scope="module")
def reader(rvault: Cli, redis_tls: Redis) -> str:
    with _direct(redis_tls) as admin:
        admin.sendall(
            _cmd("AUTH", redis_tls.password)
            + _cmd("ACL", "SETUSER", "reader", "on", ">reader-pw-2", "~*", "+@all")
            + _cmd("ACL", "SETUSER", "other", "on", ">other-pw-2", "~*", "+@all")
        )
        assert _replies(admin, 3) == [b"+OK"] * 3
    add_tls_ca(rvault, "id-ca", redis_tls.tls.ca)
    return add_db(rvault, "redis", redis_tls.port, name="id-reader", user="reader", password="reader-pw-2", tls_ca="id-ca")


@pytest.fixture
def proxy_port(rvault: Cli, reader: str) -> Iterator[int]:
    proxy = rvault.ok("proxy", "start", reader)
    yield proxy["port"]
    rvault.ok("proxy", "stop", proxy["proxy"])


def test_control_direct_auth_does_switch_user(redis_tls: Redis, reader: str) -> None:
    """Control: on a direct connection `AUTH other …` does change the identity, so the proxy tests below mean something."""
    with _direct(redis_tls) as direct:
        direct.sendall(_cmd("AUTH", "reader", "reader-pw-2") + _cmd("ACL", "WHOAMI"))
        direct.sendall(_cmd("AUTH", "other", "other-pw-2") + _cmd("ACL", "WHOAMI"))
        assert _replies(direct, 4) == [b"+OK", b"reader", b"+OK", b"other"]


def test_redis_cli_auth_and_hello_keep_the_credential_identity(proxy_port: int, redis_tls: Redis) -> None:
    """PX-3: AUTH with a wrong password, another user's right password or the default user's password,
    and HELLO 3 AUTH …, all leave `ACL WHOAMI` at the credential's user; RESET is refused with an error."""
    script = (
        "ACL WHOAMI\n"
        "AUTH default wrong\n"
        "ACL WHOAMI\n"
        "AUTH other other-pw-2\n"
        "ACL WHOAMI\n"
        f"AUTH {redis_tls.password}\n"
        "ACL WHOAMI\n"
        "HELLO 3 AUTH other other-pw-2 SETNAME via-proxy\n"
        "ACL WHOAMI\n"
        "CLIENT GETNAME\n"
        "RESET\n"
        "ACL WHOAMI\n"
    )
    out = run_redis_cli(proxy_port, script=script)
    lines = out.stdout.splitlines()
    assert lines.count("reader") == 6, out.stdout
    assert "other" not in lines and "default" not in lines
    assert lines[1] == lines[3] == lines[5] == "OK"  # a client configured with a password keeps working
    assert "proto 3" in lines  # HELLO 3 still switched the protocol …
    assert "via-proxy" in lines  # … and set the name
    assert any("MEMORIES-PROXY-REFUSED" in line and "RESET" in line for line in lines), out.stdout

    for args in (["--user", "other", "--pass", "other-pw-2"], ["-3", "--user", "other", "--pass", "other-pw-2"]):
        assert run_redis_cli(proxy_port, *args, "ACL", "WHOAMI").stdout.strip() == "reader", args


def _replies(sock: socket.socket, count: int) -> list[bytes]:
    """Read ``count`` RESP2 replies (simple, error, integer, bulk, arrays of those) as their first line/payload."""
    data = b""
    replies: list[bytes] = []

    def need(n: int) -> None:
        nonlocal data
        while len(data) < n:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {replies}"
            data += chunk

    def line() -> bytes:
        nonlocal data
        while b"\r\n" not in data:
            need(len(data) + 1)
        head, _, data = data.partition(b"\r\n")
        return head

    def one() -> bytes:
        nonlocal data
        head = line()
        if head[:1] == b"$" and head != b"$-1":
            size = int(head[1:])
            need(size + 2)
            body, data = data[:size], data[size + 2 :]
            return body
        if head[:1] == b"*" and head != b"*-1":
            return b"[" + b",".join(one() for _ in range(int(head[1:]))) + b"]"
        return head

    while len(replies) < count:
        replies.append(one())
    return replies


def _cmd(*args: str) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)


def test_pipelined_and_inline_auth_keep_reply_order(proxy_port: int) -> None:
    """PX-3: AUTH in a pipeline, inside MULTI and as an inline command is replaced in place, so every
    reply still answers its own command; the identity never changes."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(
            _cmd("SET", "order", "v1")
            + _cmd("AUTH", "other", "other-pw-2")
            + _cmd("GET", "order")
            + _cmd("ACL", "WHOAMI")
            + _cmd("MULTI")
            + _cmd("AUTH", "other", "other-pw-2")
            + _cmd("ACL", "WHOAMI")
            + _cmd("EXEC")
            + b'"AUTH" other "other-pw-2"\r\n'
            + b"acl whoami\r\n"
            + _cmd("ReSeT")
            + _cmd("ACL", "WHOAMI")
        )
        replies = _replies(sock, 12)
    assert replies[:4] == [b"+OK", b"+OK", b"v1", b"reader"]
    assert replies[4:8] == [b"+OK", b"+QUEUED", b"+QUEUED", b"[+OK,reader]"]
    assert replies[8:10] == [b"+OK", b"reader"]
    assert replies[10].startswith(b"-ERR unknown command 'MEMORIES-PROXY-REFUSED'") and b"RESET" in replies[10]
    assert replies[11] == b"reader"


def test_malformed_request_closes_only_that_connection(proxy_port: int) -> None:
    """PX-2: a malformed request gets a protocol error (after the replies to earlier commands) and its
    connection ends; nothing of it is forwarded; the proxy keeps serving other clients."""
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(_cmd("PING") + b"*2\r\n$04\r\nAUTH\r\n")  # a leading zero: Redis's own parser refuses it too
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    assert data.startswith(b"+PONG\r\n-ERR unknown command 'MEMORIES-PROXY-REFUSED'"), data
    assert b"Protocol error" in data and b"AUTH" not in data
    # Like Redis: the error is the last reply. The proxy's own QUIT (which carries the close through
    # the server, after earlier replies) answers +OK; that reply never reaches the client.
    assert data.split(b"\r\n")[2:] == [b""], data
    # A client's own +OK replies just before the error still arrive, each exactly once.
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=10) as sock:
        sock.sendall(_cmd("SET", "k", "v") + _cmd("SET", "k", "w") + b'"unbalanced\r\n')
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    lines = data.split(b"\r\n")
    assert lines[:2] == [b"+OK", b"+OK"] and b"unbalanced quotes" in lines[2] and lines[3:] == [b""], data
    assert run_redis_cli(proxy_port, "ACL", "WHOAMI").stdout.strip() == "reader"
