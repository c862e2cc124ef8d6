"""Each refusal of the sync handshake and channel (engine/sync/transport.py) proved by its own check
(SY-4, API-4, ID-2).

Issue 27, "Tests that notice a removed check". A lying peer's hello, auth and sealed frames
cannot be made by an honest engine, so these tests drive the real :func:`run_session` of
device A (its real :class:`LocalSide`, built by the sync handler from a real unlocked Service)
against a scripted peer over an in-memory channel; the peer's frames are made with the real
protocol pieces and real keys of the devices it impersonates. Each test asserts the sentence
of the check that refused, since several share ``sync_unauthorized``. The revoked listener is
tested with real daemons and a real `memories serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.envelope import open_envelope, seal_envelope
from engine.crypto.keys import CERT_TAG, certificate_body, sign
from engine.errors import MemoriesError
from engine.service.handlers import sync as sync_handlers
from engine.sync import pages
from engine.sync.transport import (
    PROTOCOL,
    PROTOCOL_MAX,
    PURPOSE,
    Limits,
    SessionResult,
    _busy,
    _negotiated,
    _receive,
    _Sealed,
    _transcript,
    run_session,
)
from tests.helpers import PASSWORD, Cli
from tests.sync.merge_support import Device, first_device, join
from tests.sync.support import C_PASSWORD, Listener, add_device, device_id, free_port, make_pair, sync, sync_err, token_for

LIMITS = Limits(message_seconds=30.0, session_seconds=60.0)


class _Pipe:
    """One end of an in-memory, message-preserving channel (the :class:`Channel` protocol)."""

    def __init__(self, inbox: asyncio.Queue[bytes | None], outbox: asyncio.Queue[bytes | None]) -> None:
        self.inbox, self.outbox = inbox, outbox
        self.sent_bytes = 0
        self.received_bytes = 0

    async def send(self, data: bytes) -> None:
        self.sent_bytes += len(data)
        await self.outbox.put(data)

    async def recv(self, timeout: float) -> bytes:
        try:
            data = await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            raise MemoriesError("sync_timeout", "nothing came") from None
        if data is None:
            raise MemoriesError("sync_unreachable", "The peer closed the connection before the sync finished.")
        self.received_bytes += len(data)
        return data

    async def close(self) -> None:
        await self.outbox.put(None)


Script = Callable[[_Pipe], Awaitable[None]]


def _session(device: Device, script: Script, *, initiator: bool = False) -> MemoriesError:
    """Run A's real session against ``script``; A's typed error (the test fails if A succeeds)."""
    if not hasattr(device.service, "sync_manager"):
        sync_handlers.install(device.service)
    local = sync_handlers._local_side(device.service, device.caller)

    async def both() -> MemoriesError:
        one: asyncio.Queue[bytes | None] = asyncio.Queue()
        two: asyncio.Queue[bytes | None] = asyncio.Queue()
        peer = asyncio.ensure_future(script(_Pipe(two, one)))
        try:
            await run_session(_Pipe(one, two), local, initiator=initiator, limits=LIMITS)
        except MemoriesError as exc:
            return exc
        finally:
            peer.cancel()
            await asyncio.gather(peer, return_exceptions=True)
        raise AssertionError("A's session succeeded against a lying peer")

    return asyncio.run(both())


def _hello(device: bytes, cert: dict[str, Any], cert_sig: bytes, nonce: bytes | None = None) -> dict[str, Any]:
    return {"t": "hello", "v": PROTOCOL, "device": device, "cert": cert, "cert_sig": cert_sig, "nonce": nonce or os.urandom(32)}


def _own_hello(device: Device) -> dict[str, Any]:
    identity = device.state.identity
    return _hello(identity.device_pub, identity.certificate, identity.certificate_sig)


async def _expect(pipe: _Pipe, kind: str) -> dict[str, Any]:
    obj = decode_canonical(await pipe.recv(30))
    assert isinstance(obj, dict) and obj.get("t") == kind, obj
    return obj


@pytest.fixture
def trio(tmp_path: Path) -> tuple[Device, Device, Device]:
    a = first_device(tmp_path / "a")
    return a, join(a, tmp_path / "b", "b"), join(a, tmp_path / "c", "c")


def test_a_hello_whose_certificate_names_another_device_is_refused(trio: tuple[Device, Device, Device]) -> None:
    """ID-2/API-4: C presents B's real certificate (valid user signature) beside its own device key
    and signs the transcript with its own key: refused because the certificate names another device."""
    a, b, c = trio
    cert = b.state.identity

    async def liar(pipe: _Pipe) -> None:
        mine = _hello(c.device_pub, cert.certificate, cert.certificate_sig)
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(c.state.identity.device_key, _transcript(mine, theirs))}))
        await pipe.recv(30)

    err = _session(a, liar)
    assert err.code == "sync_unauthorized" and "does not name its device" in err.message, err.message


def test_a_hello_with_a_forged_certificate_signature_is_refused(trio: tuple[Device, Device, Device]) -> None:
    """ID-2/API-4: a new device key with a certificate naming A's user but signed by the device key
    itself (not the user key): refused because the certificate is not signed by its user."""
    a, _, _ = trio
    key, exchange = SigningKey.generate(), PrivateKey.generate()
    device = bytes(key.verify_key)
    cert = certificate_body(a.state.identity.user_pub, device, bytes(exchange.public_key), 1_700_000_000_000)
    forged = sign(key, domain_bytes(CERT_TAG, 1, cert))

    async def liar(pipe: _Pipe) -> None:
        mine = _hello(device, cert, forged)
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(key, _transcript(mine, theirs))}))
        await pipe.recv(30)

    err = _session(a, liar)
    assert err.code == "sync_unauthorized" and "not signed by its user" in err.message, err.message


def test_a_transcript_signature_from_another_session_proves_nothing(trio: tuple[Device, Device, Device]) -> None:
    """API-4: an eavesdropper replays B's public hello and B's real auth signature of an earlier
    session (other nonces): it proves nothing about this session, and A refuses before sealing
    anything to B's key."""
    a, b, _ = trio
    old = _transcript(_own_hello(a), _own_hello(b))  # a session B really ran, with its own nonces
    captured = sign(b.state.identity.device_key, old)

    async def replay(pipe: _Pipe) -> None:
        await pipe.send(canonical_bytes(_own_hello(b)))
        await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": captured}))
        await pipe.recv(30)

    err = _session(a, replay)
    assert err.code == "sync_unauthorized" and "did not prove it holds its device key" in err.message, err.message


