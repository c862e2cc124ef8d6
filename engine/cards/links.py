"""Directed card links as encrypted extra records, and their in-memory adjacency index (CD-2).

A link is added or removed by an event record ``{"t": "card_link", "op": "add"|"remove", …}``
committed with an audit entry. The records are sealed like every state row; the index
below is rebuilt from them on unlock, updated after each commit, and dropped on lock,
so a neighbourhood query touches only that node's edges, never the whole vault.
Confidence is stored in parts per million: the canonical encoding has no floats.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["LINK_RECORD", "PPM", "Link", "LinkIndex", "add_record", "remove_record", "now_ms"]

LINK_RECORD = "card_link"
PPM = 1_000_000


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)  # not frozen: frozen init costs ~2x, and 50k links are built per unlock
class Link:
    link_id: bytes
    vault_id: bytes
    src: bytes
    dst: bytes
    rel: str
    confidence_ppm: int
    valid_till_ms: int | None
    created_ms: int

    @property
    def confidence(self) -> float:
        return self.confidence_ppm / PPM

    def expired(self, at_ms: int) -> bool:
        return self.valid_till_ms is not None and self.valid_till_ms <= at_ms

    def other(self, node: bytes) -> bytes:
        return self.dst if node == self.src else self.src


def add_record(
    *, vault_id: bytes, src: bytes, dst: bytes, rel: str, confidence_ppm: int, valid_till_ms: int | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "t": LINK_RECORD,
        "op": "add",
        "id": os.urandom(16),
        "vault": vault_id,
        "src": src,
        "dst": dst,
        "rel": rel,
        "conf_ppm": confidence_ppm,
        "ts_ms": now_ms(),
    }
    if valid_till_ms is not None:
        record["valid_till_ms"] = valid_till_ms
    return record


def remove_record(link: Link) -> dict[str, Any]:
    return {"t": LINK_RECORD, "op": "remove", "id": link.link_id, "ts_ms": now_ms()}


class LinkIndex:
    """Current (not removed) links by source and by destination; expiry is checked at read time."""

    def __init__(self) -> None:
        self.by_id: dict[bytes, Link] = {}
        self.outgoing: dict[bytes, dict[bytes, Link]] = {}
        self.incoming: dict[bytes, dict[bytes, Link]] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def apply_all(self, records: Iterable[dict[str, Any]]) -> None:
        for record in records:
            self.apply(record)

    def apply(self, record: dict[str, Any]) -> None:
        if record.get("t") != LINK_RECORD:
            return
        if record.get("op") == "add":
            valid = record.get("valid_till_ms")
            link = Link(
                link_id=bytes(record["id"]),
                vault_id=bytes(record["vault"]),
                src=bytes(record["src"]),
                dst=bytes(record["dst"]),
                rel=str(record.get("rel", "")),
                confidence_ppm=int(record["conf_ppm"]),
                valid_till_ms=int(valid) if valid is not None else None,
                created_ms=int(record.get("ts_ms", 0)),
            )
            self.by_id[link.link_id] = link
            self.outgoing.setdefault(link.src, {})[link.link_id] = link
            self.incoming.setdefault(link.dst, {})[link.link_id] = link
        elif record.get("op") == "remove":
            gone = self.by_id.pop(bytes(record["id"]), None)
            if gone is not None:
                self._drop(self.outgoing, gone.src, gone.link_id)
                self._drop(self.incoming, gone.dst, gone.link_id)

    @staticmethod
    def _drop(side: dict[bytes, dict[bytes, Link]], node: bytes, link_id: bytes) -> None:
        links = side.get(node)
        if links is not None:
            links.pop(link_id, None)
            if not links:
                del side[node]

    def edges(self, node: bytes, direction: str = "both") -> Iterator[Link]:
        """Links touching ``node`` (``out``, ``in`` or ``both``), expired or not."""
        if direction in ("out", "both"):
            yield from self.outgoing.get(node, {}).values()
        if direction in ("in", "both"):
            yield from self.incoming.get(node, {}).values()

    def between(self, src: bytes, dst: bytes, rel: str | None = None) -> list[Link]:
        return [link for link in self.outgoing.get(src, {}).values() if link.dst == dst and (rel is None or link.rel == rel)]

    def clear(self) -> None:
        self.by_id.clear()
        self.outgoing.clear()
        self.incoming.clear()
