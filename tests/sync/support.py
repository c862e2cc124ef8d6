"""Joined devices for sync tests: real homes, real daemons, joined with the device commands.

``joined_pair`` gives A (the first device, password PASSWORD) and B (joined through A, password
B_PASSWORD). ``Listener`` runs `memories serve` on A in the foreground as a real process and
stops it with SIGTERM; ``token_for`` makes a device-bound token on the serving side.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import PASSWORD, Cli, free_port

__all__ = [
    "B_PASSWORD",
    "C_PASSWORD",
    "free_port",
    "device_id",
    "add_device",
    "make_pair",
    "Listener",
    "token_for",
    "sync",
    "sync_err",
    "titles",
    "revision_ids",
]

B_PASSWORD = "laptop password, not the approver's 7"
C_PASSWORD = "third device password 9"


def device_id(cli: Cli) -> str:
    return str(cli.ok("whoami")["device_id"])


def add_device(approver: Cli, new: Cli, name: str, password: str, approver_password: str = PASSWORD) -> dict[str, Any]:
    """The whole join: request on the new home, approve (sudo) on the approver, join."""
    request = new.ok(
        "device", "request", "--approver", device_id(approver), "--name", name, "--password-stdin", input=password + "\n"
    )
    approver.sudo(approver_password)
    approval = approver.ok("device", "approve", request["request"], "--yes")
    return new.ok("device", "join", approval["approval"], "--password-stdin", input=password + "\n")


def make_pair(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[Cli, Cli]:
    a = Cli(home=tmp_path / "a", env=dict(env or {}))
    b = Cli(home=tmp_path / "b", env=dict(env or {}))
    a.init()
    add_device(a, b, "laptop", B_PASSWORD)
    return a, b


def token_for(server: Cli, client: Cli, password: str = PASSWORD) -> str:
    server.sudo(password)
    return str(server.ok("sync", "token", "new", "--device", device_id(client))["token"])


@dataclass
class Listener:
    """`memories serve` of one home, as a foreground process (like a user's terminal)."""

    cli: Cli
    port: int
    process: subprocess.Popen[str] | None = None
    url: str = ""
    stderr_text: str = ""

    def start(self, *extra: str) -> Listener:
        self.process = subprocess.Popen(
            self.cli.command("serve", "--listen", f"127.0.0.1:{self.port}", "--json", *extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.cli.environ(),
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"serve printed nothing: {self.process.stderr.read() if self.process.stderr else ''}"
        shown = json.loads(line)
        self.url = str(shown["url"])
        return self

    def stop(self) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.process.stderr is not None:
            self.stderr_text = self.process.stderr.read()  # what `serve` told its terminal
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self.process = None
        return code

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sync(client: Cli, url: str, token: str, *extra: str, timeout: float = 300) -> dict[str, Any]:
    proc = client.run("sync", url, "--token-stdin", "--json", *extra, input=token + "\n", timeout=timeout)
    assert proc.returncode == 0, f"sync failed: {proc.stdout} {proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout)
    result.pop("v", None)
    return result


def sync_err(client: Cli, url: str, token: str | None, *extra: str, timeout: float = 300) -> dict[str, Any]:
    env_token = {} if token is None else {"MEMORIES_SYNC_TOKEN": token}
    saved = dict(client.env)
    client.env.update(env_token)
    try:
        proc = client.run("sync", url, "--json", *extra, timeout=timeout)
    finally:
        client.env.clear()
        client.env.update(saved)
    assert proc.returncode != 0, f"sync unexpectedly succeeded: {proc.stdout}"
    out = json.loads(proc.stdout)
    if "error" in out:  # the session failed as a whole
        error: dict[str, Any] = out["error"]
        return error
    # The session ran but a vault was not merged (each vault's merge is all or nothing on its
    # own): this side's refusal first, else the peer's.
    refused: list[dict[str, Any]] = [r["error"] for r in [*out.get("vaults", []), *out.get("peer_vaults", [])] if "error" in r]
    assert refused, f"sync failed without naming a refusal: {proc.stdout}"
    return refused[0]


def titles(cli: Cli) -> set[str]:
    return {str(row["title"]) for row in cli.ok("list", "--all")["items"]}


def revision_ids(cli: Cli, asset: str) -> list[str]:
    return sorted(str(row["revision"]) for row in cli.ok("history", asset)["revisions"])


def wait_until(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def env_without_token() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MEMORIES_SYNC_TOKEN", None)
    return env


OTHER_USER = "ab" * 32  # another user's ID: a vault can be handed to them


def step_down_to_reader(cli: Cli) -> list[list[str]]:
    """The commands (under sudo, on the Owner's device) that hand the default vault to another
    user and make this user a Reader: every device of this user loses the right to write."""
    me = next(str(m["user"]) for m in cli.ok("vault", "members")["members"] if m["me"])
    return [
        ["vault", "member", "add", OTHER_USER, "--role", "editor"],
        ["vault", "transfer", OTHER_USER],
        ["vault", "member", "role", me, "--role", "reader"],
    ]
