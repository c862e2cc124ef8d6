"""Redis: sessions with tickets and the credential-injecting proxy against a real TLS redis-server."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.remote.clients import run_redis_cli
from tests.remote.credentials import add_db, add_tls_ca, redis_vault
from tests.remote.servers import Redis
from tests.remote.tickets import run_ticket


@pytest.fixture(scope="module")
def cache(rvault: Cli, redis_tls: Redis) -> str:
    add_tls_ca(rvault, "redis-ca", redis_tls.tls.ca)
    return add_db(rvault, "redis", redis_tls.port, name="cache", password=redis_tls.password, tls_ca="redis-ca")


def test_redis_session_runs_approved_commands(rvault: Cli, cache: str) -> None:
    """RM-1/RM-4/RM-5: TLS by default; each command runs only as an approved ticket."""
    rvault.sudo()
    session = rvault.ok("remote", "open", cache)["session"]
    for command, expected in (("set greeting 'hello world'", "OK"), ("get greeting", "hello world")):
        assert run_ticket(rvault, session, command)["result"]["reply"] == expected
    bad = rvault.ok("remote", "propose", session, "nosuchcommand")
    # DT-1/DT-4: a waiting ticket turns the status to "attention"; counts only, no IDs.
    status = rvault.ok("status")
    assert status["attention"] is True and status["connections"] == 1
    assert session not in str(status) and bad["ticket"] not in str(status)
    rvault.ok("remote", "approve", bad["ticket"])
    assert rvault.err("remote", "exec", bad["ticket"])["code"] == "remote_error"
    rvault.ok("remote", "close", session)


def test_redis_wrong_password_and_plaintext_refused(rvault: Cli, redis_tls: Redis) -> None:
    """API-8/RM-4: wrong password is typed; a TLS-only server cannot be reached in plaintext by accident."""
    add_db(rvault, "redis", redis_tls.port, name="cache-bad", password="wrong", tls_ca="redis-ca")
    assert rvault.err("remote", "open", "cache-bad")["code"] == "remote_auth_failed"
    add_db(rvault, "redis", redis_tls.port, name="cache-noca", password=redis_tls.password)
    assert rvault.err("remote", "open", "cache-noca")["code"] == "remote_tls_failed"


def test_redis_proxy_injects_auth(rvault: Cli, cache: str, redis_tls: Redis) -> None:
    """PX-1/PX-2: redis-cli connects to the loopback proxy without a password; upstream is TLS + AUTH."""
    proxy = rvault.ok("proxy", "start", cache)
    assert run_redis_cli(proxy["port"], "set", "via", "proxy").stdout.strip() == "OK"
    assert run_redis_cli(proxy["port"], "get", "via").stdout.strip() == "proxy"
    # Direct plaintext to the TLS port without the password does not work: the proxy is what injects both.
    rvault.ok("proxy", "stop", proxy["proxy"])
    bad = rvault.ok("proxy", "start", "cache-bad")
    out = run_redis_cli(bad["port"], "ping")
    assert "remote_auth_failed" in out.stdout + out.stderr
    rvault.ok("proxy", "stop", bad["proxy"])


def test_idle_expiry_drops_sessions_and_proxies_despite_traffic(tmp_path: Path, redis_tls: Redis) -> None:
    """PX-4/RM-5/ST-10: proxy traffic does not extend the unlock; idle expiry closes sessions and proxies."""
    import socket
    import time

    cli = redis_vault(tmp_path / "idle-home", redis_tls, "idle_lock_minutes = 0.05\n")  # 3 seconds
    try:
        cli.ok("remote", "open", "cache")
        proxy = cli.ok("proxy", "start", "cache")
        deadline = time.monotonic() + 120
        locked = False
        while time.monotonic() < deadline:
            run_redis_cli(proxy["port"], "ping")  # traffic through the proxy only
            status = cli.ok("status")
            if status.get("locked") or status.get("state") == "locked":
                locked = True
                break
            time.sleep(0.5)
        assert locked, "the vault never idle-locked while the proxy carried traffic"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy["port"]), timeout=2).close()
        cli.unlock()
        assert cli.ok("remote", "list") == {"sessions": [], "tickets": [], "proxies": []}
    finally:
        cli.stop()


def test_redis_acl_user(rvault: Cli, cache: str, redis_tls: Redis) -> None:
    """RM-1: a Redis credential with an ACL user name authenticates as that user (AUTH user pass)."""
    rvault.sudo()
    session = rvault.ok("remote", "open", cache)["session"]
    acl = "ACL SETUSER reader on >reader-pw-1 ~* +get +ping +acl|whoami"
    assert run_ticket(rvault, session, acl)["result"]["reply"] == "OK"
    rvault.ok("remote", "close", session)
    add_db(rvault, "redis", redis_tls.port, name="cache-reader", user="reader", password="reader-pw-1", tls_ca="redis-ca")
    proxy = rvault.ok("proxy", "start", "cache-reader")
    assert run_redis_cli(proxy["port"], "acl", "whoami").stdout.strip() == "reader"
    assert "NOPERM" in run_redis_cli(proxy["port"], "set", "k", "v").stdout
    rvault.ok("proxy", "stop", proxy["proxy"])


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_logout_signal_locks_and_drops_sessions_and_proxies_before_exit(
    tmp_path: Path, redis_tls: Redis, signum: signal.Signals
) -> None:
    """RM-5/PX-4: when the login session ends (SIGHUP) or the engine is asked to stop (SIGTERM), it locks,
    closes remote sessions and proxies (a relayed connection sees its close) and exits cleanly, instead of
    dying with the default action."""
    import socket
    import time

    cli = redis_vault(tmp_path / "logout-home", redis_tls)
    try:
        cli.ok("remote", "open", "cache")
        proxy = cli.ok("proxy", "start", "cache")
        relayed = socket.create_connection(("127.0.0.1", proxy["port"]), timeout=10)
        relayed.sendall(b"PING\r\n")
        assert relayed.recv(100) == b"+PONG\r\n"
        pid = cli.daemon_pid()
        assert pid is not None
        os.kill(pid, signum)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break  # exited; its parent has not reaped it yet
            time.sleep(0.1)
        relayed.settimeout(5)
        assert relayed.recv(100) == b"", "the relayed connection is still open after the engine stopped"
        relayed.close()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy["port"]), timeout=2).close()
        log = (cli.home / "logs" / "engine.log").read_text()
        assert "locked (shutdown)" in log and "engine stopped" in log, log[-2000:]
    finally:
        cli.stop()
