"""Drive the real `memories` CLI and daemon processes from tests."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient

PASSWORD = "correct horse battery staple"
# Tests use a tiny KDF (the chosen parameters are stored in the header); the
# real default is calibrated to ~0.7 s and is measured by bench/.
TEST_ENV = {"MEMORIES_KDF_TARGET_MS": "10"}


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def require(condition: bool, reason: str) -> None:
    """Skip on a user's machine that lacks a system component; fail in CI (never skip there)."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


@dataclass
class Cli:
    home: Path
    env: dict[str, str] = field(default_factory=dict)
    # Where commands run: `python -m` puts the working directory first on the path, so a bench
    # running another checkout's engine runs it from that checkout (None: the caller's).
    cwd: Path | None = None
    timeout: float = 60  # seconds a command may take

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "engine.cli", "--home", str(self.home), *args]

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("MEMORIES_HOME", None)
        env.update(TEST_ENV)
        env.update(self.env)
        return env

    def run(self, *args: str, input: str | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            input=input,
            # No input: stdin is empty, not the runner's (a command that reads piped stdin must not wait).
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=self.timeout if timeout is None else timeout,
            env=self.environ(),
            cwd=self.cwd,
        )

    def ok(self, *args: str, input: str | None = None) -> dict[str, Any]:
        """Run with --json and return the parsed result; fail the test on a non-zero exit."""
        proc = self.run(*args, "--json", input=input)
        assert proc.returncode == 0, f"{args} failed: {proc.stdout} {proc.stderr}"
        result: dict[str, Any] = json.loads(proc.stdout)
        # Every --json object carries its shape version (docs/cli-json.md); checked here, then
        # dropped so that tests compare the payload itself.
        if isinstance(result, dict):
            assert result.pop("v", None) == 1, f'{args}: --json output without "v": 1'
        return result

    def err(self, *args: str, input: str | None = None) -> dict[str, Any]:
        """Run with --json expecting a typed error; return {code, message}."""
        proc = self.run(*args, "--json", input=input)
        assert proc.returncode != 0, f"{args} unexpectedly succeeded: {proc.stdout}"
        error: dict[str, Any] = json.loads(proc.stdout)["error"]
        return error

    def init(self, password: str = PASSWORD) -> dict[str, Any]:
        return self.ok("init", "--password-stdin", input=password + "\n")

    def unlock(self, password: str = PASSWORD) -> dict[str, Any]:
        return self.ok("unlock", "--password-stdin", input=password + "\n")

    def sudo(self, password: str = PASSWORD) -> dict[str, Any]:
        return self.ok("sudo", "--password-stdin", input=password + "\n")

    def put(self, title: str, body: str = "", *tags: str) -> dict[str, Any]:
        args = ["put", "--title", title, "--body", body]
        for tag in tags:
            args += ["--tag", tag]
        return self.ok(*args)

    def lock(self) -> None:
        """Lock, and wait until the engine has re-executed (ST-12) and serves again.

        The lock answers before the engine closes the store and re-executes; closing checkpoints
        the write-ahead log into ``store.db``. A test comparing the store's bytes across a lock
        must wait for that, or it races with the engine's own last write.
        """
        restarts = self._restarts()
        assert self.ok("lock") == {"locked": True}
        deadline = time.monotonic() + 120
        while self._restarts() == restarts:  # the engine's log is the event: no other signal crosses the exec
            assert time.monotonic() < deadline, "the engine did not re-execute after the lock"
            time.sleep(0.05)
        assert self.ok("status")["state"] == "locked"

    def _restarts(self) -> int:
        log = Paths(self.home).log_dir / "engine.log"
        return log.read_text("utf-8", "replace").count("engine restarted after a lock") if log.exists() else 0

    def daemon_pid(self) -> int | None:
        info = self.ok("daemon", "status")
        return int(info["pid"]) if info.get("running") else None

    def stop(self) -> None:
        """Stop the daemon; kill it if it does not stop (tests must not leak processes)."""
        pid = None
        try:
            pid = self.daemon_pid()
            self.run("daemon", "stop", timeout=20)
        except (subprocess.TimeoutExpired, AssertionError, json.JSONDecodeError):
            pass
        if pid is not None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.05)
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


# Ports for servers a test starts itself (Postgres, sshd, sync listeners, relays). Under
# pytest-xdist each worker draws from its own slice of 10000-31999: below Linux's ephemeral range
# (32768+), so no outgoing connection is given the port between the pick and the server's bind,
# and never a port another worker may pick. Outside xdist the kernel picks, as before.
_WORKER_PORTS: Iterator[int] | None = None


def _worker_ports() -> Iterator[int] | None:
    global _WORKER_PORTS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return None
    if _WORKER_PORTS is None:
        count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
        size = 22000 // count
        first = 10000 + int(worker[2:]) % count * size
        start = random.randrange(size)  # a rerun in the same slice starts elsewhere (TIME_WAIT, a stale server)
        _WORKER_PORTS = itertools.cycle([first + (start + i) % size for i in range(size)])
    return _WORKER_PORTS


def free_port() -> int:
    """A loopback TCP port nothing listens on now, for a server the test is about to start."""
    ports = _worker_ports()
    if ports is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for port in ports:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken (another program, or still in use from this worker's last lap)
            return port
    raise AssertionError("unreachable: the port cycle is endless")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child still "exists"; check /proc for state Z.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def raw(cli: Cli, body: dict[str, Any]) -> dict[str, Any]:
    """One request over the real IPC socket (for fields the CLI never sends)."""
    with IpcClient(Paths(cli.home).socket) as client:
        return client.request(body)


def raw_error(cli: Cli, body: dict[str, Any]) -> MemoriesError:
    """The typed error of a request that must be refused (fails the test if it succeeds)."""
    try:
        raw(cli, body)
    except MemoriesError as exc:
        return exc
    raise AssertionError(f"{body['op']} unexpectedly succeeded")
