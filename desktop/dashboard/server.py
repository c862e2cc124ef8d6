"""The loopback dashboard server: 127.0.0.1 only, random port, per-launch token (DT-5).

Runs its own asyncio loop, either on the calling thread (`memories dashboard`) or on a
daemon thread next to the tray's main-thread icon (`memories tray`), so neither the icon
nor the engine can block it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from aiohttp import web

from desktop.dashboard.routes import DashboardContext, build_app
from desktop.dashboard.security import Guard, new_token

__all__ = ["DashboardServer"]

LOOPBACK = "127.0.0.1"


class DashboardServer:
    def __init__(self, ctx: DashboardContext, port: int = 0) -> None:
        self.ctx = ctx
        self.requested_port = port
        self.token = new_token()
        self.guard = Guard(self.token)
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        # The token travels in the fragment: browsers never send it to a server or a log.
        return f"http://{LOOPBACK}:{self.port}/#{self.token}"

    async def serve(self) -> None:
        """Bind, mark ready, and serve until ``stop()``."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        runner = web.AppRunner(build_app(self.ctx, self.guard.middleware), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, LOOPBACK, self.requested_port, reuse_address=False)
            await site.start()
            self.port = int(runner.addresses[0][1])
            self.guard.port = self.port
            self._ready.set()
            await self._stopped.wait()
        finally:
            await runner.cleanup()
            self.ctx.executor.shutdown(wait=False, cancel_futures=True)

    def start_in_thread(self, timeout: float = 10.0) -> None:
        def run() -> None:
            try:
                asyncio.run(self.serve())
            except BaseException as exc:  # reported to the starting thread
                self._error = exc
                self._ready.set()

        self._thread = threading.Thread(target=run, name="memories-dashboard", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the dashboard did not start")
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
