"""The window stays current (SPEC DT-7): the engine's change feed relayed to the pages as server-sent events.

One reader per dashboard, on a daemon thread of its own, long-polls the engine's ``events`` op
while at least one page listens (so the engine holds one waiting request per dashboard, not
one per page or view). Each page's ``GET /api/events`` is a ``text/event-stream`` answer on the
same loopback origin, behind the same Host, Sec-Fetch-Site, Origin and bearer-token checks as
every other ``/api/`` route (the page reads it with ``fetch``, which can send the token header;
``EventSource`` cannot).

Back-pressure: each page has a small queue. A page that does not keep up (a background tab, a
slow machine) loses its queue and gets one ``resync`` event instead: it reloads what it shows.
So neither the engine nor the dashboard ever holds more than a bounded number of events for a
slow browser. Only allowlisted event types and fields pass (IDs, kinds, counts, fixed job
names), re-checked here, so a foreign engine cannot put text of its own into a page.

Also here: ``GET /api/attention``, the Needs-attention view's data (conflicts, quarantined
revisions, forks, cloud delivery gaps, a failed last sync, each with what to do).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from importlib import resources
from typing import Any

from aiohttp import web

from desktop.dashboard.security import harden
from desktop.gateway import EngineGateway
from desktop.status import sync_problem
from engine.errors import MemoriesError

__all__ = ["LiveRelay", "register", "clean_event", "MAX_PAGES", "PAGE_QUEUE"]

MAX_PAGES = 8  # event streams open at once (tabs); one more is refused as busy
PAGE_QUEUE = 64  # events a page may lag behind before it is told to resync
WAIT_MS = 20_000  # one engine read waits this long for news
HEARTBEAT_S = 15.0  # a comment line this often, so a closed tab is noticed
RETRY_S = 1.0  # after the engine could not be read (not running, restarting, busy)

_HEX = re.compile(r"^[0-9a-f]{8,64}$")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_FIELDS: dict[str, dict[str, str]] = {
    "item": {"change": "name", "id": "hex", "vault": "hex", "kind": "name", "revision": "hex", "conflict": "bool"},
    "items": {"count": "int", "vaults": "hexes", "kinds": "names"},
    "counts": {"vaults": "hexes"},
    "attention": {
        "conflicts": "int",
        "quarantined": "int",
        "forks": "int",
        "not_arriving": "int",
        "not_taken": "int",
        "reasons": "names",
    },
    "job": {"job": "name", "state": "name", "done": "int", "total": "int"},
    "session": {"state": "name"},
    "tickets": {"pending": "int"},
}


def _valid(kind: str, value: Any) -> bool:
    if kind == "hex":
        return isinstance(value, str) and bool(_HEX.match(value))
    if kind == "name":
        return isinstance(value, str) and bool(_NAME.match(value))
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**12
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("hexes", "names"):
        inner = "hex" if kind == "hexes" else "name"
        return isinstance(value, list) and len(value) <= 64 and all(_valid(inner, v) for v in value)
    return False


def clean_event(raw: Any) -> dict[str, Any] | None:
    """An engine event reduced to its allowlisted fields; None for an unknown type."""
    if not isinstance(raw, dict):
        return None
    fields = _FIELDS.get(str(raw.get("type")))
    if fields is None:
        return None
    out: dict[str, Any] = {"type": raw["type"]}
    for name, kind in fields.items():
        if name in raw and _valid(kind, raw[name]):
            out[name] = raw[name]
    return out


class _Page:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=PAGE_QUEUE)

    def offer(self, event: dict[str, Any] | None) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            # Too far behind: drop what it has not read and tell it to read everything again.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait({"type": "resync", "why": "behind"})


class LiveRelay:
    """The one engine reader and the pages it feeds."""

    def __init__(self, gateway: EngineGateway) -> None:
        self.gateway = gateway
        self.pages: set[_Page] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()

    # -- the reader thread ---------------------------------------------------------------------
    def _ensure_reader(self) -> None:
        with self._lock:
            if self._reader is not None:
                return  # running: it sees the new page at its next turn
            self._reader = threading.Thread(target=self._read_loop, name="memories-dashboard-events", daemon=True)
            self._reader.start()

    def _listening(self) -> bool:
        return bool(self.pages) and not self._closed.is_set()

    def _read_loop(self) -> None:
        after: int | None = None
        stream: str | None = None
        reachable = True
        while True:
            with self._lock:  # decided under the lock that _ensure_reader takes: no page is left unread
                if not self._listening():
                    self._reader = None
                    return
            try:
                feed = self.gateway.events(after, stream, WAIT_MS)
            except (MemoriesError, OSError):
                if reachable:
                    self._send({"type": "engine", "state": "unreachable"})
                reachable = False
                after = stream = None
                self._closed.wait(RETRY_S)
                continue
            if not reachable or feed.get("resync") or (stream is not None and feed.get("stream") != stream):
                self._send({"type": "resync", "why": "engine"})
            reachable = True
            for raw in feed.get("events", []) if isinstance(feed.get("events"), list) else []:
                event = clean_event(raw)
                if event is not None:
                    self._send(event)
            seq, new_stream = feed.get("seq"), feed.get("stream")
            after = seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None
            stream = new_stream if isinstance(new_stream, str) and len(new_stream) == 16 else None

    def _send(self, event: dict[str, Any] | None) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self._broadcast, event)

    def _broadcast(self, event: dict[str, Any] | None) -> None:
        for page in list(self.pages):
            page.offer(event)

    # -- the pages -----------------------------------------------------------------------------
    async def stream(self, request: web.Request) -> web.StreamResponse:
        if len(self.pages) >= MAX_PAGES:
            raise MemoriesError("busy", "Too many dashboard tabs are listening for changes; close one.")
        self._loop = asyncio.get_running_loop()
        page = _Page()
        self.pages.add(page)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
        harden(response)  # the headers go out with prepare(), before the middleware sees the answer
        try:
            await response.prepare(request)
            self._ensure_reader()
            await response.write(_frame({"type": "hello"}))
            while not self._closed.is_set():
                try:
                    event = await asyncio.wait_for(page.queue.get(), timeout=HEARTBEAT_S)
                except TimeoutError:
                    await response.write(b": still here\n\n")
                    continue
                if event is None:
                    break
                await response.write(_frame(event))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.pages.discard(page)
        return response

    def close(self) -> None:
        """The dashboard is stopping: end every stream now (a server waits for open answers)."""
        self._closed.set()
        for page in list(self.pages):
            with contextlib.suppress(asyncio.QueueFull):
                page.queue.put_nowait(None)


def _frame(event: dict[str, Any]) -> bytes:
    name = str(event.get("type", "message"))
    return f"event: {name}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _attention_view(raw: dict[str, Any]) -> dict[str, Any]:
    """The attention answer with only the fields the view shows (the engine's are re-checked)."""
    conflicts = []
    for item in raw.get("conflicts", [])[:500]:
        if not isinstance(item, dict) or not _valid("hex", item.get("id")):
            continue
        conflicts.append(
            {
                "id": item["id"],
                "short_id": str(item.get("short_id", ""))[:32],
                "kind": str(item.get("kind", ""))[:32],
                "title": str(item.get("title", ""))[:300],
                "versions": int(item.get("versions", 2)),
                "changed_ms": int(item.get("changed_ms", 0)),
                "resolve_here": bool(item.get("resolve_here")),
                "command": str(item.get("command", ""))[:200],
            }
        )
    quarantine = _mapping(raw.get("quarantine"))
    delivery = _mapping(raw.get("cloud_delivery"))
    forks = _mapping(raw.get("forks"))
    return {
        "conflicts": conflicts,
        "quarantine": {
            "count": int(quarantine.get("count", 0)),
            "reasons": [
                {"reason": str(r.get("reason", ""))[:200], "count": int(r.get("count", 0))}
                for r in quarantine.get("reasons", [])[:20]
                if isinstance(r, dict)
            ],
        },
        "forks": {"count": int(forks.get("count", 0))},
        "cloud_delivery": {"not_arriving": int(delivery.get("not_arriving", 0)), "not_taken": int(delivery.get("not_taken", 0))},
    }


def register(app: web.Application, ctx: Any) -> LiveRelay:
    relay = LiveRelay(ctx.gateway)
    script = (resources.files("desktop.dashboard") / "static" / "live.js").read_bytes()

    async def serve_script(request: web.Request) -> web.Response:
        return web.Response(body=script, content_type="text/javascript", charset="utf-8")

    async def attention(request: web.Request) -> web.Response:
        raw = await ctx.engine(ctx.gateway.attention)
        synced = await ctx.engine(ctx.gateway.sync_status)
        # The last `memories sync` session ended in an error or left a vault unmerged (the
        # tray's badge says the same): only the fact, never the peer's address or the error text.
        return web.json_response({**_attention_view(raw), "sync_failed": sync_problem(synced)})

    async def on_shutdown(app: web.Application) -> None:
        relay.close()

    app.router.add_get("/static/live.js", serve_script)
    app.router.add_get("/api/events", relay.stream)
    app.router.add_get("/api/attention", attention)
    app.on_shutdown.append(on_shutdown)
    return relay
