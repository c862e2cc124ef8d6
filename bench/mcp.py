"""MCP overhead benchmark (issue 6): one command, measured side by side in one run.

    .venv/bin/python bench/mcp.py [--notes 300] [--rounds 200]

Starts a real daemon on a temp vault with N memories, creates a grant, then measures
the round trip of the same `search` (falls back to `list` if this engine has no
search op) three ways:

  * IPC   — the CLI's path: one `IpcClient.request` on a connected socket;
  * MCP stdio — official MCP client → `memories mcp` (stdio) → daemon → back;
  * MCP HTTP  — official MCP client → `memories mcp --http` (Streamable HTTP) → daemon.

Prints p50/p95 and the ratio MCP p50 ÷ IPC p50, plus the absolute overhead; the
issue's target is MCP ≤ 1.5 × IPC + 2 ms. A whole `memories search` CLI process is
shown for scale (it is dominated by interpreter start-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# This file is named mcp.py: drop its own directory from the path so `import mcp` finds the SDK.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from engine.config import Paths  # noqa: E402
from engine.errors import MemoriesError  # noqa: E402
from engine.ipc.client import IpcClient  # noqa: E402

PASSWORD = "bench password"
WORDS = [
    "release",
    "deploy",
    "espresso",
    "garden",
    "ledger",
    "kernel",
    "migration",
    "backup",
    "invoice",
    "travel",
    "recipe",
    "sensor",
]


def cli(home: Path, *args: str, stdin: str | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args, "--json"],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "MEMORIES_KDF_TARGET_MS": "10"},
        cwd=ROOT,
        check=False,
    )
    if proc.returncode:
        raise SystemExit(f"{args}: {proc.stdout}{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, samples: list[float]) -> float:
    p50 = statistics.median(samples)
    print(f"{name:<28} p50 {p50 * 1000:8.3f} ms   p95 {pct(samples, 0.95) * 1000:8.3f} ms   (n={len(samples)})")
    return p50


def pick_request(client: IpcClient) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The engine request and the equivalent MCP tool call."""
    try:
        client.request({"op": "search", "query": "release", "limit": 10})
    except MemoriesError as exc:
        if exc.code != "unknown_op":
            raise
        return {"op": "list", "limit": 10}, "memory_list", {"limit": 10}
    return {"op": "search", "query": "release", "limit": 10}, "search", {"query": "release", "limit": 10}


async def measure(
    owner: IpcClient, home: Path, url: str, token: str, request: dict[str, Any], tool: str, arguments: dict[str, Any], rounds: int
) -> dict[str, list[float]]:
    """Interleaved: each round runs the same request on every path, so load drift hits all alike."""
    env = {**os.environ, "MEMORIES_MCP_TOKEN": token}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "engine.cli", "--home", str(home), "mcp"], env=env, cwd=str(ROOT)
    )
    wrapped = {"op": "mcp_call", "token": token, "request": request}
    samples: dict[str, list[float]] = {"ipc": [], "mcp_call": [], "stdio": [], "http": []}
    async with (
        Client(params) as stdio,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http_transport,
        Client(streamable_http_client(url, http_client=http_transport)) as http,
    ):
        for warm in range(-10, rounds):
            start = time.perf_counter()
            owner.request(request)
            ipc = time.perf_counter() - start
            start = time.perf_counter()
            owner.request(wrapped)
            call = time.perf_counter() - start
            start = time.perf_counter()
            first = await stdio.call_tool(tool, arguments)
            over_stdio = time.perf_counter() - start
            start = time.perf_counter()
            second = await http.call_tool(tool, arguments)
            over_http = time.perf_counter() - start
            assert not first.is_error and not second.is_error, (first.content, second.content)
            if warm >= 0:
                for key, value in (("ipc", ipc), ("mcp_call", call), ("stdio", over_stdio), ("http", over_http)):
                    samples[key].append(value)
    return samples


def start_http(home: Path, token: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "--home", str(home), "mcp", "--http", "--port", "0"],
        env={**os.environ, "MEMORIES_MCP_TOKEN": token},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("mcp --http exited")
        found = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        if found:
            return proc, found.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="memories-bench-mcp-") as tmp:
        home = Path(tmp) / "home"
        cli(home, "init", "--password-stdin", stdin=PASSWORD + "\n")
        socket_path = Paths(home).socket
        http_proc: subprocess.Popen[str] | None = None
        try:
            with IpcClient(socket_path) as owner:
                items = [
                    {
                        "title": f"{WORDS[i % len(WORDS)]} note {i}",
                        "body": " ".join(WORDS[(i + k) % len(WORDS)] for k in range(60)),
                    }
                    for i in range(args.notes)
                ]
                owner.request({"op": "import_batch", "items": items}, timeout=600)
                cli(home, "sudo", "--password-stdin", stdin=PASSWORD + "\n")
                token = cli(home, "mcp", "grant", "--name", "bench", "--scope", "read")["token"]
                request, tool, arguments = pick_request(owner)
                print(f"vault: {args.notes} memories; request: {request['op']} (tool {tool}); rounds: {args.rounds}")

                http_proc, url = start_http(home, token)
                samples = asyncio.run(measure(owner, home, url, token, request, tool, arguments, args.rounds))

            ipc_p50 = report("IPC (CLI path)", samples["ipc"])
            call_p50 = report("IPC mcp_call (grant check)", samples["mcp_call"])
            stdio_p50 = report("MCP stdio (official client)", samples["stdio"])
            http_p50 = report("MCP HTTP (official client)", samples["http"])

            whole = []
            for _ in range(5):
                start = time.perf_counter()
                if request["op"] == "search":
                    cli(home, "search", "release")
                else:
                    cli(home, "list", "--limit", "10")
                whole.append(time.perf_counter() - start)
            report("whole CLI process", whole)

            print()
            print(f"grant check overhead (mcp_call − IPC): {(call_p50 - ipc_p50) * 1000:.3f} ms")
            for name, p50 in (("stdio", stdio_p50), ("HTTP", http_p50)):
                ratio = p50 / ipc_p50
                overhead = (p50 - ipc_p50) * 1000
                target = p50 <= 1.5 * ipc_p50 + 0.002
                print(
                    f"MCP {name:<5} ÷ IPC: {ratio:5.2f}×   overhead {overhead:7.3f} ms   "
                    f"target (≤ 1.5× + 2 ms): {'met' if target else 'NOT met'}"
                )
        finally:
            if http_proc is not None:
                http_proc.terminate()
                http_proc.wait(timeout=10)
            subprocess.run(
                [sys.executable, "-m", "engine.cli", "--home", str(home), "daemon", "stop"],
                capture_output=True,
                cwd=ROOT,
                check=False,
            )


if __name__ == "__main__":
    main()