def test_a_sealed_message_from_a_third_device_is_refused(trio: tuple[Device, Device, Device]) -> None:
    """ID-2: in A's session with B, an inventory sealed to A by C (another authorized device of the
    same user, so the envelope's own signature verifies) is refused: only B may speak in it."""
    a, b, c = trio
    exchange = bytes(a.state.identity.exchange_key.public_key)

    async def b_then_c(pipe: _Pipe) -> None:
        mine = _own_hello(b)
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(b.state.identity.device_key, _transcript(mine, theirs))}))
        await _expect(pipe, "auth")
        await pipe.recv(30)  # A's sealed inventory
        frame = canonical_bytes({"t": "inv", "vaults": []}) + b"\n"
        await pipe.send(seal_envelope(c.state.identity.device_key, exchange, frame, purpose=PURPOSE))
        await pipe.recv(30)

    err = _session(a, b_then_c)
    assert err.code == "sync_rejected" and "failed authentication" in err.message, err.message


def test_a_session_reflected_back_to_its_own_device_is_refused(trio: tuple[Device, Device, Device]) -> None:
    """API-4: a man in the middle sends A's own hello and auth straight back to A. Every signature
    verifies (they are A's) and A is authorized, so only the "peer is this very device" check
    stops A from syncing with itself through the attacker."""
    a, _, _ = trio

    async def mirror(pipe: _Pipe) -> None:
        hello = await pipe.recv(30)
        await pipe.send(hello)
        auth = await pipe.recv(30)
        await pipe.send(auth)
        await pipe.recv(30)

    err = _session(a, mirror)
    assert err.code == "sync_unauthorized" and "this very device" in err.message, err.message


def test_a_session_with_the_true_peer_gets_past_every_check(trio: tuple[Device, Device, Device]) -> None:
    """The scripted peer itself is sound: B's true hello, auth and a sealed inventory from B pass
    every check above, so A's session fails only when the script stops (the peer hangs up)."""
    a, b, _ = trio
    exchange = bytes(a.state.identity.exchange_key.public_key)

    async def honest(pipe: _Pipe) -> None:
        mine = _own_hello(b)
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(b.state.identity.device_key, _transcript(mine, theirs))}))
        await _expect(pipe, "auth")
        await pipe.recv(30)
        frame = canonical_bytes({"t": "inv", "vaults": []}) + b"\n"
        await pipe.send(seal_envelope(b.state.identity.device_key, exchange, frame, purpose=PURPOSE))
        await pipe.close()

    err = _session(a, honest)
    assert err.code == "sync_unreachable", err.message


# -- real daemons: the initiator checks the listener ---------------------------------------------------


