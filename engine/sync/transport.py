"""The sync wire protocol over WebSocket `/v1/channel` (SY-4, API-4, API-5, ID-2).

One session between two devices, the *initiator* (the client, or the second to join a relay
room) and the *responder*:

1. ``hello`` both ways, in clear: protocol version, device key, its user-signed certificate,
   a fresh 32-byte nonce. The certificate gives the peer's X25519 exchange key.
2. ``auth`` both ways: an Ed25519 signature by the device key over the transcript (both
   nonces, both device keys, the roles). Each side then asks the engine whether the peer
   device is authorized by the current policy of a shared vault (and, on a listener, is the
   device the token is bound to). Everything after this is a signed envelope sealed to the
   peer device's exchange key (purpose ``"sync"``), so a relay sees only sizes and timing.
3. ``inv``: the inventories of every shared vault (engine/sync/bundle.py ``Inventory``). Protocol
   2 sends them as ``inv_page`` messages, bounded pages of one encoded list (engine/sync/pages.py),
   both directions at once; protocol 1 as one ``inv`` message, which a vault of more than ~79k
   IDs does not fit. The same holds for the second round of full inventories (``inv_full``).
4. ``chunk`` … ``done``: the bundle chunks the peer lacks, sent while the peer's are received
   (both directions at once, so two large bundles cannot deadlock on full socket buffers).
   Under protocol 3 a chunk that shrinks is sent compressed (zlib, ``"z": 1`` in its header,
   inside the sealed envelope); the receiver inflates it to at most a frame's size, or refuses.
   Only under protocol 4 may a bundle carry revisions of format 2 (note bodies compressed before
   sealing, issue 32), which an engine from before it refuses as malformed: a side whose bundle
   holds one, in a session of a lower protocol, ends it (``sync_invalid``, saying to update the
   peer) before it sends any chunk, so nothing is merged on either side.
   Under protocol 2, a side busy in a long blocking step (inventories, bundles, merge) sends
   ``wait`` every quarter of the per-message deadline, which the receiver skips.
5. Only after ``done`` is every received chunk merged, one merge per vault with the whole
   incoming set (SY-1: a disconnect before that merges nothing; a retry resends; items
   already held are skipped). ``report`` both ways, then close.

Versions: a hello says ``v: 1`` (what every engine reads) and ``vmax``, the newest protocol
this engine speaks (absent before protocol 2); a session speaks the lower of the two ``vmax``.
From protocol 2 on, the signed transcript covers both ``vmax`` as received, so a man in the
middle who strips one (to force single-message inventories) fails the ``auth`` check.

Bounds: every frame ≤ ``Limits.frame_bytes``; a session receives at most
``Limits.total_bytes`` and ``Limits.max_chunks``; each message must arrive within
``Limits.message_seconds`` and the whole session within ``Limits.session_seconds``. A peer that
breaks any of these gets ``sync_invalid``/``sync_timeout`` and the connection is closed.

The engine side (keys, policy checks, inventories, bundles, merge) is a :class:`LocalSide`
of blocking callables the service builds; they run in worker threads, never on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.envelope import EnvelopeError, open_envelope, seal_envelope
from engine.crypto.keys import CERT_TAG, SignatureError, sign, verify
from engine.errors import CODES, MemoriesError
from engine.lazy_import import LazyModule
from engine.sync import pages

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    aiohttp = LazyModule("aiohttp")
    web = LazyModule("aiohttp.web")

__all__ = [
    "PROTOCOL",
    "PROTOCOL_MAX",
    "CHANNEL_PATH",
    "Limits",
    "LocalSide",
    "SessionResult",
    "Channel",
    "WsChannel",
    "run_session",
    "SyncServer",
    "sync_with",
    "sync_via_relay",
    "channel_url",
    "is_loopback",
    "server_ssl",
    "client_ssl",
]

log = logging.getLogger("memories.sync")

PROTOCOL = 1  # the hello's "v": every engine reads it (see "Versions" above)
# 2: inventories in pages; 3: bundle chunks compressed; 4: revisions of format 2, whose bodies are
# compressed before sealing (issue 32), which an engine before it refuses as malformed
PROTOCOL_MAX = 4
CHANNEL_PATH = "/v1/channel"
RELAY_PATH = "/v1/relay/"
PURPOSE = "sync"
TRANSCRIPT_TAG = "memories.sync.channel"
CHUNK_BYTES = 4 * 1024 * 1024  # make_bundle's max_bytes; a frame adds the envelope and header
_NONCE = 32
_MAX_VAULTS = 1000
# zlib's fastest level: a chunk is about half revisions (signed canonical JSON: keys, identifiers
# every revision repeats, base64 ciphertext), which shrink to ~55%, and half content chunks,
# ciphertext that does not shrink; ~0.14 s of one core per 4 MiB chunk, off the event loop.
_CHUNK_LEVEL = 1


@dataclass(frozen=True)
class Limits:
    frame_bytes: int = CHUNK_BYTES + 64 * 1024
    total_bytes: int = 1024 * 1024 * 1024
    max_chunks: int = 200_000
    message_seconds: float = 60.0
    session_seconds: float = 1800.0
    page_bytes: int = pages.MAX_PAGE_BYTES  # what this side puts in one inventory page

    # Smallest page a sender uses, so that its page count stays within pages.MAX_PAGES.
    MIN_PAGE_BYTES = 1024

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults, narrowed by ``MEMORIES_SYNC_MAX_BYTES`` / ``MEMORIES_SYNC_MESSAGE_SECONDS`` /
        ``MEMORIES_SYNC_SESSION_SECONDS`` / ``MEMORIES_SYNC_PAGE_BYTES`` (read when the engine
        starts a session; smaller inventory pages only ever mean more of them)."""
        base = cls()

        def number(name: str, default: float) -> float:
            text = os.environ.get(name, "")
            try:
                value = float(text) if text else default
            except ValueError:
                return default
            return value if value > 0 else default

        return cls(
            frame_bytes=base.frame_bytes,
            total_bytes=int(number("MEMORIES_SYNC_MAX_BYTES", base.total_bytes)),
            max_chunks=base.max_chunks,
            message_seconds=number("MEMORIES_SYNC_MESSAGE_SECONDS", base.message_seconds),
            session_seconds=number("MEMORIES_SYNC_SESSION_SECONDS", base.session_seconds),
            page_bytes=max(cls.MIN_PAGE_BYTES, min(base.page_bytes, int(number("MEMORIES_SYNC_PAGE_BYTES", base.page_bytes)))),
        )


