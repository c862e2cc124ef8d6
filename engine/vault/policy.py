"""Signed vault policy (PO-1). This version creates the owner-only policy at epoch 1."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import DeviceIdentity, sign, verify

__all__ = ["Policy", "POLICY_TAG", "owner_policy"]

POLICY_TAG = "memories.policy"
ROLES = ("owner", "admin", "editor", "reader")


@dataclass
class Policy:
    body: dict[str, Any]
    signature: bytes

    @functools.cached_property
    def signed_bytes(self) -> bytes:
        return domain_bytes(POLICY_TAG, 1, self.body)

    @functools.cached_property
    def head(self) -> bytes:
        """The policy head: SHA-256 of the signed bytes; revisions sign it (HI-2)."""
        return hashlib.sha256(self.signed_bytes).digest()

    @property
    def epoch(self) -> int:
        return int(self.body["epoch"])

    def authorizes_device(self, device_pub: bytes) -> bool:
        return device_pub in self.body["devices"] and device_pub not in self.body["revoked"]

    def verify(self) -> None:
        """Verify against the signer named in the policy (an Owner for the genesis policy)."""
        signer = self.body["signer"]
        owners = [m["user"] for m in self.body["members"] if m["role"] == "owner"]
        if signer not in owners:
            from engine.crypto.keys import SignatureError

            raise SignatureError("policy signer is not an owner")
        verify(signer, self.signed_bytes, self.signature)

    def to_record(self) -> dict[str, Any]:
        return {"body": self.body, "sig": self.signature}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Policy:
        policy = cls(body=record["body"], signature=record["sig"])
        policy.verify()
        return policy


def owner_policy(identity: DeviceIdentity, vault_id: bytes) -> Policy:
    body = {
        "v": 1,
        "vault": vault_id,
        "seq": 1,
        "prev": None,
        "epoch": 1,
        "members": [{"user": identity.user_pub, "role": "owner"}],
        "devices": [identity.device_pub],
        "revoked": [],
        "signer": identity.user_pub,
    }
    return Policy(body=body, signature=sign(identity.user_key, domain_bytes(POLICY_TAG, 1, body)))
