"""Proxy limits tested directly against a real daemon (PX-2, PX-4): handshake deadline, packet bound,
client limit, lifetime, `proxy list` expiry and stop-awaits-workers.

The daemons here read a config.toml that *shortens* the handshake deadline or the lifetime
(the engine clamps those keys so they can never lengthen a limit), so each deadline can be
watched passing in seconds. The client limit (16) and the packet bound (64 KiB) are the
real, fixed values. Redis (the simplest proxy: no client-side handshake) carries the
relay tests; PostgreSQL is used where the local client must speak first (deadline, packet).
"""

from __future__ import annotations

import asyncio
import math
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from engine.config import EngineConfig, Paths, load_config
from engine.remote.proxy.listener import (
    HANDSHAKE_SECONDS,
    LIFETIME_SECONDS,
    MAX_CLIENTS,
    MAX_PACKET,
    ProxyLimits,
    ProxyListener,
    Streams,
)
from engine.remote.runtime import _new_loop
from engine.remote.sessions.base import EXEC_TIMEOUT, exec_deadline
from engine.remote.targets import Target
from tests.helpers import Cli
from tests.remote.credentials import add_pg_database, redis_vault
from tests.remote.servers import Postgres, Redis
from tests.remote.tickets import run_ticket

HANDSHAKE = 3.0  # the shortened handshake deadline of the `limited` daemon
EXEC = 2.0  # the shortened per-instruction deadline of the `limited` daemon's remote sessions
LIFETIME = 12.0  # the shortened lifetime of the `short_lived` daemon
APP_PASSWORD = "limits-app-pw-7Qz"


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, redis_tls: Redis) -> Iterator[Cli]:
    """A daemon with a 3 s handshake deadline; its lifetime key asks for 10 hours and must be capped at 30 min."""
    cli = redis_vault(
        tmp_path_factory.mktemp("limited") / "home",
        redis_tls,
        f"proxy_handshake_seconds = {HANDSHAKE}\nproxy_lifetime_minutes = 600\nremote_exec_seconds = {EXEC}\n",
    )
    yield cli
    cli.stop()


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory, redis_tls: Redis) -> Iterator[Cli]:
    cli = redis_vault(tmp_path_factory.mktemp("short") / "home", redis_tls, f"proxy_lifetime_minutes = {LIFETIME / 60}\n")
    yield cli
    cli.stop()


@pytest.fixture(scope="module")
def pg_db(limited: Cli, pg: Postgres) -> str:
    return add_pg_database(limited, pg, name="db", role="app", database="appdb", password=APP_PASSWORD, ca="pg-ca")


# -- small clients ------------------------------------------------------------------------
def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _ping(sock: socket.socket) -> bytes:
    """One RESP PING through the proxy's relay; the reply line."""
    sock.sendall(b"*1\r\n$4\r\nPING\r\n")
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(100)
        if not chunk:
            break
        reply += chunk
    return reply


def _closed_by_peer(sock: socket.socket, wait: float) -> bytes | None:
    """Read until the peer closes: everything it sent before closing, or None if it is still open after `wait`."""
    sock.settimeout(wait)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return data