@dataclass
class LocalSide:
    """This device, as the engine lends it to one session (blocking callables run in threads)."""

    device_key: SigningKey
    exchange_key: PrivateKey
    certificate: dict[str, Any]
    certificate_sig: bytes
    # (peer device, peer user from its certificate) -> None, or sync_unauthorized.
    check_peer: Callable[[bytes, bytes], None]
    # peer device -> the wire form of every shared vault's Inventory.
    inventories: Callable[[bytes], list[dict[str, Any]]]
    # (peer device, the peer's inventories) -> [(vault_id, chunks)] the peer lacks.
    bundles: Callable[[bytes, list[dict[str, Any]]], list[tuple[bytes, list[bytes]]]]
    # (peer device, {vault_id: chunks}) -> one MergeReport wire form per vault.
    merge: Callable[[bytes, dict[bytes, list[bytes]]], list[dict[str, Any]]]
    # Pending received chunks not yet merged (the status inbox).
    inbox: Callable[[int], None] = lambda _count: None
    # (peer device, vault IDs) -> full inventories of those vaults, when the peer could not use
    # the delta sent first (engine/sync/marks.py); None: this side never sends deltas.
    full_inventories: Callable[[bytes, list[bytes]], list[dict[str, Any]]] | None = None

    @property
    def device_pub(self) -> bytes:
        return bytes(self.device_key.verify_key)


@dataclass
class SessionResult:
    peer_device: bytes
    merged: list[dict[str, Any]] = field(default_factory=list)
    peer_merged: list[dict[str, Any]] = field(default_factory=list)
    peer_error: dict[str, str] | None = None
    sent_bytes: int = 0
    received_bytes: int = 0
    chunks_sent: int = 0
    chunks_received: int = 0
    protocol: int = PROTOCOL
    inventory_pages_sent: int = 0
    inventory_pages_received: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {
            "peer": self.peer_device.hex(),
            "vaults": self.merged,
            "peer_vaults": self.peer_merged,
            "peer_error": self.peer_error,
            "sent_bytes": self.sent_bytes,
            "received_bytes": self.received_bytes,
            "chunks_sent": self.chunks_sent,
            "chunks_received": self.chunks_received,
            "protocol": self.protocol,
            "inventory_pages_sent": self.inventory_pages_sent,
            "inventory_pages_received": self.inventory_pages_received,
        }


def _invalid(message: str) -> MemoriesError:
    return MemoriesError("sync_invalid", message)


# -- channels --------------------------------------------------------------------------------


class Channel(Protocol):
    sent_bytes: int
    received_bytes: int

    async def send(self, data: bytes) -> None: ...

    async def recv(self, timeout: float) -> bytes: ...

    async def close(self) -> None: ...


