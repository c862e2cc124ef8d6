"""docs/formats.md test vectors: the signed and encrypted bytes are defined exactly."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

from nacl import bindings
from nacl.signing import SigningKey

from engine.crypto.canonical import canonical_bytes, domain_bytes
from engine.crypto.chunks import _aad as chunk_aad
from engine.crypto.keys import CERT_TAG
from engine.service.service import AUDIT_TAG
from engine.store.database import _chain_next, _state_aad
from engine.vault.policy import POLICY_TAG
from engine.vault.revision import REVISION_TAG

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"

USER = SigningKey(bytes(range(32)))
DEVICE = SigningKey(bytes(range(32, 64)))
USER_PUB = bytes(USER.verify_key)
DEVICE_PUB = bytes(DEVICE.verify_key)
EXCHANGE_PUB = bytes(range(64, 96))
VAULT = bytes.fromhex("00112233445566778899aabbccddeeff")
ASSET = bytes.fromhex("0f0e0d0c0b0a09080706050403020100")
KEY = bytes(range(100, 132))
NONCE = bytes(range(24))


def compute_vectors() -> dict[str, str]:
    vectors: dict[str, str] = {}
    sample = {"b": [1, True, None], "a": "é", "c": b"\x00\xff"}
    vectors["canonical_sample"] = canonical_bytes(sample).hex()

    cert = {"v": 1, "user": USER_PUB, "device": DEVICE_PUB, "exchange": EXCHANGE_PUB, "created_ms": 1700000000000}
    cert_bytes = domain_bytes(CERT_TAG, 1, cert)
    vectors["certificate_sha256"] = hashlib.sha256(cert_bytes).hexdigest()
    vectors["certificate_signature"] = USER.sign(cert_bytes).signature.hex()

    policy = {
        "v": 1,
        "vault": VAULT,
        "seq": 1,
        "prev": None,
        "epoch": 1,
        "members": [{"user": USER_PUB, "role": "owner"}],
        "devices": [DEVICE_PUB],
        "revoked": [],
        "signer": USER_PUB,
    }
    policy_bytes = domain_bytes(POLICY_TAG, 1, policy)
    policy_head = hashlib.sha256(policy_bytes).digest()
    vectors["policy_head"] = policy_head.hex()
    vectors["policy_signature"] = USER.sign(policy_bytes).signature.hex()

    revision = {
        "v": 1,
        "vault": VAULT,
        "asset": ASSET,
        "kind": "memory",
        "parents": [],
        "policy": policy_head,
        "tombstone": False,
        "epoch": 1,
        "wrapped_key": b"\x01" * 72,
        "summary": [b"\x02" * 60],
        "body": [hashlib.sha256(b"\x03" * 50).digest()],
        "body_len": 10,
        "device": DEVICE_PUB,
        "cert": hashlib.sha256(cert_bytes).digest(),
        "created_ms": 1700000000001,
    }
    revision_bytes = domain_bytes(REVISION_TAG, 1, revision)
    vectors["revision_id"] = hashlib.sha256(revision_bytes).hexdigest()
    vectors["revision_signature"] = DEVICE.sign(revision_bytes).signature.hex()
    # Format 2 (issue 32): the body deflated before sealing; version byte and "v" 2, body_z its
    # inflated length, body_len and the digests those of the stream.
    compressed = {**revision, "v": 2, "body_z": 4096}
    compressed_bytes = domain_bytes(REVISION_TAG, 2, compressed)
    vectors["revision_format2_id"] = hashlib.sha256(compressed_bytes).hexdigest()
    vectors["revision_format2_signature"] = DEVICE.sign(compressed_bytes).signature.hex()

    audit = {
        "v": 1,
        "op": "get",
        "caller": "cli:1",
        "surface": "ipc",
        "ts_ms": 1700000000002,
        "nonce": b"\x00" * 8,
        "phase": "intent",
        "assets": [ASSET],
    }
    vectors["audit_signature"] = DEVICE.sign(domain_bytes(AUDIT_TAG, 1, audit)).signature.hex()

    aad = chunk_aad(ASSET + b"body", 1, 3)
    vectors["chunk_aad"] = aad.hex()
    sealed = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(b"hello", aad, NONCE, KEY)
    vectors["chunk_ciphertext"] = (NONCE + sealed).hex()

    vectors["state_aad_seq_7"] = _state_aad(7).hex()
    start = hashlib.sha256(b"memories.chain\x00\x01").digest()
    vectors["chain_after_seq_1"] = _chain_next(start, 1, b"\x01" + b"\xaa" * 40).hex()
    vectors["seq_be64"] = struct.pack(">Q", 7).hex()
    return vectors


def documented_vectors() -> dict[str, str]:
    text = DOC.read_text("utf-8")
    block = re.search(r"```vectors\n(.*?)```", text, re.S)
    assert block, "docs/formats.md must hold a ```vectors block"
    pairs = (line.split("=", 1) for line in block.group(1).splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def test_documented_vectors_match_the_code() -> None:
    assert documented_vectors() == compute_vectors()


if __name__ == "__main__":  # regenerate: python -m tests.unit.test_format_vectors
    for name, value in compute_vectors().items():
        print(f"{name} = {value}")
