"""Permission forks and their resolution (SY-3; design in docs/sync.md).

Two devices that each signed a different next policy from the same point hold two branches
of one vault's policy history. Merge never picks one: it records the fork (a sealed
``sync_fork`` record holding the other branch, for ``memories vault fork resolve``) and
raises ``policy_fork``. Only an Owner resolves it, by signing a *resolution* with the user
key:

    {"v": 1, "vault", "base": head of the last common policy, "keep": head of the kept branch,
     "discard": [head of every discarded policy, in order], "discard_digest":
     sha256 over the discarded policies' signed bytes, "signer"}

under the ``memories.fork-resolution`` domain tag. The signer must be Owner on both branches
(in the kept head and in the last discarded policy). A resolution travels with the kept
branch in every bundle; a peer still on the discarded branch switches to the kept one only
with a valid resolution, and merge refuses the discarded branch afterwards. Competing
resolutions of one fork (same base, different kept head) are refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import SignatureError, sign, verify
from engine.errors import MemoriesError
from engine.vault.core import Unlocked
from engine.vault.policy import Policy

__all__ = [
    "RESOLUTION_TAG",
    "FORK_RECORD",
    "RESOLUTION_RECORD",
    "Resolution",
    "discard_digest",
    "sign_resolution",
    "parse_resolution",
    "resolutions_for",
    "forks_for",
]

RESOLUTION_TAG = "memories.fork-resolution"
FORK_RECORD = "sync_fork"
RESOLUTION_RECORD = "sync_fork_resolution"
_ID = 32


def discard_digest(policies: list[Policy]) -> bytes:
    """SHA-256 over the signed bytes of every discarded policy, each length-prefixed, in order."""
    h = hashlib.sha256(b"memories.fork-discard\x00\x01")
    for policy in policies:
        data = policy.signed_bytes
        h.update(len(data).to_bytes(8, "big") + data + policy.signature)
    return h.digest()


@dataclass(frozen=True)
class Resolution:
    body: dict[str, Any]
    signature: bytes

    @property
    def vault_id(self) -> bytes:
        return bytes(self.body["vault"])

    @property
    def base(self) -> bytes:
        return bytes(self.body["base"])

    @property
    def keep(self) -> bytes:
        return bytes(self.body["keep"])

    @property
    def discard(self) -> list[bytes]:
        return [bytes(h) for h in self.body["discard"]]

    @property
    def signer(self) -> bytes:
        return bytes(self.body["signer"])

    def to_record(self) -> dict[str, Any]:
        return {"body": self.body, "sig": self.signature}

    def check(self, kept: list[Policy], discarded: list[Policy]) -> None:
        """Hold the resolution to the two branches it names (both verified chains from ``base``)."""
        if not kept or not discarded:
            raise MemoriesError("sync_rejected", "A fork resolution names an empty branch; nothing was merged.")
        if kept[-1].head != self.keep or [p.head for p in discarded] != self.discard:
            raise MemoriesError("sync_rejected", "A fork resolution does not name these branches; nothing was merged.")
        if discard_digest(discarded) != bytes(self.body["discard_digest"]):
            raise MemoriesError("sync_rejected", "A fork resolution's digest of the discarded chain does not match.")
        signer = self.signer
        if kept[-1].role_of(signer) != "owner" or discarded[-1].role_of(signer) != "owner":
            raise MemoriesError("sync_rejected", "A fork resolution is not signed by an Owner of both branches.")
        try:
            verify(signer, domain_bytes(RESOLUTION_TAG, 1, self.body), self.signature)
        except SignatureError:
            raise MemoriesError("sync_rejected", "A fork resolution's Owner signature does not verify.") from None


def sign_resolution(user_key: Any, vault_id: bytes, base: bytes, kept: list[Policy], discarded: list[Policy]) -> Resolution:
    body = {
        "v": 1,
        "vault": vault_id,
        "base": base,
        "keep": kept[-1].head,
        "discard": [p.head for p in discarded],
        "discard_digest": discard_digest(discarded),
        "signer": bytes(user_key.verify_key),
    }
    return Resolution(body, sign(user_key, domain_bytes(RESOLUTION_TAG, 1, body)))


def parse_resolution(record: object) -> Resolution:
    """Shape checks only; :meth:`Resolution.check` verifies it against the branches."""
    try:
        if not isinstance(record, dict) or set(record) != {"body", "sig"}:
            raise TypeError
        body, sig = record["body"], record["sig"]
        if not isinstance(body, dict) or set(body) != {"v", "vault", "base", "keep", "discard", "discard_digest", "signer"}:
            raise TypeError
        if body["v"] != 1 or not isinstance(sig, bytes) or len(sig) != 64:
            raise TypeError
        for key in ("keep", "discard_digest", "signer"):
            if not isinstance(body[key], bytes) or len(body[key]) != _ID:
                raise TypeError
        if not isinstance(body["vault"], bytes) or not 1 <= len(body["vault"]) <= _ID:
            raise TypeError
        if not isinstance(body["base"], bytes) or len(body["base"]) not in (0, _ID):
            raise TypeError
        if not isinstance(body["discard"], list) or not 0 < len(body["discard"]) <= 10_000:
            raise TypeError
        if any(not isinstance(h, bytes) or len(h) != _ID for h in body["discard"]):
            raise TypeError
    except (TypeError, KeyError):
        raise MemoriesError("sync_invalid", "A fork resolution in the bundle is malformed.") from None
    return Resolution(dict(body), bytes(sig))


def resolutions_for(state: Unlocked, vault_id: bytes) -> list[dict[str, Any]]:
    """The resolution records this device holds for ``vault_id`` (sent with every bundle)."""
    return [
        dict(record["resolution"])
        for _, record in state.extra_records.get(RESOLUTION_RECORD, [])
        if bytes(record["vault"]) == bytes(vault_id)
    ]


def forks_for(state: Unlocked, vault_id: bytes | None = None) -> list[dict[str, Any]]:
    """Recorded, unresolved forks (newest record per fork ID wins; a resolved one drops out)."""
    resolved = {bytes(record["fork"]) for _, record in state.extra_records.get(RESOLUTION_RECORD, []) if "fork" in record}
    out: dict[bytes, dict[str, Any]] = {}
    for _, record in state.extra_records.get(FORK_RECORD, []):
        if vault_id is not None and bytes(record["vault"]) != bytes(vault_id):
            continue
        fork_id = bytes(record["fork"])
        if fork_id not in resolved:
            out[fork_id] = record
    return list(out.values())
