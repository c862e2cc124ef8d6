"""Agent memory benchmark (issue 18), transcript half: import and recall.

    .venv/bin/python bench/agent.py [--sessions 100] [--turns 200] [--rounds 200]

Writes ``--sessions`` sessions of ``--turns`` turns each in the real on-disk formats (four
in five Claude Code projects files, one in five Codex rollouts; each turn is a user
message, an assistant message with a tool call, the tool's result and an answer, in
English and Chinese), starts a real daemon on a temp vault and measures:

  * ``memories transcript import DIR`` (a whole CLI process): turns/s;
  * the same import again (nothing changed): its cost, which must be near zero;
  * ``recall_turn`` (a turn by turn_uid, ±3 turns) and ``recall_session`` (a page of 20
    turns) latency: over IPC as the owner (the CLI's client), and through the MCP server
    (official MCP client → ``memories mcp`` on stdio → daemon), interleaved round by round.
    The goal is MCP p50 ≤ 1.5 × IPC p50 + 2 ms, as for the other tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# bench/mcp.py would shadow the MCP SDK: drop this directory from the path.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(ROOT))

from engine.config import Paths  # noqa: E402
from engine.ipc.client import IpcClient  # noqa: E402

PASSWORD = "bench agent transcripts 1"  # a throwaway vault
WORDS = ["cabin", "booking", "overlap", "timezone", "backup", "rsync", "release", "migration", "sync", "vault", "search", "index"]
ZH = ["时区", "备份目录", "发布说明", "同步", "索引", "记忆", "护照", "测试失败"]


def _claude_session(path: Path, n: int, turns: int, rng: random.Random) -> None:
    sid = f"{n:08x}-0000-4000-8000-{n:012x}"
    lines = []
    t0 = 1_764_000_000 + n * 10_000
    for t in range(turns):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t0 + t * 30))
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        zh = rng.choice(ZH)
        u, a, r, f = (f"{n}-{t}-{k}" for k in "uarf")
        base = {"sessionId": sid, "isSidechain": False, "userType": "external", "cwd": "/home/bench", "version": "2.0.14"}
        lines.append(
            {**base, "type": "user", "uuid": u, "timestamp": ts, "message": {"role": "user", "content": f"{zh} {words}?"}}
        )
        lines.append(
            {
                **base,
                "type": "assistant",
                "uuid": a,
                "timestamp": ts,
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Looking at {words}."},
                        {
                            "type": "tool_use",
                            "id": f"toolu_{a}",
                            "name": "Bash",
                            "input": {"command": f"grep -rn {rng.choice(WORDS)} ."},
                        },
                    ],
                },
            }
        )
        result = {"type": "tool_result", "tool_use_id": f"toolu_{a}", "content": f"src/{rng.choice(WORDS)}.py:{t}: {words}"}
        lines.append({**base, "type": "user", "uuid": r, "timestamp": ts, "message": {"role": "user", "content": [result]}})
        answer = {"role": "assistant", "content": [{"type": "text", "text": f"{zh}:fixed {words}."}]}
        lines.append({**base, "type": "assistant", "uuid": f, "timestamp": ts, "message": answer})
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))


def _codex_session(path: Path, n: int, turns: int, rng: random.Random) -> None:
    sid = f"0199{n:04x}-0000-7000-8000-{n:012x}"
    t0 = 1_764_000_000 + n * 10_000
    out = [{"timestamp": "2026-11-30T00:00:00.000Z", "type": "session_meta", "payload": {"id": sid, "cwd": "/home/bench"}}]
    for t in range(turns):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + t * 30))
        words = " ".join(rng.choice(WORDS) for _ in range(12))
        zh = rng.choice(ZH)

        def item(suffix: str, payload: dict[str, Any], ts: str = ts) -> dict[str, Any]:
            return {"timestamp": f"{ts}.{suffix}Z", "type": "response_item", "payload": payload}

        out.append(item("100", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"{zh} {words}"}]}))
        call = {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["ls"]}), "call_id": f"c{n}-{t}"}
        out.append(item("200", call))
        out.append(item("300", {"type": "function_call_output", "call_id": f"c{n}-{t}", "output": words}))
        reply = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"{zh}: {words}"}]}
        out.append(item("400", reply))
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in out))


def _cli(home: Path, *args: str, stdin: str | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "--home", str(home), *args, "--json"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{args[:2]} failed: {proc.stdout} {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def _p95(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.95) - 1] * 1000


async def _latency(
    home: Path, token: str, requests: list[tuple[str, dict[str, Any]]], rounds: int
) -> dict[str, dict[str, list[float]]]:
    from mcp import Client, StdioServerParameters

    env = dict(os.environ, MEMORIES_MCP_TOKEN=token)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "engine.cli", "--home", str(home), "mcp"], env=env, cwd=str(ROOT)
    )
    ipc = IpcClient(Paths(home).socket)
    ipc.connect()
    times: dict[str, dict[str, list[float]]] = {}
    async with Client(params, read_timeout_seconds=60) as client:
        for i in range(rounds):
            tool, args = requests[i % len(requests)]
            slot = times.setdefault(tool, {"ipc": [], "mcp": []})
            t = time.perf_counter()
            ipc.request({"op": tool, **args})
            slot["ipc"].append(time.perf_counter() - t)
            t = time.perf_counter()
            call = await client.call_tool(tool, args)
            slot["mcp"].append(time.perf_counter() - t)
            if call.is_error:
                raise SystemExit(f"{tool} failed over MCP: {call.content}")
    ipc.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(18)
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        root = Path(tmp)
        data = root / "sessions"
        (data / "claude").mkdir(parents=True)
        (data / "codex").mkdir()
        for n in range(args.sessions):
            if n % 5 == 4:
                _codex_session(data / "codex" / f"rollout-{n:04d}.jsonl", n, args.turns, rng)
            else:
                _claude_session(data / "claude" / f"{n:04d}.jsonl", n, args.turns, rng)
        size = sum(p.stat().st_size for p in data.rglob("*.jsonl"))
        home = root / "home"
        _cli(home, "init", "--password-stdin", stdin=PASSWORD + "\n")
        total_turns = args.sessions * args.turns
        t = time.perf_counter()
        first = _cli(home, "transcript", "import", str(data))
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        again = _cli(home, "transcript", "import", str(data))
        again_s = time.perf_counter() - t
        assert again["events_added"] == 0 and again["unchanged"] == args.sessions, again
        print(f"sessions {args.sessions}, turns {total_turns}, events {first['events_added']}, {size / 2**20:.1f} MiB of JSONL")
        print(f"import      {first_s:7.2f} s  {total_turns / first_s:8.0f} turns/s (whole CLI process)")
        print(f"re-import   {again_s:7.2f} s  ({again_s / first_s * 100:.1f} % of the first import; 0 events sent)")
        _cli(home, "sudo", "--password-stdin", stdin=PASSWORD + "\n")
        token = _cli(home, "mcp", "grant", "--name", "bench", "--scope", "read", "--transcripts")["token"]
        sessions = _cli(home, "transcript", "list", "--limit", "1000")["sessions"]
        requests: list[tuple[str, dict[str, Any]]] = []
        for s in rng.sample(sessions, min(20, len(sessions))):
            shown = _cli(home, "transcript", "show", s["session_uid"][:16], "--turn", str(rng.randint(1, s["turns"])))
            requests.append(("recall_turn", {"turn": shown["turns"][0]["turn_uid"], "before": 3, "after": 3}))
            requests.append(("recall_session", {"session": s["session_uid"], "offset": 0, "limit": 20}))
        times = asyncio.run(_latency(home, token, requests, args.rounds * 2))
        for tool, slot in times.items():
            ipc_p50, mcp_p50 = _p50(slot["ipc"]), _p50(slot["mcp"])
            goal = 1.5 * ipc_p50 + 2
            verdict = "meets" if mcp_p50 <= goal else "MISSES"
            print(
                f"{tool:<15} IPC p50 {ipc_p50:6.2f} ms p95 {_p95(slot['ipc']):6.2f} | MCP p50 {mcp_p50:6.2f} ms "
                f"p95 {_p95(slot['mcp']):6.2f} | ratio {mcp_p50 / ipc_p50:4.2f}x; goal ≤ {goal:.2f} ms: {verdict}"
            )
        subprocess.run([sys.executable, "-m", "engine.cli", "--home", str(home), "daemon", "stop"], capture_output=True, cwd=ROOT)


if __name__ == "__main__":
    main()
