"""A private asyncio event loop in a daemon thread for all remote I/O.

Op handlers run in the daemon's worker threads; they submit coroutines here and
wait with a deadline. Keeping remote I/O on its own loop means a slow upstream
never stalls the IPC server's loop, and lock can cancel and *await* every
session and proxy worker from any thread (PX-4).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from engine.errors import MemoriesError

__all__ = ["Runtime"]

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed: its C transports and TLS cut the proxies' per-packet cost
    (bench/proxy.py: pgbench ratio 0.48 → 0.67, redis GET 0.18 → 0.73 on the 2-core box).
    ``MEMORIES_REMOTE_LOOP=asyncio`` selects the standard loop (e.g. to rule uvloop out)."""
    if os.environ.get("MEMORIES_REMOTE_LOOP") != "asyncio":
        try:
            import uvloop
        except ImportError:  # Windows, or not installed: the standard loop works the same, slower
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class Runtime:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None:
                loop = _new_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                # daemon=True: service shutdown must not wait on a stuck upstream socket.
                thread = threading.Thread(target=run, name="memories-remote", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the remote loop and wait; a deadline cancels it and raises ``timeout``."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise MemoriesError("timeout", "The remote operation did not finish in time.") from None
