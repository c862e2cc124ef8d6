"""A loopback stand-in for a Center's ticket routes (docs/center.md, HTTP API version 1).

A real aiohttp server on 127.0.0.1 answering ``GET /v1/info`` and ``GET /v1/tickets/{id}``
with the protocol's JSON, and tickets issued with the real codec (``engine.center.tickets``)
under a real Ed25519 key: what a daemon in tickets mode talks to. The test decides what the
Center says (revoke a ticket, start a new generation, stop answering).
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from nacl.signing import SigningKey

from engine.center.tickets import issue_ticket, ticket_body
from engine.crypto.keys import fingerprint
from tests.helpers import free_port

HOUR_MS = 3600 * 1000


class TicketCenter:
    def __init__(self) -> None:
        self.signing_key = SigningKey.generate()
        self.generation = 1
        self.issued: dict[str, int] = {}  # ticket id -> its generation
        self.revoked: set[str] = set()
        self.asked: list[str] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- what the operator does ----------------------------------------------------------
    @property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @property
    def key_b64(self) -> str:
        return base64.b64encode(self.public_key).decode()

    def ticket(
        self,
        scope: str = "read",
        vaults: tuple[str, ...] = ("default",),
        *,
        name: str = "agent",
        kind: str = "grant",
        expires_ms: int | None = None,
        generation: int | None = None,
        device: str | None = None,
        key: SigningKey | None = None,
    ) -> str:
        ticket_id = os.urandom(16).hex()
        now = int(time.time() * 1000)
        signer = key or self.signing_key
        expires = expires_ms if expires_ms is not None else now + HOUR_MS
        body = ticket_body(
            kind=kind,
            ticket_id=ticket_id,
            center_public_key=bytes(signer.verify_key),
            generation=generation or self.generation,
            name=name,
            scope=scope,
            vaults=list(vaults),
            issued_ms=min(now, expires) - 60_000,
            expires_ms=expires,
            device=device,
        )
        self.issued[ticket_id] = body["generation"]
        return issue_ticket(signer, body)

    def revoke(self, ticket_text: str) -> None:
        self.revoked.add(ticket_id_of(ticket_text))

    def config(self, mode: str = "tickets", token_env: str | None = None) -> str:
        extra = f'token_env = "{token_env}"\n' if token_env else ""
        return f'[[centers]]\nurl = "{self.url}"\nkey = "{self.key_b64}"\nmode = "{mode}"\n{extra}'

    # -- the HTTP side -------------------------------------------------------------------
    async def _info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "service": "memories-center",
                "version": 1,
                "key": self.key_b64,
                "fingerprint": fingerprint(self.public_key),
                "generation": self.generation,
                "role": "primary",
                "locked": False,
                "encryption": "server-side",
            }
        )

    async def _ticket(self, request: web.Request) -> web.Response:
        ticket_id = request.match_info["ticket_id"]
        self.asked.append(ticket_id)
        if ticket_id not in self.issued:
            status = "unknown"
        elif ticket_id in self.revoked:
            status = "revoked"
        else:
            status = "valid"
        return web.json_response({"status": status, "generation": self.generation})

    def start(self) -> None:
        ready = threading.Event()
        app = web.Application()
        app.router.add_get("/v1/info", self._info)
        app.router.add_get("/v1/tickets/{ticket_id}", self._ticket)

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            self._runner = runner
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="ticket-center", daemon=True)
        self._thread.start()
        assert ready.wait(30), "the stand-in Center did not start"

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            self._loop = None


def ticket_id_of(text: str) -> str:
    import json

    body = text.split(".")[1]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    value: Any = json.loads(raw)
    return str(value["id"])


@contextmanager
def running_center() -> Iterator[TicketCenter]:
    center = TicketCenter()
    center.start()
    try:
        yield center
    finally:
        center.stop()
