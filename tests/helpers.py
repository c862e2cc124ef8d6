"""Drive the real `memories` CLI and daemon processes from tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "engine.cli", "--home", str(self.home), *args]

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("MEMORIES_HOME", None)
        env.update(TEST_ENV)
        env.update(self.env)
        return env

    def run(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            input=input,
            # No input: stdin is empty, not the runner's (a command that reads piped stdin must not wait).
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.environ(),
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