@pytest.fixture
def three(tmp_path: Path) -> Any:
    a, b = make_pair(tmp_path)
    c = Cli(home=tmp_path / "c")
    add_device(a, c, "third", C_PASSWORD)
    yield a, b, c
    for cli in (a, b, c):
        cli.stop()


def test_an_initiator_refuses_a_listener_its_policy_revoked(three: tuple[Cli, Cli, Cli]) -> None:
    """SY-2/API-4: C serves with a token for B; A revokes C and B hears of it; B then connects to
    C's listener (C, not having heard, accepts B's token): B itself refuses the revoked listener
    in the handshake, sync_unauthorized, and nothing of C's reaches B."""
    a, b, c = three
    c.put("written on the revoked device", "c")
    token = token_for(c, b, C_PASSWORD)
    a.sudo(PASSWORD)
    a.ok("device", "revoke", "third")
    with Listener(a, free_port()).start() as on_a:
        assert sync(b, on_a.url, token_for(a, b))["synced"] is True
    assert next(d for d in b.ok("devices")["devices"] if d["device_id"] == device_id(c))["revoked"] is True
    with Listener(c, free_port()).start() as on_c:
        error = sync_err(b, on_c.url, token)
    assert error["code"] == "sync_unauthorized", error
    assert "not authorized by this vault's current policy" in error["message"], error
    assert "written on the revoked device" not in {row["title"] for row in b.ok("list", "--all")["items"]}


# -- protocol versions (issue 32: inventories in pages from protocol 2 on) -------------------------------


def _run(device: Device, script: Script, limits: Limits = LIMITS) -> Any:
    """A's real session (A the responder) against ``script``: its SessionResult or its typed error."""
    if not hasattr(device.service, "sync_manager"):
        sync_handlers.install(device.service)
    local = sync_handlers._local_side(device.service, device.caller)

    async def both() -> Any:
        one: asyncio.Queue[bytes | None] = asyncio.Queue()
        two: asyncio.Queue[bytes | None] = asyncio.Queue()
        peer = asyncio.ensure_future(script(_Pipe(two, one)))
        try:
            return await run_session(_Pipe(one, two), local, initiator=False, limits=limits)
        except MemoriesError as exc:
            return exc
        finally:
            peer.cancel()
            await asyncio.gather(peer, return_exceptions=True)

    return asyncio.run(both())


def _old_peer(b: Device, a: Device, seen: list[dict[str, Any]]) -> Script:
    """B as an engine from before protocol 2: a hello without "vmax", the protocol 1 transcript,
    one "inv" message; every sealed header A sends is kept in ``seen``."""
    a_device, a_exchange = a.device_pub, bytes(a.state.identity.exchange_key.public_key)
    key = b.state.identity.device_key

    def seal(header: dict[str, Any]) -> bytes:
        return seal_envelope(key, a_exchange, canonical_bytes(header) + b"\n", purpose=PURPOSE)

    async def recv_sealed(pipe: _Pipe) -> dict[str, Any]:
        opened = open_envelope(b.state.identity.exchange_key, await pipe.recv(30), purpose=PURPOSE, expected_sender=a_device)
        header = decode_canonical(opened.payload.partition(b"\n")[0])
        assert isinstance(header, dict)
        seen.append(header)
        return header

    async def script(pipe: _Pipe) -> None:
        mine = _own_hello(b)
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        assert theirs["v"] == PROTOCOL and theirs["vmax"] == PROTOCOL_MAX
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(key, _transcript(mine, theirs))}))
        await _expect(pipe, "auth")
        if (await recv_sealed(pipe))["t"] != "inv":
            return
        await pipe.send(seal({"t": "inv", "vaults": []}))
        while (await recv_sealed(pipe))["t"] == "chunk":
            pass
        await pipe.send(seal({"t": "done", "chunks": 0}))
        await recv_sealed(pipe)  # A's report
        await pipe.send(seal({"t": "report", "vaults": []}))

    return script


def test_a_peer_from_before_protocol_2_still_syncs_with_one_inventory_message(trio: tuple[Device, Device, Device]) -> None:
    """SY-4 (issue 32): an engine that offers no "vmax" speaks protocol 1: A signs the protocol 1
    transcript, sends its inventory as one "inv" message (with its revision IDs) and no page, and
    the session completes."""
    a, b, _ = trio
    a.put("a note for the old peer", "body")
    seen: list[dict[str, Any]] = []
    result = _run(a, _old_peer(b, a, seen))
    assert not isinstance(result, MemoriesError), result
    assert result.protocol == 1 and result.inventory_pages_sent == 0
    assert seen[0]["t"] == "inv" and len(seen[0]["vaults"]) == 1 and seen[0]["vaults"][0]["revision_ids"]
    assert not any(header["t"].endswith("_page") for header in seen)
    assert seen[-1]["t"] == "report"


