"""Shared helpers for the MCP tests: grants through the real CLI, the official MCP client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.helpers import Cli

REPO = Path(__file__).resolve().parents[2]
TOOLS = {
    "search",
    "retrieve",
    "ask",
    "memory_write",
    "memory_read",
    "memory_list",
    "memory_delete",
    "card_read",
    "card_write",
    "link",
    "unlink",
    "connections",
    "recall_connected",
    "history",
    "annotate",
    "recall_turn",
    "recall_session",
    "memory_conclude",
    "notebook_write",
    "notebook_read",
    "notebook_list",
    "notebook_search",
    "notebook_forget",
    "scratch_read",
    "scratch_write",
}
# Every grant has its own notebook (AG-13): these are listed to every scope.
NOTEBOOK_TOOLS = {
    "notebook_write",
    "notebook_read",
    "notebook_list",
    "notebook_search",
    "notebook_forget",
    "scratch_read",
    "scratch_write",
}
# What tools/list shows each grant (issue 27: only the tools it can call).
TRANSCRIPT_TOOLS = {"recall_turn", "recall_session", "memory_conclude"}
READ_TOOLS = {
    "search",
    "retrieve",
    "ask",
    "memory_read",
    "memory_list",
    "card_read",
    "connections",
    "recall_connected",
    "history",
} | NOTEBOOK_TOOLS
WRITE_TOOLS = {"memory_write", "card_write", "link", "unlink", "annotate"}
READ_WRITE_TOOLS = READ_TOOLS | WRITE_TOOLS


def grant(cli: Cli, name: str, scope: str, *vaults: str) -> str:
    """Create a grant through the real CLI (the caller must have run ``cli.sudo()``)."""
    args = ["mcp", "grant", "--name", name, "--scope", scope]
    for vault in vaults:
        args += ["--vault", vault]
    result = cli.ok(*args)
    token = result["token"]
    assert isinstance(token, str)
    return token


def ipc(cli: Cli) -> IpcClient:
    """A direct IPC connection to the daemon (as any local client would open)."""
    client = IpcClient(Paths(cli.home).socket)
    client.connect()
    return client


def stdio_params(cli: Cli, token: str | None) -> StdioServerParameters:
    env = cli.environ()
    env.pop("MEMORIES_MCP_TOKEN", None)
    if token is not None:
        env["MEMORIES_MCP_TOKEN"] = token
    return StdioServerParameters(
        command=sys.executable, args=["-m", "engine.cli", "--home", str(cli.home), "mcp"], env=env, cwd=str(REPO)
    )


@asynccontextmanager
async def stdio_client(cli: Cli, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(stdio_params(cli, token), mode=mode, read_timeout_seconds=60) as client:
        yield client


def result_of(call: CallToolResult) -> dict[str, Any]:
    assert not call.is_error, call.content
    assert isinstance(call.structured_content, dict)
    return call.structured_content


def error_of(call: CallToolResult) -> dict[str, Any]:
    """AG-3/API-8: a tool error carries the engine's stable code."""
    assert call.is_error, call.structured_content
    assert isinstance(call.structured_content, dict)
    error = call.structured_content["error"]
    assert isinstance(error, dict) and set(error) == {"code", "message"}
    return error


def text_of(call: CallToolResult) -> str:
    """Everything a client receives from one call, for canary sweeps."""
    return json.dumps(call.model_dump(mode="json", by_alias=True), ensure_ascii=False)


class HttpServer:
    """``memories mcp --http --port 0`` as a real process; its URL is read from stderr."""

    def __init__(self, cli: Cli, token: str) -> None:
        env = cli.environ()
        env["MEMORIES_MCP_TOKEN"] = token
        self.proc = subprocess.Popen(
            [*cli.command("mcp", "--http", "--port", "0")],
            env=env,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = self._wait_for_url()
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def _wait_for_url(self) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise AssertionError(f"mcp --http exited early: {self.proc.wait()}")
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+/mcp)", line)
            if found:
                return found.group(1)
        raise AssertionError("mcp --http did not report its URL")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@contextmanager
def http_server(cli: Cli, token: str) -> Iterator[HttpServer]:
    server = HttpServer(cli, token)
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def http_client(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        from mcp.client.streamable_http import streamable_http_client

        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def environ_without_token() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MEMORIES_MCP_TOKEN", None)
    return env