class WsChannel:
    """Binary frames over an aiohttp WebSocket (server or client side)."""

    CLOSE_SECONDS = 5.0

    def __init__(
        self, ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse, transport: asyncio.BaseTransport | None = None
    ) -> None:
        self.ws = ws
        self.transport = transport
        self.sent_bytes = 0
        self.received_bytes = 0

    async def send(self, data: bytes) -> None:
        if self.ws.closed:
            raise MemoriesError("sync_unreachable", "The peer closed the connection before the sync finished.")
        try:
            await self.ws.send_bytes(data)
        except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
            raise MemoriesError("sync_unreachable", "The connection to the peer broke; nothing was merged.") from exc
        self.sent_bytes += len(data)

    async def recv(self, timeout: float) -> bytes:
        try:
            msg = await asyncio.wait_for(self.ws.receive(), timeout)
        except TimeoutError:
            raise MemoriesError("sync_timeout", f"The peer sent nothing for {timeout:g} s; the connection was closed.") from None
        if msg.type == aiohttp.WSMsgType.BINARY:
            data = bytes(msg.data)
            self.received_bytes += len(data)
            return data
        if msg.type == aiohttp.WSMsgType.ERROR:
            exc = msg.data
            if isinstance(exc, aiohttp.WebSocketError) and exc.code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
                raise _invalid("The peer sent a message larger than the frame limit; the connection was closed.")
            raise MemoriesError("sync_unreachable", "The connection to the peer broke; nothing was merged.")
        if msg.type == aiohttp.WSMsgType.TEXT:
            raise _invalid("The peer sent a text frame; the sync channel carries binary frames only.")
        if self.ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
            raise _invalid("The peer sent a message larger than the frame limit; the connection was closed.")
        raise MemoriesError("sync_unreachable", "The peer closed the connection before the sync finished; nothing was merged.")

    async def close(self) -> None:
        """Close politely, but never wait on a peer that keeps sending (aiohttp's close reads
        until the peer's close frame): after a short deadline the socket is aborted."""
        try:
            await asyncio.wait_for(self.ws.close(), self.CLOSE_SECONDS)
        except (TimeoutError, Exception):
            abort = getattr(self.transport, "abort", None)
            if callable(abort):
                abort()


# -- frames ------------------------------------------------------------------------------------


def _plain(obj: dict[str, Any]) -> bytes:
    return canonical_bytes(obj)


def _parse_plain(data: bytes, expected: str) -> dict[str, Any]:
    try:
        obj = decode_canonical(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid("The peer sent a frame that is not a sync message.") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("t"), str):
        raise _invalid("The peer sent a frame that is not a sync message.")
    if obj["t"] == "error":
        _raise_peer_error(obj)
    if obj["t"] != expected:
        raise _invalid(f"The peer sent {str(obj['t'])[:20]!r} where {expected!r} was due.")
    return obj


# What a peer's refusal means for this side, by its code (issue 29: say what happened and what to
# do). The peer's own sentence is untrusted text: only its registered code is repeated.
_PEER_SENTENCES = {
    "sync_unauthorized": (
        "The peer refused this device (sync_unauthorized): its vault policy does not authorize this device "
        "(revoked there, or its person removed), or the sync token was made for another device. Nothing was "
        "merged; ask the peer's Owner, and use a token made for this device (`memories sync token new --device`)."
    ),
}


def _raise_peer_error(obj: dict[str, Any]) -> None:
    code = obj.get("code")
    shown = code if isinstance(code, str) and code in CODES else "sync_rejected"
    sentence = _PEER_SENTENCES.get(shown, f"The peer refused the sync ({shown}); nothing was merged there.")
    raise MemoriesError(shown, sentence, peer=True)


class _Sealed:
    """Signed envelopes to and from one authenticated peer (ID-2, purpose "sync")."""

    def __init__(self, local: LocalSide, peer_device: bytes, peer_exchange: bytes) -> None:
        self.local = local
        self.peer_device = peer_device
        self.peer_exchange = peer_exchange

    def seal(self, header: dict[str, Any], data: bytes = b"") -> bytes:
        # header (canonical JSON, never a raw newline) || "\n" || raw data: no base64 on the wire.
        return seal_envelope(self.local.device_key, self.peer_exchange, _plain(header) + b"\n" + data, purpose=PURPOSE)

    def open(self, frame: bytes) -> tuple[dict[str, Any], bytes]:
        try:
            opened = open_envelope(self.local.exchange_key, frame, purpose=PURPOSE, expected_sender=self.peer_device)
        except EnvelopeError as exc:
            # A peer that refused this device after the handshake answers in clear (it holds no
            # session with us): name its refusal instead of "failed authentication (format)".
            _raise_plain_error(frame)
            raise MemoriesError(
                "sync_rejected", f"A message from the peer failed authentication ({exc.reason}); nothing was merged."
            ) from None
        head, sep, data = opened.payload.partition(b"\n")
        if not sep:
            raise _invalid("The peer sent a sealed message without a header.")
        try:
            obj = decode_canonical(head)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise _invalid("The peer sent a sealed message whose header is not a sync message.") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("t"), str):
            raise _invalid("The peer sent a sealed message whose header is not a sync message.")
        if obj["t"] == "error":
            _raise_peer_error(obj)
        return obj, data


def _raise_plain_error(frame: bytes) -> None:
    """Raise the peer's refusal if ``frame`` is a plain error frame; return otherwise."""
    try:
        obj = decode_canonical(frame)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return
    if isinstance(obj, dict) and obj.get("t") == "error":
        _raise_peer_error(obj)


