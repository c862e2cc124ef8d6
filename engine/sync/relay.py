"""The relay (API-5, SY-4): forwards sealed frames between the two devices of a room.

``memories relay serve`` runs this in its own process: no vault, no keys, no disk. A room is
a high-entropy ID (≥ 128 bits, base64url) the two devices agree on; the first to join waits,
the second pairs the room: each gets ``{"t": "paired", "role": …}`` and from then on every
binary frame one sends is forwarded to the other, unchanged. Everything the devices exchange
after their hellos is already a signed envelope sealed to the peer device, so the relay
learns sizes and timing only (and the device keys in the two hellos). Bounds: frame size,
bytes per room, rooms at once, an idle deadline per room, and at most two participants.
It logs counts and sizes, never frames or room IDs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
import ssl
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from engine.crypto.canonical import canonical_bytes

__all__ = ["RelayLimits", "Relay", "ROOM_PATTERN", "serve_relay"]

log = logging.getLogger("memories.relay")

ROOM_PATTERN = re.compile(r"^[A-Za-z0-9_-]{22,128}$")  # ≥ 22 base64url characters: ≥ 128 bits


@dataclass(frozen=True)
class RelayLimits:
    frame_bytes: int = 4 * 1024 * 1024 + 64 * 1024
    room_bytes: int = 4 * 1024 * 1024 * 1024
    rooms: int = 256
    idle_seconds: float = 120.0
    wait_seconds: float = 600.0


@dataclass
class _Room:
    members: list[web.WebSocketResponse] = field(default_factory=list)
    paired: asyncio.Event = field(default_factory=asyncio.Event)
    forwarded: int = 0


class Relay:
    def __init__(self, limits: RelayLimits, token: str | None = None) -> None:
        self.limits = limits
        self._token_digest = hashlib.sha256(token.encode()).digest() if token else None
        self.rooms: dict[str, _Room] = {}
        self.runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024)
        app.router.add_get("/v1/relay/{room}", self._join)
        app.router.add_get("/v1/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "rooms": len(self.rooms)})

    @staticmethod
    def _refuse(status: int, code: str, message: str) -> web.Response:
        return web.json_response({"error": {"code": code, "message": message}}, status=status)

    def _authorized(self, request: web.Request) -> bool:
        if self._token_digest is None:
            return True
        header = request.headers.get("Authorization", "")
        given = header[7:].strip() if header[:7].lower() == "bearer " else ""
        return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), self._token_digest)

    async def _join(self, request: web.Request) -> web.StreamResponse:
        room_id = request.match_info["room"]
        if not self._authorized(request):
            return self._refuse(401, "sync_unauthorized", "The relay token is missing or wrong.")
        if not ROOM_PATTERN.match(room_id):
            return self._refuse(400, "invalid_input", "A room ID is 22-128 base64url characters (128 bits or more).")
        room = self.rooms.get(room_id)
        if room is None:
            if len(self.rooms) >= self.limits.rooms:
                return self._refuse(503, "sync_unreachable", "The relay has too many open rooms; try again later.")
            room = self.rooms[room_id] = _Room()
        elif len(room.members) >= 2:
            return self._refuse(409, "sync_unauthorized", "That room already has two devices.")
        ws = web.WebSocketResponse(max_msg_size=self.limits.frame_bytes, autoping=True)
        await ws.prepare(request)
        room.members.append(ws)
        log.info("relay join rooms=%d members=%d", len(self.rooms), len(room.members))
        try:
            if len(room.members) == 2:
                first, second = room.members
                await first.send_bytes(canonical_bytes({"t": "paired", "role": "r"}))
                await second.send_bytes(canonical_bytes({"t": "paired", "role": "i"}))
                room.paired.set()
            else:
                try:
                    await asyncio.wait_for(room.paired.wait(), self.limits.wait_seconds)
                except TimeoutError:
                    return ws
            other = next(m for m in room.members if m is not ws)
            await self._forward(ws, other, room)
        finally:
            with contextlib.suppress(Exception):
                await ws.close()
            for member in room.members:
                with contextlib.suppress(Exception):
                    await member.close()
            if self.rooms.get(room_id) is room:
                del self.rooms[room_id]
                log.info("relay room closed bytes=%d", room.forwarded)
        return ws

    async def _forward(self, source: web.WebSocketResponse, target: web.WebSocketResponse, room: _Room) -> None:
        while True:
            try:
                msg = await asyncio.wait_for(source.receive(), self.limits.idle_seconds)
            except TimeoutError:
                return
            if msg.type != WSMsgType.BINARY:
                return  # close, error, text: the room ends
            room.forwarded += len(msg.data)
            if room.forwarded > self.limits.room_bytes or target.closed:
                return
            try:
                await target.send_bytes(msg.data)
            except (ConnectionError, RuntimeError):
                return

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> str:
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=tls, reuse_address=True)
        await site.start()
        self.runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if tls else 'http'}://{shown}:{bound}"
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def serve_relay(
    host: str, port: int, tls: ssl.SSLContext | None, limits: RelayLimits, token: str | None, ready: asyncio.Event | None = None
) -> Relay:
    relay = Relay(limits, token)
    await relay.start(host, port, tls)
    if ready is not None:
        ready.set()
    return relay
