"""Sync through a relay (API-5, SY-4): the relay is a real `memories relay serve` process that
forwards sealed frames; it never sees a title or a body, in its output or in its memory."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import Cli, require
from tests.sync.support import free_port, titles

TITLE = "Relay canary title 7f3a91"
BODY = "relay canary body: the spare key is under the blue pot 55c2"


def _start_relay(port: int, *extra: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "relay", "serve", "--listen", f"127.0.0.1:{port}", "--json", *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the relay printed nothing"
    return process, str(json.loads(line)["relay"])


def _relay_sync(cli: Cli, relay: str, room: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli.command("sync", "--relay", relay, f"--room={room}", "--wait", "60", "--json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.environ(),
    )


def _memory(pid: int) -> bytes:
    """Every readable private mapping of a process (same user; needs ptrace read access)."""
    chunks = []
    with open(f"/proc/{pid}/maps", encoding="ascii") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except (OSError, ValueError, OverflowError):
                continue
    return b"".join(chunks)


def test_two_devices_sync_through_a_relay_that_sees_no_content(pair: tuple[Cli, Cli]) -> None:
    """API-5, SY-4: A and B join one room; everything after the hellos is sealed to the peer
    device, so the relay's output and memory hold neither the title nor the body."""
    a, b = pair
    note = a.put(TITLE, BODY)
    b.put("from B through the relay", "b body")
    relay, url = _start_relay(free_port())
    try:
        room = secrets.token_urlsafe(24)  # may begin with "-": passed as --room=ID below
        first, second = _relay_sync(a, url, room), _relay_sync(b, url, room)
        outs = [proc.communicate(timeout=120) for proc in (first, second)]
        for proc, (out, err) in zip((first, second), outs, strict=True):
            assert proc.returncode == 0, f"relay sync failed: {out} {err}"
            assert json.loads(out)["via"] == "relay"
        assert titles(a) == titles(b) == {TITLE, "from B through the relay"}
        assert b.ok("get", note["id"])["body"] == BODY
        readable = True
        try:
            memory = _memory(relay.pid)
        except PermissionError:
            readable = False
        require(readable, "reading the relay's memory needs ptrace access to own processes (kernel.yama.ptrace_scope)")
        assert len(memory) > 1_000_000
        for secret in (TITLE, BODY, "b body"):
            assert secret.encode() not in memory
            assert secret.encode("utf-16-le") not in memory
    finally:
        relay.terminate()
        out, err = relay.communicate(timeout=30)
    for secret in (TITLE, BODY, room):
        assert secret not in out and secret not in err


def test_relay_refuses_short_rooms_a_third_member_and_bad_tokens(tmp_path: Path) -> None:
    """API-5: a room ID below 128 bits is refused; a room holds two devices; with a relay token
    set, a join without it is refused."""
    import urllib.error
    import urllib.request

    relay, url = _start_relay(free_port())
    try:
        request = urllib.request.Request(url + "/v1/relay/short", headers={"Connection": "Upgrade", "Upgrade": "websocket"})
        with pytest.raises(urllib.error.HTTPError) as short:
            urllib.request.urlopen(request, timeout=10)
        assert short.value.code == 400
    finally:
        relay.terminate()
        relay.communicate(timeout=30)
    cli = Cli(home=tmp_path / "lonely")
    cli.init()
    try:
        port = free_port()
        relay = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "relay", "serve", "--listen", f"127.0.0.1:{port}", "--json"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**cli.environ(), "MEMORIES_RELAY_TOKEN": "relay-secret-" + secrets.token_hex(8)},
        )
        assert relay.stdout is not None
        url = str(json.loads(relay.stdout.readline())["relay"])
        # The refusal comes at the join, so a long --wait costs nothing; a short one could run out on a
        # loaded machine before the join is even answered, and the test would see a timeout instead.
        # --room=ID: a random base64url room begins with "-" once in 64 draws (as an option it would be a usage error).
        proc = cli.run("sync", "--relay", url, f"--room={secrets.token_urlsafe(24)}", "--wait", "60", "--json")
        assert proc.returncode != 0
        assert json.loads(proc.stdout)["error"]["code"] == "sync_unauthorized"
        relay.terminate()
        relay.communicate(timeout=30)
    finally:
        cli.stop()


def test_relay_outside_loopback_needs_the_flag_and_tls(tmp_path: Path) -> None:
    """API-5: outside the trust boundary a relay is always WSS."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "relay", "serve", "--listen", "0.0.0.0:0", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0 and json.loads(proc.stdout)["error"]["code"] == "invalid_input"
    assert re.search("non-loopback", proc.stdout)
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "relay", "serve", "--listen", "0.0.0.0:0", "--allow-non-loopback", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0 and "--tls-cert" in json.loads(proc.stdout)["error"]["message"]