def _error_frame(exc: MemoriesError) -> dict[str, Any]:
    return {"t": "error", "code": exc.code, "message": exc.message[:300]}


def _transcript(initiator: dict[str, Any], responder: dict[str, Any], version: int = PROTOCOL) -> bytes:
    fields = {
        "i_device": initiator["device"],
        "i_nonce": initiator["nonce"],
        "r_device": responder["device"],
        "r_nonce": responder["nonce"],
    }
    if version >= 2:
        # Both offers as each side saw them: a stripped or lowered "vmax" breaks the signature.
        fields["i_vmax"] = initiator.get("vmax")
        fields["r_vmax"] = responder.get("vmax")
    return domain_bytes(TRANSCRIPT_TAG, PROTOCOL, fields)


def _negotiated(hello: dict[str, Any]) -> int:
    """The protocol a session with the sender of ``hello`` speaks: the lower of the two offers."""
    offer = hello.get("vmax")
    if not isinstance(offer, int) or isinstance(offer, bool) or offer < PROTOCOL:
        return PROTOCOL  # an engine from before protocol 2 offers nothing
    return min(offer, PROTOCOL_MAX)


def _check_hello(hello: dict[str, Any]) -> tuple[bytes, bytes, bytes]:
    """(device key, user key, exchange key) of a peer's hello whose certificate verifies."""
    if hello.get("v") != PROTOCOL:
        raise _invalid("The peer speaks another sync protocol version; update both devices.")
    device, nonce, cert, cert_sig = hello.get("device"), hello.get("nonce"), hello.get("cert"), hello.get("cert_sig")
    if not (isinstance(device, bytes) and len(device) == 32 and isinstance(nonce, bytes) and len(nonce) == _NONCE):
        raise _invalid("The peer's hello is malformed.")
    if not isinstance(cert, dict) or not isinstance(cert_sig, bytes):
        raise _invalid("The peer's hello has no device certificate.")
    user, exchange = cert.get("user"), cert.get("exchange")
    if cert.get("device") != device or not isinstance(user, bytes) or not isinstance(exchange, bytes) or len(exchange) != 32:
        raise MemoriesError("sync_unauthorized", "The peer's device certificate does not name its device.")
    try:
        verify(user, domain_bytes(CERT_TAG, 1, cert), cert_sig)
    except (SignatureError, ValueError, TypeError):
        raise MemoriesError("sync_unauthorized", "The peer's device certificate is not signed by its user.") from None
    return device, user, exchange


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


async def run_session(
    channel: Channel,
    local: LocalSide,
    *,
    initiator: bool,
    limits: Limits,
    expected_peer: bytes | None = None,
) -> SessionResult:
    """Run the whole protocol on ``channel``; raises a typed error (after telling the peer)."""
    try:
        return await asyncio.wait_for(
            _session(channel, local, initiator=initiator, limits=limits, expected_peer=expected_peer),
            limits.session_seconds,
        )
    except TimeoutError:
        raise MemoriesError("sync_timeout", f"The sync did not finish within {limits.session_seconds:g} s.") from None
    finally:
        await channel.close()


async def _session(
    channel: Channel, local: LocalSide, *, initiator: bool, limits: Limits, expected_peer: bytes | None
) -> SessionResult:
    wait = limits.message_seconds
    mine = {
        "t": "hello",
        "v": PROTOCOL,
        "device": local.device_pub,
        "cert": local.certificate,
        "cert_sig": local.certificate_sig,
        "nonce": os.urandom(_NONCE),
        "vmax": PROTOCOL_MAX,
    }
    await channel.send(_plain(mine))
    theirs = _parse_plain(await channel.recv(wait), "hello")
    try:
        peer_device, peer_user, peer_exchange = _check_hello(theirs)
        if peer_device == local.device_pub:
            raise MemoriesError("sync_unauthorized", "The peer is this very device.")
        if expected_peer is not None and peer_device != expected_peer:
            raise MemoriesError("sync_unauthorized", "The sync token is bound to another device.")
        version = _negotiated(theirs)
        transcript = _transcript(mine, theirs, version) if initiator else _transcript(theirs, mine, version)
        await channel.send(_plain({"t": "auth", "sig": sign(local.device_key, transcript)}))
        auth = _parse_plain(await channel.recv(wait), "auth")
        sig = auth.get("sig")
        try:
            verify(peer_device, transcript, sig if isinstance(sig, bytes) else b"")
        except (SignatureError, ValueError, TypeError):
            raise MemoriesError("sync_unauthorized", "The peer did not prove it holds its device key.") from None
        await _blocking(local.check_peer, peer_device, peer_user)
    except MemoriesError as exc:
        if exc.code == "sync_unreachable":
            await _peer_refusal(channel, None)
        with contextlib.suppress(MemoriesError):
            await channel.send(_plain(_error_frame(exc)))
        raise
    sealed = _Sealed(local, peer_device, peer_exchange)
    result = SessionResult(peer_device, protocol=version)
    try:
        await _exchange(channel, sealed, local, limits, result)
    except MemoriesError as exc:
        if exc.code == "sync_unreachable":
            await _peer_refusal(channel, sealed)
        if not exc.details.get("peer"):
            with contextlib.suppress(MemoriesError):
                await channel.send(sealed.seal(_error_frame(exc)))
        raise
    finally:
        local.inbox(0)
        result.sent_bytes, result.received_bytes = channel.sent_bytes, channel.received_bytes
    return result


