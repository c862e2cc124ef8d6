"""Ed25519 user and device keys, X25519 exchange keys and device certificates (ID-1)."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import domain_bytes
from engine.crypto.libsodium import ed25519_sign_detached, ed25519_verify_detached
from engine.crypto.two_cores import map_in_two_halves

__all__ = [
    "DeviceIdentity",
    "SignatureError",
    "new_identity",
    "sign",
    "sign_many",
    "verify",
    "fingerprint",
    "certificate_body",
    "CERT_TAG",
]

CERT_TAG = "memories.device-cert"


class SignatureError(Exception):
    """A signature did not verify."""


def sign(key: SigningKey, message: bytes) -> bytes:
    # PyNaCl keeps the 64-byte libsodium secret key on the object; signing with it directly
    # gives the same signature (Ed25519 is deterministic) without PyNaCl's copies.
    secret = getattr(key, "_signing_key", None)
    if isinstance(secret, bytes) and len(secret) == 64:
        return ed25519_sign_detached(secret, bytes(message))
    return bytes(key.sign(message).signature)


# Below this many messages a second thread costs more than it saves.
_SIGN_MANY_PARALLEL = 64


def sign_many(key: SigningKey, messages: Sequence[bytes]) -> list[bytes]:
    """``[sign(key, m) for m in messages]``, on two cores when there are many (issue 32: a bulk
    import or a restore signs one revision per note).

    libsodium signs without the GIL, and each thread runs a tight loop whose Python part is a
    few microseconds per ~25 us signature, so the two seldom wait for each other (a thread
    beside Python-heavy work would wait for the GIL at every signature instead).
    """
    return map_in_two_halves(lambda _, message: sign(key, message), messages, minimum=_SIGN_MANY_PARALLEL, name="memories-sign")


def verify(public_key: bytes, message: bytes, signature: bytes) -> None:
    if not ed25519_verify_detached(bytes(public_key), bytes(message), bytes(signature)):
        raise SignatureError("signature did not verify")


def fingerprint(public_key: bytes) -> str:
    """Full SHA-256 fingerprint (ID-4); displays may shorten it, checks never do."""
    return hashlib.sha256(public_key).hexdigest()


def certificate_body(user_pub: bytes, device_pub: bytes, exchange_pub: bytes, created_ms: int) -> dict[str, Any]:
    return {
        "v": 1,
        "user": user_pub,
        "device": device_pub,
        "exchange": exchange_pub,
        "created_ms": created_ms,
    }


@dataclass
class DeviceIdentity:
    """The user key, this device's signing and exchange keys, and its certificate."""

    user_key: SigningKey
    device_key: SigningKey
    exchange_key: PrivateKey
    certificate: dict[str, Any]
    certificate_sig: bytes

    # Cached: an unlock compares every revision's author with this device (check_revision),
    # and the keys of an identity never change (a new identity is a new object).
    @functools.cached_property
    def device_pub(self) -> bytes:
        return bytes(self.device_key.verify_key)

    @functools.cached_property
    def user_pub(self) -> bytes:
        return bytes(self.user_key.verify_key)

    @functools.cached_property
    def certificate_hash(self) -> bytes:
        return hashlib.sha256(domain_bytes(CERT_TAG, 1, self.certificate)).digest()

    def to_record(self) -> dict[str, Any]:
        return {
            "user_sk": bytes(self.user_key),
            "device_sk": bytes(self.device_key),
            "exchange_sk": bytes(self.exchange_key),
            "certificate": self.certificate,
            "certificate_sig": self.certificate_sig,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> DeviceIdentity:
        identity = cls(
            user_key=SigningKey(record["user_sk"]),
            device_key=SigningKey(record["device_sk"]),
            exchange_key=PrivateKey(record["exchange_sk"]),
            certificate=record["certificate"],
            certificate_sig=record["certificate_sig"],
        )
        identity.verify_certificate()
        return identity

    def verify_certificate(self) -> None:
        cert = self.certificate
        if cert.get("device") != self.device_pub or cert.get("user") != self.user_pub:
            raise SignatureError("certificate does not name this device")
        verify(self.user_pub, domain_bytes(CERT_TAG, 1, cert), self.certificate_sig)


def new_identity() -> DeviceIdentity:
    user_key = SigningKey.generate()
    device_key = SigningKey.generate()
    exchange_key = PrivateKey.generate()
    cert = certificate_body(
        bytes(user_key.verify_key),
        bytes(device_key.verify_key),
        bytes(exchange_key.public_key),
        int(time.time() * 1000),
    )
    return DeviceIdentity(
        user_key=user_key,
        device_key=device_key,
        exchange_key=exchange_key,
        certificate=cert,
        certificate_sig=sign(user_key, domain_bytes(CERT_TAG, 1, cert)),
    )