def test_an_inventory_too_large_for_a_protocol_1_peer_is_refused_by_name(trio: tuple[Device, Device, Device]) -> None:
    """SY-4 (issue 32): with a peer from before protocol 2, an inventory that does not fit one frame
    (here a frame of 4 KiB; in real use a vault of ~79k IDs) is sync_invalid with a sentence that
    says to update the peer, before anything is merged; the old peer gets no inventory."""
    a, b, _ = trio
    for i in range(80):
        a.put(f"note {i}", "body")
    seen: list[dict[str, Any]] = []
    err = _run(a, _old_peer(b, a, seen), Limits(frame_bytes=4096, message_seconds=30.0, session_seconds=60.0))
    assert isinstance(err, MemoriesError)
    assert err.code == "sync_invalid" and "before sync protocol 2" in err.message and "Update Memories" in err.message
    assert not any(header["t"] == "inv" for header in seen)


def test_a_stripped_version_offer_fails_the_handshake(trio: tuple[Device, Device, Device]) -> None:
    """API-4 (issue 32): a man in the middle removes "vmax" from A's hello, so that B believes A
    speaks protocol 1 and signs that transcript, hoping to force single-message inventories. A
    saw B offer protocol 2, so A checks B's signature over the protocol 2 transcript (both offers
    included) and refuses before sealing anything to B."""
    a, b, _ = trio
    key = b.state.identity.device_key

    async def downgraded(pipe: _Pipe) -> None:
        mine = {**_own_hello(b), "vmax": PROTOCOL_MAX}
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        stripped = {k: v for k, v in theirs.items() if k != "vmax"}  # what B received
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(key, _transcript(mine, stripped, _negotiated(stripped)))}))
        await pipe.recv(30)

    err = _run(a, downgraded)
    assert isinstance(err, MemoriesError)
    assert err.code == "sync_unauthorized" and "did not prove it holds its device key" in err.message, err.message


def test_a_busy_side_keeps_a_protocol_2_peer_waiting_past_the_message_deadline(trio: tuple[Device, Device, Device]) -> None:
    """SY-4 (issue 32): a first sync of 100k items builds and merges for minutes, longer than the
    per-message deadline. Under protocol 2 a side busy in such a step sends sealed "wait" messages
    every quarter of that deadline, and the peer's receive skips them: here A's step ends only
    once B has skipped two of them, and B, waiting at most one deadline for each message, then
    gets the message that follows the step."""
    a, b, _ = trio
    limits = Limits(message_seconds=8.0, session_seconds=60.0)
    b_exchange = bytes(b.state.identity.exchange_key.public_key)
    for device in (a, b):
        if not hasattr(device.service, "sync_manager"):
            sync_handlers.install(device.service)
    a_local = sync_handlers._local_side(a.service, a.caller)
    b_local = sync_handlers._local_side(b.service, b.caller)
    skipped = threading.Event()

    def long_step() -> str:
        assert skipped.wait(60), "B never skipped two wait messages"
        return "done"

    async def both() -> tuple[str, dict[str, Any], int]:
        one: asyncio.Queue[bytes | None] = asyncio.Queue()
        two: asyncio.Queue[bytes | None] = asyncio.Queue()
        a_pipe, b_pipe = _Pipe(one, two), _Pipe(two, one)
        a_sealed = _Sealed(a_local, b.device_pub, b_exchange)
        b_sealed = _Sealed(b_local, a.device_pub, bytes(a.state.identity.exchange_key.public_key))
        a_result, b_result = SessionResult(b.device_pub, protocol=2), SessionResult(a.device_pub, protocol=2)

        async def a_side() -> str:
            out: str = await _busy(a_pipe, a_sealed, a_result, limits, long_step)
            await a_pipe.send(a_sealed.seal({"t": "report", "vaults": []}))
            return out

        async def b_side() -> tuple[dict[str, Any], int]:
            waits = 0
            while waits < 2:  # what _receive skips, seen one by one
                header, _ = b_sealed.open(await b_pipe.recv(limits.message_seconds))
                assert header["t"] == "wait", header
                waits += 1
            skipped.set()
            header, _ = await _receive(b_pipe, b_sealed, b_result, limits.message_seconds)
            return header, waits

        step, (header, waits) = await asyncio.gather(a_side(), b_side())
        return step, header, waits

    step, header, waits = asyncio.run(both())
    assert step == "done" and header["t"] == "report" and waits == 2