# How long a side whose connection broke still reads what the peer sent before it (issue 29).
_REFUSAL_SECONDS = 2.0
_REFUSAL_FRAMES = 8


async def _peer_refusal(channel: Channel, sealed: _Sealed | None) -> None:
    """Raise the peer's refusal if one is among the frames already received, else return.

    A peer that refuses this device sends its refusal and closes at once; a relay then closes
    this side's connection too. If this side was sending at that moment (its inventory, after
    its own check of the peer), the send fails with the refusal frame still unread in the
    receive buffer, and "the connection broke" would hide "you are not authorized". So before
    reporting a broken connection, the frames that did arrive are read (a few, briefly): a
    refusal among them is what this side reports.
    """
    for _ in range(_REFUSAL_FRAMES):
        try:
            frame = await channel.recv(_REFUSAL_SECONDS)
        except MemoriesError:
            return  # closed, broken or silent: nothing more arrived
        _raise_plain_error(frame)
        if sealed is not None:
            try:
                sealed.open(frame)
            except MemoriesError as exc:
                if exc.details.get("peer"):
                    raise
        # Anything else (a frame the peer sent before it refused) is skipped.


async def _exchange(channel: Channel, sealed: _Sealed, local: LocalSide, limits: Limits, result: SessionResult) -> None:
    wait = limits.message_seconds
    peer = sealed.peer_device
    own_invs: list[dict[str, Any]] = await _busy(channel, sealed, result, limits, local.inventories, peer)
    peer_invs = await _swap_inventories(channel, sealed, "inv", own_invs, limits, result, receive=True)
    if not isinstance(peer_invs, list) or len(peer_invs) > pages.MAX_VAULTS:
        raise _invalid("The peer's inventory message is malformed.")
    # A delta inventory (with "base") is usable only when both sides sent one with the same base;
    # both sides see the same two messages, so both know which vaults need a second, full round.
    resend = _unmatched(own_invs, peer_invs)
    expect = _unmatched(peer_invs, own_invs)
    full: list[dict[str, Any]] | None = None
    if resend:
        if local.full_inventories is None:
            raise _invalid("This side sent a delta inventory it cannot replace with a full one.")
        full = await _busy(channel, sealed, result, limits, local.full_inventories, peer, resend)
    fulls = await _swap_inventories(channel, sealed, "inv_full", full, limits, result, receive=bool(expect))
    if expect:
        if not isinstance(fulls, list) or len(fulls) > len(expect):
            raise _invalid("The peer's full inventory message is malformed.")
        replaced = {bytes(inv["vault"]): inv for inv in fulls if isinstance(inv, dict) and isinstance(inv.get("vault"), bytes)}
        if set(replaced) != set(expect) or any("base" in inv for inv in replaced.values()):
            raise _invalid("The peer's full inventories do not answer the vaults that needed them.")
        peer_invs = [replaced.get(_inv_vault(inv) or b"", inv) for inv in peer_invs]
    bundles: list[tuple[bytes, list[bytes]]] = await _busy(channel, sealed, result, limits, local.bundles, peer, peer_invs)
    if result.protocol < 4 and await _blocking(_any_compressed_body, bundles):
        raise _invalid(
            "This device holds notes stored compressed (revision format 2), which the peer cannot read: it runs "
            "a Memories from before sync protocol 4. Update Memories on the peer; nothing was merged."
        )
    received: dict[bytes, list[bytes]] = {}

    async def send_all() -> None:
        for vault_id, chunks in bundles:
            for chunk in chunks:
                head: dict[str, Any] = {"t": "chunk", "vault": vault_id}
                if result.protocol >= 3:
                    packed: bytes = await _blocking(zlib.compress, chunk, _CHUNK_LEVEL)
                    if len(packed) < len(chunk):
                        head["z"], chunk = 1, packed
                await channel.send(sealed.seal(head, chunk))
                result.chunks_sent += 1
        await channel.send(sealed.seal({"t": "done", "chunks": result.chunks_sent}))

    async def receive_all() -> None:
        total = 0
        while True:
            head, data = await _receive(channel, sealed, result, wait)
            if head["t"] == "done":
                if head.get("chunks") != result.chunks_received:
                    raise _invalid("The peer's bundle ended with a different chunk count than it sent.")
                return
            if head["t"] != "chunk" or not isinstance(head.get("vault"), bytes) or len(head["vault"]) > 64:
                raise _invalid("The peer sent a malformed bundle chunk.")
            if head["vault"] not in received and len(received) >= _MAX_VAULTS:
                raise _invalid("The peer sent chunks of more vaults than one sync carries.")
            if "z" in head:
                if head["z"] != 1 or result.protocol < 3:
                    raise _invalid("The peer sent a compressed chunk this session did not agree on.")
                data = await _blocking(_inflate_chunk, data, limits.frame_bytes)
            total += len(data)
            result.chunks_received += 1
            if total > limits.total_bytes or result.chunks_received > limits.max_chunks:
                raise _invalid(
                    f"The peer sent more than this engine accepts in one sync ({limits.total_bytes} bytes); "
                    "the connection was closed and nothing was merged."
                )
            received.setdefault(head["vault"], []).append(data)
            local.inbox(result.chunks_received)

    sender = asyncio.ensure_future(send_all())
    try:
        await receive_all()
        await sender
    finally:
        if not sender.done():
            sender.cancel()
        # Also when it already failed: its error is this one's consequence (and never "not retrieved").
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
    # SY-1: merge only now, with everything the peer sent, one merge per vault.
    # Even with nothing received the merge step runs: it records this sync's mark.
    result.merged = await _busy(channel, sealed, result, limits, local.merge, peer, received)
    received.clear()
    local.inbox(0)
    await channel.send(sealed.seal({"t": "report", "vaults": [_bounded_report(r) for r in result.merged]}))
    try:
        head, _ = await _receive(channel, sealed, result, wait)
    except MemoriesError as exc:
        if not exc.details.get("peer"):
            raise
        result.peer_error = {"code": exc.code, "message": exc.message}
        return
    reports = head.get("vaults")
    if head["t"] != "report" or not isinstance(reports, list):
        raise _invalid("The peer's report is malformed.")
    result.peer_merged = [r for r in reports[:1000] if isinstance(r, dict)]


