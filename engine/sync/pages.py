"""Inventories sent in bounded pages (sync protocol 2; issue 32; design in docs/sync.md).

Protocol 1 sent every vault's :class:`engine.sync.bundle.Inventory` in one sealed message, and
a message is at most one frame (``Limits.frame_bytes``, 4 MiB + 64 KiB): the first sync of a
vault with more than ~79,000 revision and audit IDs (53 bytes each in that message; an ~80k-note
vault) was refused by the receiver as ``sync_invalid`` before anything was exchanged. Protocol 2 encodes the list of
inventories once (MessagePack, the same fields as ``Inventory.to_wire``) and sends it as
consecutive pages of at most :data:`MAX_PAGE_BYTES`, each its own sealed message
``{"t": KIND + "_page", "i": index, "n": count}`` with the slice as its data. The receiver
(:class:`Assembler`) takes the pages strictly in order, with one declared count, within
:data:`MAX_LIST_BYTES` in all, and decodes the whole only after the last page, with a strict
schema: a page out of order, too large, a count that changes, or a list that ends before its
last page is ``sync_invalid`` and the session ends before any bundle is built or merged.

Nothing in a page is trusted beyond its envelope (signed by the authenticated peer device):
an inventory only decides what the peer is *sent*; what it sends is verified whole by merge.
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.errors import MemoriesError

__all__ = [
    "MAX_PAGE_BYTES",
    "MAX_PAGES",
    "MAX_LIST_BYTES",
    "MAX_VAULTS",
    "KINDS",
    "encode_inventories",
    "decode_inventories",
    "split",
    "paginate",
    "Assembler",
]

# One page's data; with the sealed header and envelope it stays far below a frame (4 MiB + 64 KiB).
MAX_PAGE_BYTES = 1024 * 1024
# The whole encoded list: 4M revision and 4M audit IDs (bundle.MAX_INVENTORY_IDS) at 34 bytes
# each in MessagePack fit; the receiver holds at most this much before it decodes.
MAX_LIST_BYTES = 288 * 1024 * 1024
MAX_PAGES = MAX_LIST_BYTES // 1024  # a sender's pages are at least 1 KiB (Limits.from_env)
MAX_VAULTS = 10_000  # inventories in one list (protocol 1's bound)
KINDS = ("inv", "inv_full")  # the first round, and the full inventories a delta could not replace


class _InventoryWire(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``Inventory.to_wire`` as MessagePack; ``Inventory.from_wire`` checks every value after."""

    v: int
    vault: bytes
    policy_heads: list[bytes]
    revision_ids: list[bytes]
    audit_ids: list[bytes]
    device: bytes | None = None
    base: bytes | None = None


def _invalid(message: str) -> MemoriesError:
    return MemoriesError("sync_invalid", message)


def encode_inventories(wires: list[dict[str, Any]]) -> bytes:
    return msgspec.msgpack.encode(wires)


def decode_inventories(blob: bytes) -> list[dict[str, Any]]:
    """The inventories of a complete list, as the wire dicts protocol 1 carried."""
    try:
        decoded = msgspec.msgpack.decode(blob, type=list[_InventoryWire])
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise _invalid("The peer's inventory is malformed (its pages do not decode); nothing was merged.") from None
    if len(decoded) > MAX_VAULTS:
        raise _invalid("The peer's inventory lists more vaults than one sync carries; nothing was merged.")
    out: list[dict[str, Any]] = []
    for inv in decoded:
        wire = {name: getattr(inv, name) for name in inv.__struct_fields__}
        out.append({name: value for name, value in wire.items() if value is not None})
    return out


def split(blob: bytes, page_bytes: int) -> list[bytes]:
    """``blob`` in consecutive slices of at most ``page_bytes`` (one slice at least)."""
    size = max(1, min(page_bytes, MAX_PAGE_BYTES))
    pages = [blob[start : start + size] for start in range(0, len(blob), size)] or [b""]
    if len(blob) > MAX_LIST_BYTES or len(pages) > MAX_PAGES:
        raise MemoriesError(
            "sync_invalid",
            f"This device's inventory ({len(blob):,} bytes) is larger than one sync carries; nothing was sent.",
        )
    return pages


def paginate(wires: list[dict[str, Any]], page_bytes: int) -> list[bytes]:
    """The pages of a list of inventories (``Inventory.to_wire`` dicts)."""
    return split(encode_inventories(wires), page_bytes)


class Assembler:
    """The pages of one list from the peer, checked as they come; :meth:`add` says when it is whole."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(kind)
        self.kind = kind
        self.what = "inventory" if kind == "inv" else "full inventory"
        self.count: int | None = None
        self.pages: list[bytes] = []
        self.size = 0

    @property
    def received(self) -> int:
        return len(self.pages)

    def add(self, header: dict[str, Any], data: bytes) -> bool:
        """Take one page (its sealed header and data); True once the last page is in."""
        if header.get("t") != self.kind + "_page":
            if self.pages:
                raise _invalid(
                    f"The peer's {self.what} ended after page {len(self.pages)} of {self.count}, before its last page; "
                    "nothing was merged."
                )
            raise _invalid(f"The peer sent {str(header.get('t'))[:20]!r} where its {self.what} was due.")
        index, count = header.get("i"), header.get("n")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_PAGES:
            raise _invalid(f"The peer's {self.what} page declares an impossible page count; nothing was merged.")
        if self.count is not None and count != self.count:
            raise _invalid(f"The peer's {self.what} pages changed their page count midway; nothing was merged.")
        if index != len(self.pages):
            raise _invalid(
                f"The peer's {self.what} page {index!s:.12} came out of order (page {len(self.pages)} was due); "
                "nothing was merged."
            )
        if len(data) > MAX_PAGE_BYTES:
            raise _invalid(
                f"The peer's {self.what} page is larger than a page may be ({MAX_PAGE_BYTES} bytes); nothing was merged."
            )
        self.size += len(data)
        if self.size > MAX_LIST_BYTES:
            raise _invalid(f"The peer's {self.what} is larger than one sync carries; nothing was merged.")
        self.count = count
        self.pages.append(data)
        return len(self.pages) == count

    def inventories(self) -> list[dict[str, Any]]:
        if self.count is None or len(self.pages) != self.count:
            raise _invalid(f"The peer's {self.what} is incomplete; nothing was merged.")
        blob = b"".join(self.pages)
        self.pages = []
        return decode_inventories(blob)