def _chunk_peer(b: Device, a: Device, vmax: int, header: dict[str, Any], data: bytes, sent: list[bytes] | None = None) -> Script:
    """B offering protocol ``vmax``: a true handshake and an empty inventory in one page, then one
    bundle chunk with ``header`` and ``data``, sealed by B's real keys. ``sent``: gets the opened
    payload of every sealed frame A sends after the handshake."""
    a_exchange = bytes(a.state.identity.exchange_key.public_key)
    key = b.state.identity.device_key

    def seal(head: dict[str, Any], payload: bytes = b"") -> bytes:
        return seal_envelope(key, a_exchange, canonical_bytes(head) + b"\n" + payload, purpose=PURPOSE)

    async def script(pipe: _Pipe) -> None:
        mine = {**_own_hello(b), "vmax": vmax}
        await pipe.send(canonical_bytes(mine))
        theirs = await _expect(pipe, "hello")
        await pipe.send(canonical_bytes({"t": "auth", "sig": sign(key, _transcript(mine, theirs, _negotiated(mine)))}))
        await _expect(pipe, "auth")
        slices = pages.paginate([], pages.MAX_PAGE_BYTES)
        for index, page in enumerate(slices):
            await pipe.send(seal({"t": "inv_page", "i": index, "n": len(slices)}, page))
        await pipe.send(seal(header, data))
        while True:  # A's pages and chunks, until A ends the session
            frame = await pipe.recv(30)
            if sent is not None:
                with contextlib.suppress(Exception):  # A's refusal, in clear, is no envelope
                    sent.append(open_envelope(b.state.identity.exchange_key, frame, purpose=PURPOSE).payload)

    return script


_BOMB_LIMITS = Limits(frame_bytes=256 * 1024, message_seconds=30.0, session_seconds=60.0)


@pytest.mark.parametrize(
    ("vmax", "z", "data", "sentence"),
    [
        # ~256 bytes that inflate past a frame: refused before more than a frame is ever held
        (3, 1, zlib.compress(bytes(_BOMB_LIMITS.frame_bytes + 1), 9), "larger than a frame"),
        (3, 1, zlib.compress(b"MEMSYNC\x01" * 100)[:-3], "cut short"),
        (3, 1, zlib.compress(b"MEMSYNC\x01" * 100) + b"more", "bytes after it"),
        (3, 1, b"not a zlib stream at all", "does not inflate"),
        (3, 2, zlib.compress(b"MEMSYNC\x01"), "did not agree on"),
        # a session of protocol 2 never carries compressed chunks
        (2, 1, zlib.compress(b"MEMSYNC\x01"), "did not agree on"),
    ],
)
def test_a_compressed_chunk_that_is_not_one_bounded_stream_is_refused(
    trio: tuple[Device, Device, Device], vmax: int, z: int, data: bytes, sentence: str
) -> None:
    """SY-4, SY-1 (issue 32): under protocol 3 a bundle chunk may come compressed. A chunk that
    inflates past a frame (a decompression bomb), is cut short, has bytes after its stream, is no
    stream, names another compression, or comes compressed in a session that did not agree on
    protocol 3 ends the session with sync_invalid before anything is merged."""
    a, b, _ = trio
    a.put("a note that stays as it is", "body")
    header = {"t": "chunk", "vault": a.state.default_vault, "z": z}
    result = _run(a, _chunk_peer(b, a, vmax, header, data), _BOMB_LIMITS)
    assert isinstance(result, MemoriesError), result
    assert result.code == "sync_invalid" and sentence in result.message, result.message


# -- revision format 2 (issue 32: note bodies compressed before sealing) -------------------------------

_LONG_NOTE = "A note long enough to be stored compressed, repeated to be sure. " * 12


@pytest.mark.parametrize("vmax", [2, 3])
def test_a_peer_from_before_protocol_4_is_refused_compressed_notes_by_name(
    trio: tuple[Device, Device, Device], vmax: int
) -> None:
    """SY-4, HI-2 (issue 32): a note stored compressed is a revision of format 2, which an engine from
    before sync protocol 4 refuses as malformed. A sending one to such a peer ends the session with
    sync_invalid and a sentence that says to update the peer, before any chunk is sent, so neither
    side merges anything."""
    a, b, _ = trio
    a.put("a long note", _LONG_NOTE)
    seen: list[bytes] = []
    peer = _chunk_peer(b, a, vmax, {"t": "done", "chunks": 0}, b"", sent=seen)
    result = _run(a, peer)
    assert isinstance(result, MemoriesError), result
    assert result.code == "sync_invalid" and "before sync protocol 4" in result.message and "Update Memories" in result.message
    assert not any(b'"t":"chunk"' in frame for frame in seen)