def _inflate_chunk(data: bytes, bound: int) -> bytes:
    """A compressed chunk inflated, refused unless it is one whole zlib stream of at most ``bound``
    bytes (what an uncompressed frame could carry): a small frame cannot make a large chunk. The
    session's total and chunk count are then counted on the inflated bytes, as before."""
    inflater = zlib.decompressobj()
    try:
        chunk = inflater.decompress(data, bound)
    except zlib.error:
        raise _invalid("The peer sent a compressed chunk that does not inflate.") from None
    if inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise _invalid("The peer sent a compressed chunk larger than a frame, cut short, or with bytes after it.")
    return chunk


def _any_compressed_body(bundles: list[tuple[bytes, list[bytes]]]) -> bool:
    from engine.sync.bundle import carries_compressed_bodies  # the CLI imports this module: kept off its path

    return any(carries_compressed_bodies(chunk) for _, chunks in bundles for chunk in chunks)


async def _receive(channel: Channel, sealed: _Sealed, result: SessionResult, wait: float) -> tuple[dict[str, Any], bytes]:
    """The peer's next sealed message, past the "wait" messages of a busy peer (protocol 2)."""
    while True:
        header, data = sealed.open(await channel.recv(wait))
        if header["t"] != "wait" or result.protocol < 2:
            return header, data


async def _busy(
    channel: Channel, sealed: _Sealed, result: SessionResult, limits: Limits, fn: Callable[..., Any], *args: Any
) -> Any:
    """Run a blocking step of this side (inventories, bundles, merge) in a thread; under protocol
    2, tell the peer every quarter of the per-message deadline that this side is still working.
    A first sync of 100k items builds and merges for minutes under load, far beyond the deadline
    the peer waits on each message with; the whole session stays within ``session_seconds``."""
    work = asyncio.ensure_future(_blocking(fn, *args))
    if result.protocol < 2:
        return await work
    talking = True
    while True:
        done, _ = await asyncio.wait({work}, timeout=max(0.05, limits.message_seconds / 4))
        if done:
            return work.result()
        if talking:
            try:
                await channel.send(sealed.seal({"t": "wait"}))
            except MemoriesError:
                talking = False  # the peer is gone: finish the step; the next send reports it


