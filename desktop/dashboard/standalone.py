"""`memories dashboard`: the dashboard and the prober without an icon (headless machines, tests)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import webbrowser
from pathlib import Path
from typing import TextIO

from desktop.dashboard.routes import DashboardContext
from desktop.dashboard.server import DashboardServer
from desktop.gateway import EngineGateway, lock_quietly
from desktop.prober import DEFAULT_DEADLINE, DEFAULT_INTERVAL, ProbeWorker
from engine.config import Paths

__all__ = ["run_dashboard"]


def run_dashboard(
    home: Path,
    *,
    port: int = 0,
    open_browser: bool = True,
    probe_interval: float = DEFAULT_INTERVAL,
    probe_deadline: float = DEFAULT_DEADLINE,
    json_output: bool = False,
    out: TextIO = sys.stdout,
    lock_on_quit: bool = True,
) -> int:
    """Serve until Ctrl-C or SIGTERM (a logout sends it); then lock the vault unless ``lock_on_quit`` is off."""
    prober = ProbeWorker(home, interval=probe_interval, deadline=probe_deadline)
    ctx = DashboardContext(prober, EngineGateway(Paths(home).socket), mode="dashboard", backend="none")
    server = DashboardServer(ctx, port)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        # SIGHUP and SIGTERM are what a logout sends: they end the dashboard like Ctrl-C (and lock).
        for signum in (signal.SIGTERM, signal.SIGINT, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])):
            loop.add_signal_handler(signum, server.stop)
        serving = asyncio.create_task(server.serve())
        while server.port is None and not serving.done():
            await asyncio.sleep(0.01)
        if serving.done():
            await serving  # raises the bind error
            return
        if json_output:
            print(json.dumps({"url": server.url, "port": server.port}), file=out, flush=True)
        else:
            print(f"Dashboard: {server.url}", file=out, flush=True)
            print("The link carries a one-time token; keep it private. Ctrl-C stops.", file=out, flush=True)
        if open_browser:
            await loop.run_in_executor(None, webbrowser.open, server.url)
        await serving

    prober.start()
    try:
        asyncio.run(main())
    finally:
        prober.stop(join_timeout=0)
        if lock_on_quit:
            lock_quietly(ctx.gateway)
    return 0
