"""Device-bound sync tokens (API-4): what a peer presents on the `/v1/channel` upgrade.

A token is 32 random bytes shown once as ``msync1.<base64url>``. The engine keeps only its
SHA-256 in a sealed state record, bound to one device of the vault policy (the peer device
that will connect). A token is refused when it is revoked (``sync token revoke``), when its
device is revoked or no longer authorized by any shared vault's current policy (checked at
each connection, so revoking the device revokes its tokens), and always compared in
constant time. Records are ``{"t": "sync_token", …}`` and ``{"t": "sync_token_revoked", …}``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any

from engine.crypto.canonical import b64e
from engine.errors import MemoriesError

__all__ = [
    "TOKEN_PREFIX",
    "TOKEN_RECORD",
    "REVOKED_RECORD",
    "TokenInfo",
    "new_token",
    "token_hash",
    "tokens",
    "find_token",
    "revoke_record",
]

TOKEN_PREFIX = "msync1."  # noqa: S105 (a format prefix)
TOKEN_RECORD = "sync_token"  # noqa: S105 (a record kind)
REVOKED_RECORD = "sync_token_revoked"
_TOKEN_BYTES = 32
_MAX_TOKEN_TEXT = 128


@dataclass(frozen=True)
class TokenInfo:
    token_id: bytes
    device: bytes
    name: str
    created_ms: int
    revoked: bool
    digest: bytes

    def view(self) -> dict[str, Any]:
        """What `sync token list` shows: never the digest."""
        return {
            "token_id": self.token_id.hex(),
            "device_id": self.device.hex(),
            "name": self.name,
            "created_ms": self.created_ms,
            "revoked": self.revoked,
        }


def token_hash(text: str) -> bytes:
    return hashlib.sha256(b"memories.sync-token\x00" + text.encode("utf-8", "replace")).digest()


def new_token(device: bytes, name: str, now_ms: int) -> tuple[str, dict[str, Any]]:
    """A fresh token (its only copy, for the caller to show once) and the sealed record to commit."""
    text = TOKEN_PREFIX + b64e(os.urandom(_TOKEN_BYTES))
    record = {
        "t": TOKEN_RECORD,
        "token_id": os.urandom(8),
        "device": bytes(device),
        "name": name[:64],
        "created_ms": now_ms,
        "hash": token_hash(text),
    }
    return text, record


def tokens(extra_records: dict[str, list[tuple[int, dict[str, Any]]]]) -> list[TokenInfo]:
    """Every token this engine issued, oldest first, with its revocation state."""
    revoked = {bytes(record["token_id"]) for _, record in extra_records.get(REVOKED_RECORD, [])}
    return [
        TokenInfo(
            token_id=bytes(record["token_id"]),
            device=bytes(record["device"]),
            name=str(record.get("name", "")),
            created_ms=int(record["created_ms"]),
            revoked=bytes(record["token_id"]) in revoked,
            digest=bytes(record["hash"]),
        )
        for _, record in extra_records.get(TOKEN_RECORD, [])
    ]


def find_token(extra_records: dict[str, list[tuple[int, dict[str, Any]]]], text: str | None) -> TokenInfo:
    """The live token whose digest matches ``text``; ``sync_unauthorized`` otherwise.

    Every stored digest is compared (constant time each), so the time taken does not
    depend on which token matched or how many leading bytes agreed.
    """
    if not text or len(text) > _MAX_TOKEN_TEXT or not text.startswith(TOKEN_PREFIX):
        raise MemoriesError("sync_unauthorized")
    digest = token_hash(text)
    found: TokenInfo | None = None
    for info in tokens(extra_records):
        if hmac.compare_digest(info.digest, digest) and not info.revoked:
            found = info
    if found is None:
        raise MemoriesError("sync_unauthorized")
    return found


def revoke_record(token_id: bytes, now_ms: int) -> dict[str, Any]:
    return {"t": REVOKED_RECORD, "token_id": bytes(token_id), "revoked_ms": now_ms}
