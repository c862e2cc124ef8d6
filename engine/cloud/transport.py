"""The object-store interface the cloud worker uses (CL-3, CL-4), and its bounds.

A transport stores opaque bytes under keys: ``put`` (``replace``: write even when the key
exists, for the delivery marks and for uploads again, CL-5), ``get`` (None when the object is not
there), ``list_after`` (keys under a prefix that sort after a key, in pages) and ``check``
(credentials and bucket reachable). Every call is bounded by the transport's own timeouts
and a maximum size; failures are typed: ``cloud_denied`` (credentials refused),
``cloud_unreachable`` (network, 5xx after the transport's retries).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ObjectStore", "Counters", "MAX_OBJECT_BYTES", "PAGE"]

MAX_OBJECT_BYTES = 64 * 1024 * 1024
PAGE = 1000  # keys per listing request (the S3 maximum)


@dataclass
class Counters:
    """Requests and bytes of one sync (reported; the benchmark divides by objects)."""

    puts: int = 0
    gets: int = 0
    lists: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0

    def to_wire(self) -> dict[str, int]:
        return {
            "puts": self.puts,
            "gets": self.gets,
            "lists": self.lists,
            "sent_bytes": self.sent_bytes,
            "received_bytes": self.received_bytes,
        }


class ObjectStore(Protocol):
    counters: Counters

    async def put(self, key: str, data: bytes, replace: bool = False) -> None: ...

    async def get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> bytes | None: ...

    async def list_after(self, prefix: str, after: str | None, limit: int) -> list[str]: ...

    async def check(self) -> None: ...