async def _swap_inventories(
    channel: Channel,
    sealed: _Sealed,
    kind: str,
    mine: list[dict[str, Any]] | None,
    limits: Limits,
    result: SessionResult,
    *,
    receive: bool,
) -> list[Any] | None:
    """Send ``mine`` (when not None) and receive the peer's list of the same kind (when
    ``receive``): in pages, both directions at once, under protocol 2 (engine/sync/pages.py);
    in one message each under protocol 1."""
    wait = limits.message_seconds
    what = "inventory" if kind == "inv" else "full inventory"
    if result.protocol < 2:
        if mine is not None:
            frame = sealed.seal({"t": kind, "vaults": mine})
            if len(frame) > limits.frame_bytes:
                ids = sum(len(inv.get("revision_ids", ())) + len(inv.get("audit_ids", ())) for inv in mine)
                raise _invalid(
                    f"This device's {what} ({ids:,} IDs) does not fit the one message the peer reads: the peer runs "
                    "a Memories from before sync protocol 2, which takes no inventory in pages. Update Memories on "
                    "the peer; nothing was merged."
                )
            await channel.send(frame)
        if not receive:
            return None
        header, _ = await _receive(channel, sealed, result, wait)
        vaults = header.get("vaults")
        if header["t"] != kind or not isinstance(vaults, list):
            raise _invalid(f"The peer's {what} message is malformed.")
        return vaults

    slices: list[bytes] = [] if mine is None else await _blocking(pages.paginate, mine, limits.page_bytes)

    async def send_pages() -> None:
        for index, data in enumerate(slices):
            await channel.send(sealed.seal({"t": f"{kind}_page", "i": index, "n": len(slices)}, data))
            result.inventory_pages_sent += 1

    # Both directions at once, as the bundle chunks: two large inventories sent before either
    # side reads would fill both socket buffers and wait on each other.
    sender = asyncio.ensure_future(send_pages())
    try:
        received: list[Any] | None = None
        if receive:
            assembler = pages.Assembler(kind)
            while not assembler.add(*await _receive(channel, sealed, result, wait)):
                result.inventory_pages_received += 1
            result.inventory_pages_received += 1
            received = await _blocking(assembler.inventories)
        await sender
    finally:
        if not sender.done():
            sender.cancel()
        # Also when it already failed: its error is this one's consequence (and never "not retrieved").
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
    return received


# The conflicts a report names, at most (the rest counted): a report is one message.
_REPORT_CONFLICTS = 1000


def _bounded_report(report: dict[str, Any]) -> dict[str, Any]:
    conflicts = report.get("conflicts")
    if not isinstance(conflicts, list) or len(conflicts) <= _REPORT_CONFLICTS:
        return report
    return {**report, "conflicts": conflicts[:_REPORT_CONFLICTS], "conflicts_more": len(conflicts) - _REPORT_CONFLICTS}


def _inv_vault(inv: object) -> bytes | None:
    if isinstance(inv, dict) and isinstance(inv.get("vault"), bytes):
        return bytes(inv["vault"])
    return None


def _unmatched(first: list[Any], second: list[Any]) -> list[bytes]:
    """Vaults for which ``first`` holds a delta inventory that ``second`` does not match."""
    bases = {_inv_vault(inv): inv.get("base") for inv in second if isinstance(inv, dict)}
    out: list[bytes] = []
    for inv in first:
        vault = _inv_vault(inv)
        if vault is None or not isinstance(inv, dict) or inv.get("base") is None:
            continue
        if bases.get(vault) != inv["base"] and vault not in out:
            out.append(vault)
    return out


# -- addresses and TLS ---------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_ssl(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if not cert and not key:
        return None
    if not cert or not key:
        raise MemoriesError("invalid_input", "TLS needs both --tls-cert and --tls-key.")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError):
        raise MemoriesError("invalid_input", "The TLS certificate or key could not be read or do not match.") from None
    return context


