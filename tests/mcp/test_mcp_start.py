"""AG-11: `memories mcp` answers `initialize` before it imports the SDK.

The early answer (engine/mcp_handshake.py) must be the SDK's own answer, byte for byte in meaning,
for every protocol version a client may offer; the SDK must then carry on as if it had
answered (the next request gets its answer, not a second initialize reply); and nothing heavy
may be imported before the answer. Timing is measured in bench/mcp.py, never asserted here.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from engine.mcp_handshake import HANDSHAKE_VERSIONS
from tests.helpers import Cli
from tests.mcp.support import REPO, grant, stdio_client, stdio_params

# Imported by the SDK path; none of them may load before the early answer.
HEAVY = ("mcp", "mcp_types", "pydantic", "pydantic_core", "anyio", "uvloop", "msgspec", "starlette")


def _initialize(request_id: int, version: str) -> bytes:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    return (json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}) + "\n").encode()


def _server(cli: Cli, token: str | None, *, early: bool, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    params = stdio_params(cli, token)
    env = dict(params.env or {})
    env["MEMORIES_MCP_EARLY"] = "1" if early else "0"
    return subprocess.Popen(
        [sys.executable, *extra, *params.args, *([] if token else ["--agent", "nobody"])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )


def _exchange(proc: subprocess.Popen[bytes], *lines: bytes) -> list[dict[str, Any]]:
    """Send each line and read one answer per request line (notifications get none)."""
    assert proc.stdin is not None and proc.stdout is not None
    answers = []
    for line in lines:
        proc.stdin.write(line)
        proc.stdin.flush()
        if b'"id"' in line:
            answers.append(json.loads(proc.stdout.readline()))
    return answers


def _close(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)


def test_ag11_early_initialize_answer_is_the_sdks_and_the_session_carries_on(vault: Cli) -> None:
    """AG-11: for each handshake version (and an unknown offer, answered with the newest) the early
    answer equals the SDK's; afterwards tools/list is answered by the SDK with id 2 (no duplicate)."""
    vault.sudo()
    token = grant(vault, "early", "read")
    initialized = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    tools_list = b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}\n'
    for version in (*HANDSHAKE_VERSIONS, "1999-01-01"):
        sdk = _server(vault, token, early=False)
        try:
            (expected,) = _exchange(sdk, _initialize(1, version))
        finally:
            _close(sdk)
        ours = _server(vault, token, early=True)
        try:
            first, after = _exchange(ours, _initialize(1, version), initialized, tools_list)
        finally:
            _close(ours)
        assert first == expected, version
        assert first["result"]["protocolVersion"] == (version if version in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1])
        assert after["id"] == 2 and "search" in {t["name"] for t in after["result"]["tools"]}


def test_ag11_initialize_is_answered_before_any_heavy_import(vault: Cli) -> None:
    """AG-11: with no token stored the server still answers initialize, then fails naming the fix;
    `-X importtime` shows that the whole run never imported the SDK, pydantic or anyio."""
    proc = _server(vault, None, early=True, extra=("-X", "importtime"))
    try:
        (answer,) = _exchange(proc, _initialize(7, "2025-06-18"))
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=60) != 0
    finally:
        proc.kill()
        proc.wait()
    assert answer["id"] == 7 and answer["result"]["serverInfo"]["name"] == "memories"
    assert "No token is stored for agent nobody" in stderr and "memories agent connect nobody" in stderr
    imported = {line.split("|")[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "engine.mcp_handshake" in imported
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert heavy == []


def test_ag11_official_client_handshake_runs_through_the_early_answer(vault: Cli) -> None:
    """AG-11: the official client in handshake mode (as Claude Code and Codex connect) lists and calls tools."""
    vault.sudo()
    token = grant(vault, "legacy", "read")

    async def scenario() -> list[str]:
        async with stdio_client(vault, token, mode="legacy") as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    names = asyncio.run(scenario())
    assert "search" in names and "recall_connected" in names
