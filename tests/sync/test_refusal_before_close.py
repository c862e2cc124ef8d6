"""A refusal that arrives just before the connection closes is still what the refused side
reports (issue 29: a revoked device through a relay sometimes heard "the connection broke").

Deterministic, over a real loopback WebSocket: the real listener (`SyncServer`) refuses the
peer in its own check and closes; the refused side is held in its own peer check (its
``LocalSide.check_peer``, the engine's seam for that blocking step) until the listener has
closed, so its next send meets a closed connection with the refusal frame unread. It must
report ``sync_unauthorized`` with the words, never ``sync_unreachable``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from engine.crypto.keys import new_identity
from engine.errors import MemoriesError
from engine.sync.transport import Limits, LocalSide, SessionResult, SyncServer, sync_with


def _side(check_peer: Any) -> LocalSide:
    identity = new_identity()
    return LocalSide(
        device_key=identity.device_key,
        exchange_key=identity.exchange_key,
        certificate=identity.certificate,
        certificate_sig=identity.certificate_sig,
        check_peer=check_peer,
        inventories=lambda peer: [],
        bundles=lambda peer, invs: [],
        merge=lambda peer, received: [],
    )


def test_the_refused_side_reports_the_refusal_even_after_the_connection_closed() -> None:
    listener_done = threading.Event()
    outcome: list[MemoriesError | None] = []

    def refuse(device: bytes, user: bytes) -> None:
        raise MemoriesError("sync_unauthorized", "The peer device is not authorized by this vault's current policy.")

    def on_result(peer: bytes | None, result: SessionResult | None, error: MemoriesError | None) -> None:
        outcome.append(error)
        listener_done.set()  # the listener's session is over: its connection is closed

    def held_until_closed(device: bytes, user: bytes) -> None:
        assert listener_done.wait(60), "the listener never finished its session"

    client = _side(held_until_closed)
    server = SyncServer(lambda token: bytes(client.device_pub), lambda: _side(refuse), Limits(), on_result)

    async def run() -> None:
        url = await server.start("127.0.0.1", 0, None)
        try:
            await sync_with(url, "any-token", client, Limits())
        finally:
            await server.stop()

    with pytest.raises(MemoriesError) as caught:
        asyncio.run(run())
    assert outcome and outcome[0] is not None and outcome[0].code == "sync_unauthorized"
    assert caught.value.code == "sync_unauthorized", caught.value.message
    assert "does not authorize this device" in caught.value.message