def client_ssl(ca_file: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    return context


def channel_url(url: str, path: str = CHANNEL_PATH) -> str:
    """``http(s)://host:port`` or ``ws(s)://…`` → the WebSocket URL of ``path``."""
    parts = urlsplit(url.strip())
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise MemoriesError("invalid_input", "The peer URL must look like http://HOST:PORT or https://HOST:PORT.")
    current = parts.path.rstrip("/")
    return urlunsplit((scheme, parts.netloc, current if current.endswith(path.rstrip("/")) else current + path, "", ""))


# -- listener ------------------------------------------------------------------------------------

Authorize = Callable[[str | None], bytes]  # bearer token -> the device it is bound to (blocking)


class SyncServer:
    """The `/v1/channel` listener (runs on a private loop; see engine/service/handlers/sync.py)."""

    MAX_SESSIONS = 4

    def __init__(
        self,
        authorize: Authorize,
        local_side: Callable[[], LocalSide],
        limits: Limits,
        on_result: Callable[[bytes | None, SessionResult | None, MemoriesError | None], None],
    ) -> None:
        self.authorize = authorize
        self.local_side = local_side
        self.limits = limits
        self.on_result = on_result
        self.url = ""
        self.sessions = 0
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None) -> str:
        app = web.Application(client_max_size=1024)
        app.router.add_get(CHANNEL_PATH, self._channel)
        app.router.add_get("/v1/health", self._health)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=tls, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise MemoriesError("invalid_input", f"Cannot listen on {host}:{port} ({exc.strerror or 'in use'}).") from None
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []
        bound = sockets[0].getsockname() if sockets else (host, port)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if tls else 'http'}://{shown}:{bound[1]}"
        return self.url

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "protocol": PROTOCOL, "protocol_max": PROTOCOL_MAX})

    @staticmethod
    def _refuse(status: int, exc: MemoriesError) -> web.Response:
        return web.json_response({"error": {"code": exc.code, "message": exc.message}}, status=status)

    async def _channel(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header[:7].lower() == "bearer " else None
        try:
            device: bytes = await _blocking(self.authorize, token)
        except MemoriesError as exc:
            log.info("sync connection refused error=%s", exc.code)
            return self._refuse(401 if exc.code == "sync_unauthorized" else 503, exc)
        if self.sessions >= self.MAX_SESSIONS:
            return self._refuse(503, MemoriesError("sync_unreachable", "The listener is busy; try again."))
        ws = web.WebSocketResponse(max_msg_size=self.limits.frame_bytes, autoping=True)
        await ws.prepare(request)
        self.sessions += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            local = await _blocking(self.local_side)
            channel = WsChannel(ws, request.transport)
            result = await run_session(channel, local, initiator=False, limits=self.limits, expected_peer=device)
        except MemoriesError as exc:
            log.info("sync session failed error=%s", exc.code)
            self.on_result(device, None, exc)
        except asyncio.CancelledError:
            await WsChannel(ws, request.transport).close()
            raise
        except Exception as exc:  # never let a peer crash the listener; log the type only
            log.error("sync session internal error type=%s", type(exc).__name__)
            self.on_result(device, None, MemoriesError("internal"))
        else:
            self.on_result(device, result, None)
        finally:
            self.sessions -= 1
            if task is not None:
                self._tasks.discard(task)
            await WsChannel(ws, request.transport).close()
        return ws


# -- client --------------------------------------------------------------------------------------


async def _connect(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], limits: Limits, ca_file: str | None
) -> aiohttp.ClientWebSocketResponse:
    tls: ssl.SSLContext | bool = client_ssl(ca_file) if url.startswith("wss://") else False
    try:
        return await asyncio.wait_for(
            session.ws_connect(url, headers=headers, max_msg_size=limits.frame_bytes, ssl=tls, autoping=True),
            limits.message_seconds,
        )
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status == 401:
            raise MemoriesError(
                "sync_unauthorized",
                "The peer refused the sync token: it is wrong or revoked, or the device it was made for is no longer "
                "authorized there (revoked, or its person removed). Nothing was exchanged; ask for a new token "
                "(`memories sync token new --device` on the peer).",
            ) from None
        raise MemoriesError("sync_unreachable", f"The peer refused the connection (HTTP {exc.status}).") from None
    except TimeoutError:
        raise MemoriesError("sync_timeout", "The peer did not accept the connection in time.") from None
    except aiohttp.ClientConnectorCertificateError:
        raise MemoriesError("sync_unreachable", "The peer's TLS certificate did not verify; nothing was sent.") from None
    except (aiohttp.ClientError, OSError):
        raise MemoriesError("sync_unreachable", "The peer could not be reached; nothing was sent.") from None


def _client_transport(ws: aiohttp.ClientWebSocketResponse) -> asyncio.BaseTransport | None:
    connection = getattr(ws, "_conn", None) or getattr(getattr(ws, "_response", None), "connection", None)
    transport = getattr(connection, "transport", None)
    return transport if isinstance(transport, asyncio.BaseTransport) else None


async def sync_with(url: str, token: str, local: LocalSide, limits: Limits, *, ca_file: str | None = None) -> SessionResult:
    """Connect to a listener as the initiator and run one session."""
    target = channel_url(url)
    async with aiohttp.ClientSession() as session:
        ws = await _connect(session, target, {"Authorization": f"Bearer {token}"}, limits, ca_file)
        return await run_session(WsChannel(ws, _client_transport(ws)), local, initiator=True, limits=limits)


async def sync_via_relay(
    relay_url: str,
    room: str,
    local: LocalSide,
    limits: Limits,
    *,
    relay_token: str | None = None,
    ca_file: str | None = None,
    wait_seconds: float = 300.0,
) -> SessionResult:
    """Join ``room`` on a relay, wait for the other device, run one session through it."""
    target = channel_url(relay_url, RELAY_PATH + room)
    headers = {"Authorization": f"Bearer {relay_token}"} if relay_token else {}
    async with aiohttp.ClientSession() as session:
        ws = await _connect(session, target, headers, limits, ca_file)
        channel = WsChannel(ws, _client_transport(ws))
        paired = _parse_plain(await channel.recv(wait_seconds), "paired")
        role = paired.get("role")
        if role not in ("i", "r"):
            await channel.close()
            raise _invalid("The relay sent a malformed pairing message.")
        channel.received_bytes = 0
        return await run_session(channel, local, initiator=role == "i", limits=limits)


def deadline_call(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any], timeout: float) -> Any:
    """Run ``coro`` on ``loop`` (another thread's) and wait; a deadline cancels it."""
    import concurrent.futures

    async def wrapped() -> Any:
        return await coro

    future = asyncio.run_coroutine_threadsafe(wrapped(), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise MemoriesError("sync_timeout", "The sync did not finish in time.") from None


def now_ms() -> int:
    return int(time.time() * 1000)
