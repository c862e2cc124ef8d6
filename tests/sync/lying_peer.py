"""A second engine that lies (issue 14's malicious-peer suite), run as its own process.

    python -m tests.sync.lying_peer HOME PASSWORD PORT MODE

It opens a joined device's store (its daemon stopped) with the same code the engine uses,
serves the real `/v1/channel` protocol (engine/sync/transport.py: real handshake, real
envelopes, real make_bundle) and tampers with what it sends according to MODE:

  honest      send the true bundle
  ciphertext  flip one byte of a content chunk's ciphertext
  signature   flip one byte of a revision's Ed25519 signature
  drop        drop the second revision sent, the middle of a chain (and its content)
  duplicate   send every chunk twice
  endless     after the true chunks, keep sending sealed 1 MiB chunks forever
  hugeframe   send one frame larger than any frame limit
  silent      go quiet after the inventories (a peer that never finishes)
  disconnect  send half the chunks, then the process exits (a dead peer mid-transfer)
  rollback    replay its whole (older) policy history from the genesis, as if the peer lacked it
  forgepolicy flip one byte of the first policy's Owner signature
  reorder     swap its last two audit entries (a reordered audit hash chain)
  pageorder   (sync protocol 2: its inventory in pages of 64 bytes) number its first page 1
  pagehuge    send a first inventory page larger than a page may be (within the frame limit)
  pagemissing declare one inventory page more than it sends, then go on with its bundle
  pagecount   change the declared page count on the second page

It prints one JSON line {"url": …} when it listens, and accepts any bearer token (the honest
engine is the client; it is the one being lied to). It never merges what it receives.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from engine.sync import pages, transport
from engine.sync.bundle import MAGIC, Inventory, inventory, make_bundle, shared_vault_ids
from engine.sync.transport import CHUNK_BYTES, Limits, LocalSide, SessionResult, SyncServer
from engine.vault.core import VaultCore


def _items(chunk: bytes) -> dict[str, Any]:
    obj: dict[str, Any] = msgspec.msgpack.decode(chunk[len(MAGIC) :])
    return obj


def _pack(obj: dict[str, Any]) -> bytes:
    return MAGIC + msgspec.msgpack.encode(obj)


def _flip(data: bytes, index: int) -> bytes:
    raw = bytearray(data)
    raw[index % len(raw)] ^= 0x01
    return bytes(raw)


def _tamper(mode: str, chunks: list[bytes]) -> list[bytes]:
    decoded = [_items(c) for c in chunks]
    items = [item for obj in decoded for item in obj["items"]]
    if mode == "ciphertext":
        part = next(item for item in items if item["k"] == "part")
        part["data"] = _flip(part["data"], len(part["data"]) // 2)
    elif mode == "signature":
        rev = next(item for item in items if item["k"] == "rev")
        rev["sig"] = _flip(rev["sig"], 7)
    elif mode == "forgepolicy":
        policy = next(item for item in items if item["k"] == "policy")
        policy["rec"]["sig"] = _flip(policy["rec"]["sig"], 0)
    elif mode == "reorder":
        audits = [i for i, item in enumerate(items) if item["k"] == "audit"]
        first, second = audits[-2], audits[-1]
        items[first], items[second] = items[second], items[first]
        vault = decoded[0]["vault"]
        return [_pack({"v": 1, "vault": vault, "items": items})]
    elif mode == "drop":
        # Revisions go parents first: the fixture's chain v1 → v2 → v3 comes first; drop v2.
        revs = [i for i, item in enumerate(items) if item["k"] == "rev"]
        middle = revs[1]
        parts = int(items[middle]["parts"])
        del items[middle : middle + 1 + parts]
        vault = decoded[0]["vault"]
        return [_pack({"v": 1, "vault": vault, "items": items})]
    return [_pack(obj) for obj in decoded]


def _lie_in_pages(mode: str) -> None:
    """Tamper with this process's own inventory pages as it seals them (the liar signs its lies)."""
    honest_seal = transport._Sealed.seal

    def seal(self: transport._Sealed, header: dict[str, Any], data: bytes = b"") -> bytes:
        if header.get("t") == "inv_page":
            header = dict(header)
            if mode == "pageorder" and header["i"] in (0, 1):
                header["i"] = 1 - header["i"]
            elif mode == "pagehuge" and header["i"] == 0:
                data = data + b"\0" * pages.MAX_PAGE_BYTES
            elif mode == "pagemissing":
                header["n"] += 1
            elif mode == "pagecount" and header["i"] == 1:
                header["n"] += 1
        return honest_seal(self, header, data)

    transport._Sealed.seal = seal  # type: ignore[method-assign]