def _closed_now(sock: socket.socket) -> bool:
    """True when the peer has already closed this socket (EOF or reset is queued); never waits."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _startup(total_length: int) -> bytes:
    """A PostgreSQL StartupMessage of exactly `total_length` bytes, padded with a parameter the proxy drops."""
    fixed = 8 + len(b"x_pad\x00") + 1 + 1  # length + version, key, value terminator, list terminator
    body = struct.pack("!I", 196608) + b"x_pad\x00" + b"p" * (total_length - fixed) + b"\x00\x00"
    packet = struct.pack("!I", len(body) + 4) + body
    assert len(packet) == total_length
    return packet


def _proxy(cli: Cli, proxy_id: str) -> dict[str, Any] | None:
    return next((p for p in cli.ok("proxy", "list")["proxies"] if p["proxy"] == proxy_id), None)


def _wait_clients(cli: Cli, proxy_id: str, count: int) -> None:
    deadline = time.monotonic() + 120
    while (p := _proxy(cli, proxy_id)) is not None and p["clients"] != count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p is not None and p["clients"] == count, p


# -- configuration: only shorter ------------------------------------------------------------
def test_config_can_only_shorten_the_proxy_limits(tmp_path: Path) -> None:
    """PX-2/PX-4: config keys may shorten the handshake deadline and lifetime, never lengthen them."""
    assert ProxyLimits.shortened() == ProxyLimits(HANDSHAKE_SECONDS, LIFETIME_SECONDS) == ProxyLimits()
    assert ProxyLimits.shortened(2.5, 90) == ProxyLimits(2.5, 90)
    assert ProxyLimits.shortened(300, 10 * 3600) == ProxyLimits(HANDSHAKE_SECONDS, LIFETIME_SECONDS)
    assert ProxyLimits.shortened(0, -5) == ProxyLimits.shortened(math.nan, math.inf) == ProxyLimits()
    paths = Paths(tmp_path)
    assert load_config(paths) == EngineConfig()
    paths.config_file.write_text("[engine]\nproxy_handshake_seconds = 2\nproxy_lifetime_minutes = 0.5\n")
    config = load_config(paths)
    assert (config.proxy_handshake_seconds, config.proxy_lifetime_seconds) == (2.0, 30.0)
    for bad in ('"2"', "true", "-1", "0"):
        paths.config_file.write_text(f"[engine]\nproxy_handshake_seconds = {bad}\nproxy_lifetime_minutes = {bad}\n")
        config = load_config(paths)
        assert (config.proxy_handshake_seconds, config.proxy_lifetime_seconds) == (None, None)
    # RM-5: the remote sessions' per-instruction deadline follows the same shorten-only rule.
    assert exec_deadline(None) == exec_deadline(0) == exec_deadline(math.nan) == exec_deadline(3600) == EXEC_TIMEOUT
    assert exec_deadline(2.5) == 2.5
    paths.config_file.write_text("[engine]\nremote_exec_seconds = 4\n")
    assert exec_deadline(load_config(paths).remote_exec_seconds) == 4.0


class _SlowToWindDown(ProxyListener):
    """A listener whose workers need a while to finish once cancelled (as a TLS close or an SSH channel may)."""

    def __init__(self) -> None:
        super().__init__("p", Target(asset_id=b"", name="t", ctype="tcp", host="127.0.0.1", port=9), "127.0.0.1")
        self.wound_down = 0

    async def handshake(self, client: Streams) -> Streams:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)
            self.wound_down += 1
            raise
        raise AssertionError("unreachable")


@pytest.mark.parametrize("loop", ["runtime", "asyncio"])
def test_stop_awaits_every_worker(loop: str) -> None:
    """PX-4: ProxyListener.stop() returns only after each client worker has finished, even a slow one;
    their sockets are closed by then and the listening port refuses new connections."""

    async def scenario() -> None:
        listener = _SlowToWindDown()
        await listener.start(0)
        clients = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(3)]
        for _ in range(200):
            if listener.clients == 3:
                break
            await asyncio.sleep(0.01)
        assert listener.clients == 3
        await listener.stop()
        assert listener.wound_down == 3 and listener.clients == 0
        for reader, writer in clients:
            assert await asyncio.wait_for(reader.read(1), 0.5) == b""
            writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", listener.port)

    # "runtime" is the daemon's remote loop (uvloop where installed), "asyncio" the standard one.
    with asyncio.Runner(loop_factory=_new_loop if loop == "runtime" else asyncio.new_event_loop) as runner:
        runner.run(scenario())


def test_a_longer_lifetime_in_config_is_capped_and_expires_in_counts_down(limited: Cli) -> None:
    """PX-4: asking for 10 hours still gives at most 30 minutes; `proxy list` shows expires_in decreasing."""
    proxy = limited.ok("proxy", "start", "cache")
    try:
        first = proxy["expires_in"]
        assert LIFETIME_SECONDS - 10 <= first <= LIFETIME_SECONDS
        time.sleep(2.2)
        listed = _proxy(limited, proxy["proxy"])
        assert listed is not None and listed["expires_in"] < first
    finally:
        limited.ok("proxy", "stop", proxy["proxy"])


# -- handshake deadline and packet bound (PostgreSQL: the local client speaks first) ----------
def test_silent_client_is_closed_at_the_handshake_deadline(limited: Cli, pg_db: str) -> None:
    """PX-2: a client that connects and sends nothing is closed once the handshake deadline passes; a relayed
    client that connected before it keeps working past that deadline, and new clients are served meanwhile."""
    proxy = limited.ok("proxy", "start", pg_db)
    port = proxy["port"]
    with asyncio.Runner() as runner:
        good = runner.run(asyncpg.connect(host="127.0.0.1", port=port, user="ignored", database="ignored", ssl=False))
        try:
            assert runner.run(good.fetchval("select current_user")) == "app"
            silent = _connect(port)
            # While the silent one waits, another client completes its own handshake.
            other = runner.run(asyncpg.connect(host="127.0.0.1", port=port, user="u", database="d", ssl=False))
            assert runner.run(other.fetchval("select 41 + 1")) == 42
            runner.run(other.close())
            assert not _closed_now(silent)  # not cut at once: it is still open after another whole handshake
            assert _closed_by_peer(silent, HANDSHAKE + 15) == b""  # then closed without a word: it never spoke
            silent.close()
            # The deadline bounds the handshake only: the relayed connection outlived it and still works.
            assert runner.run(good.fetchval("select 7")) == 7
        finally:
            runner.run(good.close())
    limited.ok("proxy", "stop", proxy["proxy"])


def test_oversized_startup_packet_closes_only_that_connection(limited: Cli, pg_db: str) -> None:
    """PX-2: a 64 KiB startup packet is accepted; 64 KiB + 1 is refused with a FATAL error and closed, while a
    concurrent relayed client keeps working."""
    proxy = limited.ok("proxy", "start", pg_db)
    port = proxy["port"]
    with asyncio.Runner() as runner:
        good = runner.run(asyncpg.connect(host="127.0.0.1", port=port, user="u", database="d", ssl=False))
        try:
            with _connect(port) as at_limit:
                at_limit.sendall(_startup(MAX_PACKET))
                head = at_limit.recv(9)
                assert head[:1] == b"R" and struct.unpack("!I", head[5:9])[0] == 0  # AuthenticationOk
            with _connect(port) as over:
                try:
                    over.sendall(_startup(MAX_PACKET + 1))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the proxy may close while the rest of the packet is still being sent
                answer = _closed_by_peer(over, 10)
                assert answer is not None, "the oversized connection was left open"
                if answer:  # unless the reset overtook it, the client was told why, in its own protocol
                    assert answer[:1] == b"E" and b"protocol_error" in answer
            assert runner.run(good.fetchval("select 5")) == 5
        finally:
            runner.run(good.close())
    limited.ok("proxy", "stop", proxy["proxy"])


# -- client limit, stop, lifetime (Redis: relayed from the first byte) -------------------------
def test_seventeenth_client_is_closed_while_sixteen_keep_working(limited: Cli) -> None:
    """PX-2: 16 relayed clients work; the 17th is closed at once; all 16 still work; a freed slot is reusable."""
    proxy = limited.ok("proxy", "start", "cache")
    port = proxy["port"]
    clients = [_connect(port) for _ in range(MAX_CLIENTS)]
    try:
        assert all(_ping(c) == b"+PONG\r\n" for c in clients)
        _wait_clients(limited, proxy["proxy"], MAX_CLIENTS)
        with _connect(port) as extra:
            assert _closed_by_peer(extra, 10) == b""
        assert all(_ping(c) == b"+PONG\r\n" for c in clients)
        clients.pop().close()
        _wait_clients(limited, proxy["proxy"], MAX_CLIENTS - 1)
        clients.append(_connect(port))
        assert _ping(clients[-1]) == b"+PONG\r\n"
    finally:
        for c in clients:
            c.close()
    limited.ok("proxy", "stop", proxy["proxy"])


def test_stop_answers_only_after_every_worker_closed(limited: Cli) -> None:
    """PX-4: when `proxy stop` answers, its relayed connections are already closed (the workers were awaited),
    the proxy is gone from `proxy list` and its port refuses connections."""
    proxy = limited.ok("proxy", "start", "cache")
    port = proxy["port"]
    relayed = [_connect(port) for _ in range(3)]
    try:
        assert all(_ping(c) == b"+PONG\r\n" for c in relayed)
        _wait_clients(limited, proxy["proxy"], 3)
        assert not any(_closed_now(c) for c in relayed)
        limited.ok("proxy", "stop", proxy["proxy"])
        # No wait: the close must already have happened before the answer.
        assert all(_closed_now(c) for c in relayed)
    finally:
        for c in relayed:
            c.close()
    assert _proxy(limited, proxy["proxy"]) is None
    with pytest.raises(OSError):
        _connect(port).close()
    assert limited.err("proxy", "stop", proxy["proxy"])["code"] == "not_found"


def test_lifetime_ends_the_proxy_and_its_relayed_connection(short_lived: Cli) -> None:
    """PX-4: once the (shortened) lifetime elapses, despite traffic, the proxy leaves `proxy list`, its port
    refuses connections and its in-flight relayed connection is closed."""
    proxy = short_lived.ok("proxy", "start", "cache")
    started = time.monotonic()  # bounds the wait below; no assertion on elapsed time
    port = proxy["port"]
    assert 0 < proxy["expires_in"] <= LIFETIME
    relayed = _connect(port)
    try:
        assert _ping(relayed) == b"+PONG\r\n"
        time.sleep(1.2)
        listed = _proxy(short_lived, proxy["proxy"])
        assert listed is not None and listed["expires_in"] < proxy["expires_in"] and listed["clients"] == 1
        # Keep traffic flowing until the relay is cut: traffic must not extend the lifetime. The cut
        # must come when the engine's own count says the lifetime is over, not before: a listing asked
        # for at `asked` that answered `expires_in` puts the engine's end at or after asked + expires_in
        # (it answered later, and floors), so a correct cut is never seen before that moment, however
        # slow the machine; an early cut is.
        end = started + LIFETIME + 15
        cut_seen: float | None = None
        engine_end_not_before = 0.0
        while time.monotonic() < end:
            try:
                if _ping(relayed) != b"+PONG\r\n":
                    cut_seen = time.monotonic()
                    break
            except OSError:
                cut_seen = time.monotonic()
                break
            asked = time.monotonic()
            current = _proxy(short_lived, proxy["proxy"])
            if current is not None:
                engine_end_not_before = asked + current["expires_in"]
            time.sleep(0.2)
        assert cut_seen is not None, "the relayed connection outlived the proxy's lifetime"
        early = engine_end_not_before - cut_seen
        assert early <= 0, f"cut {early:.1f} s before the end `proxy list` gave"
    finally:
        relayed.close()
    assert _proxy(short_lived, proxy["proxy"]) is None
    with pytest.raises(OSError):
        _connect(port).close()
    assert short_lived.ok("status")["connections"] == 0


def test_a_query_past_the_deadline_is_cancelled_on_the_server_and_the_session_closed(
    limited: Cli, pg_db: str, pg: Postgres
) -> None:
    """RM-5: a PostgreSQL query running past the session deadline (60 s; 2 s in this daemon's config) answers
    a typed `timeout`; the server really stops it (a CancelRequest, as psql sends on Ctrl-C); the session is
    closed, so a later exec on it is `session_closed`; the audit records the outcome."""
    limited.sudo()
    session = limited.ok("remote", "open", pg_db)["session"]
    ticket = limited.ok("remote", "propose", session, "select pg_sleep(45)")["ticket"]
    limited.ok("remote", "approve", ticket)
    # pg_sleep(45) answers only if nothing cancels it: a typed timeout proves the deadline (EXEC s) acted.
    err = limited.err("remote", "exec", ticket)
    assert err["code"] == "timeout" and "cancelled" in err["message"]
    deadline = time.monotonic() + 120
    running = "?"
    while time.monotonic() < deadline:
        running = pg.psql("select count(*) from pg_stat_activity where query like 'select pg_sleep(45)%' and state = 'active'")
        if running.strip() == "0":
            break
        time.sleep(0.2)
    assert running.strip() == "0", "the server is still running the timed-out query"
    assert session not in [s["session"] for s in limited.ok("remote", "list")["sessions"]]
    assert limited.err("remote", "propose", session, "select 1")["code"] == "session_closed"
    # A fresh session works: the timeout closed one connection, not the credential.
    fresh = limited.ok("remote", "open", pg_db)["session"]
    assert run_ticket(limited, fresh, "select 41 + 1 as answer")["result"]["rows"] == [[42]]
    limited.ok("remote", "close", fresh)
