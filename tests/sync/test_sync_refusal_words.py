"""Refusals that say what happened and what to do (issue 29).

A revoked device syncing through a relay, and a device using a token made for another device,
are told `sync_unauthorized` with a sentence naming both causes and the way out, instead of
"failed authentication (format)" or the bare code. Real daemons, a real relay process.
"""

from __future__ import annotations

import json
import secrets

from tests.helpers import Cli
from tests.sync.support import C_PASSWORD, Listener, add_device, free_port, sync, sync_err, token_for
from tests.sync.test_relay import _relay_sync, _start_relay


def test_a_revoked_device_through_a_relay_is_told_it_is_not_authorized(pair: tuple[Cli, Cli]) -> None:
    a, b = pair
    a.sudo()
    a.ok("device", "revoke", "laptop")
    relay, url = _start_relay(free_port())
    try:
        room = secrets.token_hex(16)
        first, second = _relay_sync(a, url, room), _relay_sync(b, url, room)
        outs = [proc.communicate(timeout=120) for proc in (first, second)]
    finally:
        relay.terminate()
        relay.wait(30)
        for stream in (relay.stdout, relay.stderr):
            if stream is not None:
                stream.close()
    error = json.loads(outs[1][0])["error"]
    # Never "failed authentication (format)", and never "the connection broke": the relay
    # closes the revoked device's connection right after forwarding the refusal, often while
    # that device is still sending its inventory; the refusal already received is what it reports.
    assert error["code"] == "sync_unauthorized", outs
    assert "format" not in error["message"]
    assert "does not authorize this device" in error["message"] and "ask the peer's Owner" in error["message"]
    assert json.loads(outs[0][0])["error"]["code"] == "sync_unauthorized"


def test_a_token_used_by_another_device_says_so(pair: tuple[Cli, Cli]) -> None:
    a, b = pair
    c = Cli(home=b.home.parent / "c")
    try:
        add_device(a, c, "desktop", C_PASSWORD)
        token = token_for(a, c)  # made for C, used by B
        with Listener(a, free_port()).start() as listener:
            error = sync_err(b, listener.url, token)
            sync(c, listener.url, token)
        assert error["code"] == "sync_unauthorized"
        assert "token was made for another device" in error["message"]
        # `serve` printed one line per session: the refused one and the completed one.
        lines = [line for line in listener.stderr_text.splitlines() if line.startswith("session with device")]
        assert len(lines) == 2, listener.stderr_text
        assert "refused [sync_unauthorized]" in lines[0] and "revisions here" in lines[1]
    finally:
        c.stop()