def main() -> int:
    home, password, port, mode = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    core = VaultCore(home / "store.db")
    store = core.require_store()
    store.install_master(store.check_password(password))
    state = core.decode(store).state
    core.state = state
    identity = state.identity
    if mode.startswith("page"):
        _lie_in_pages(mode)

    def bundles(peer: bytes, wires: list[dict[str, Any]]) -> list[tuple[bytes, list[bytes]]]:
        theirs = {inv.vault_id: inv for inv in (Inventory.from_wire(w) for w in wires)}
        out: list[tuple[bytes, list[bytes]]] = []
        for vault_id in shared_vault_ids(state):
            inv = theirs.get(vault_id) or Inventory(vault_id, [], [], [], peer)
            inv = Inventory(vault_id, inv.policy_heads, inv.revision_ids, inv.audit_ids, peer)
            if mode == "rollback":
                inv = Inventory(vault_id, [], inv.revision_ids, inv.audit_ids, peer)
            chunks = make_bundle(core, state, vault_id, inv, max_bytes=CHUNK_BYTES)
            if not chunks:
                continue
            if mode in ("ciphertext", "signature", "drop", "forgepolicy", "reorder"):
                chunks = _tamper(mode, chunks)
            elif mode == "duplicate":
                chunks = [c for c in chunks for _ in (0, 1)]
            elif mode == "endless":
                chunks = _endless(chunks)  # type: ignore[assignment]
            elif mode == "hugeframe":
                chunks = [os.urandom(Limits().frame_bytes + 1024)]
            elif mode == "silent":
                time.sleep(3600)
            elif mode == "disconnect":
                chunks = _then_die(chunks)  # type: ignore[assignment]
            out.append((vault_id, chunks))
        return out

    local = LocalSide(
        device_key=identity.device_key,
        exchange_key=identity.exchange_key,
        certificate=identity.certificate,
        certificate_sig=identity.certificate_sig,
        check_peer=lambda device, user: None,
        inventories=lambda peer: [inventory(core, state, v).to_wire() for v in shared_vault_ids(state)],
        bundles=bundles,
        merge=lambda peer, received: [],
    )

    async def run() -> None:
        def on_result(peer: bytes | None, result: SessionResult | None, error: Any) -> None:
            print(json.dumps({"session": "done", "error": getattr(error, "code", None)}), flush=True)

        # Any token, any device: the liar binds its token to nobody (expected peer None).
        limits = Limits(page_bytes=64) if mode.startswith("page") else Limits()
        server = SyncServer(lambda token: None, lambda: local, limits, on_result)  # type: ignore[arg-type,return-value]
        url = await server.start("127.0.0.1", port, None)
        print(json.dumps({"url": url}), flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())
    return 0


def _endless(chunks: list[bytes]) -> Iterator[bytes]:
    yield from chunks
    filler = os.urandom(1024 * 1024)
    while True:
        yield filler


def _then_die(chunks: list[bytes]) -> Iterator[bytes]:
    half = max(1, len(chunks) // 2)
    yield from chunks[:half]
    time.sleep(0.5)  # let the frames leave
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
