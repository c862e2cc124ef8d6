"""Each refusal of the merge (engine/sync/merge.py) proved by the one check that makes it (SY-1, SY-2).

Issue 27, "Tests that notice a removed check": with any one of these checks removed, a test
here fails. Each hostile bundle is built so that exactly one check can refuse it (every other
part is honest: real devices, real keys, real signatures), and each test asserts which check
refused by the sentence the check names, since several checks share ``sync_rejected``.
Real Services joined by the real handlers exchange the items; the hostile part is sealed or
signed by hand because no honest device would ever make it.
"""

from __future__ import annotations

import os
from hashlib import sha256
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nacl.signing import SigningKey

from engine.crypto.canonical import canonical_bytes, domain_bytes
from engine.crypto.envelope import seal_envelope
from engine.crypto.keys import sign
from engine.errors import MemoriesError
from engine.sync.bundle import EPOCH_KEY_PURPOSE, MAGIC
from engine.sync.merge import merge
from engine.vault.core import AUDIT_TAG
from tests.helpers import PASSWORD
from tests.sync.merge_support import Device, bundle_for, first_device, join, sync, view

Items = list[dict[str, Any]]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Device, Device]:
    a = first_device(tmp_path / "a")
    return a, join(a, tmp_path / "b", "b")


def _chunk(vault: bytes, items: Items) -> list[bytes]:
    return [MAGIC + msgspec.msgpack.encode({"v": 1, "vault": vault, "items": items})]


def _items(chunks: list[bytes]) -> Items:
    return [item for chunk in chunks for item in msgspec.msgpack.decode(chunk[len(MAGIC) :])["items"]]


def _snapshot(device: Device) -> tuple[int, dict[str, tuple[str, ...]], bytes, dict[int, bytes], int]:
    state = device.state
    audits = len(state.extra_records.get("peer_audit", []))
    return device.rows(), view(device), state.vault.policy.head, dict(state.vault.epoch_keys), audits


def _refused(receiver: Device, chunks: list[bytes], *, peer: bytes, because: str) -> None:
    """The merge is refused by the check whose sentence contains ``because``; nothing changed."""
    before = _snapshot(receiver)
    with pytest.raises(MemoriesError) as caught:
        merge(receiver.service.vault, receiver.state, chunks, peer_device=peer, actor=receiver.caller)
    assert caught.value.code == "sync_rejected", caught.value.message
    assert because in caught.value.message, caught.value.message
    assert _snapshot(receiver) == before


def _key_item(sender_key: SigningKey, receiver: Device, vault: bytes, epoch: int, key: bytes) -> dict[str, Any]:
    payload = canonical_bytes({"vault": vault, "epoch": epoch, "key": key})
    exchange = bytes(receiver.state.identity.exchange_key.public_key)
    return {"k": "key", "env": seal_envelope(sender_key, exchange, payload, purpose=EPOCH_KEY_PURPOSE)}


# -- epoch keys ------------------------------------------------------------------------------------


def test_an_epoch_key_sealed_by_a_device_the_policy_does_not_authorize_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-1: the very key B holds, for the current epoch, sealed by a device outside the policy:
    only the sender check can refuse it (the payload agrees with everything B holds)."""
    a, b = pair
    vault = b.state.vault
    stranger = SigningKey.generate()
    item = _key_item(stranger, b, vault.vault_id, vault.policy.epoch, vault.epoch_keys[vault.policy.epoch])
    _refused(b, _chunk(vault.vault_id, [item]), peer=a.device_pub, because="a device the vault policy does not authorize")


def test_a_different_key_for_an_epoch_already_held_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-1 (key substitution): an authorized device seals another key for the epoch B holds;
    B keeps its key, nothing is written."""
    a, b = pair
    vault = b.state.vault
    item = _key_item(a.state.identity.device_key, b, vault.vault_id, vault.policy.epoch, os.urandom(32))
    _refused(b, _chunk(vault.vault_id, [item]), peer=a.device_pub, because="differs from the one this device holds")


def test_a_key_for_a_future_epoch_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-1: a key for an epoch the policy never started (head epoch + 1), sealed by an
    authorized device, is refused: a later rotation must not find a key planted in advance."""
    a, b = pair
    vault = b.state.vault
    future = vault.policy.epoch + 1
    item = _key_item(a.state.identity.device_key, b, vault.vault_id, future, os.urandom(32))
    _refused(b, _chunk(vault.vault_id, [item]), peer=a.device_pub, because="an epoch the policy never started")


# -- the peer ----------------------------------------------------------------------------------------


def test_a_peer_the_head_policy_does_not_authorize_is_refused_by_the_peer_check(
    pair: tuple[Device, Device], tmp_path: Path
) -> None:
    """SY-2: an honest bundle of A's (A's keys, A's revisions) presented as coming from C, a device
    A revoked: refused by the peer check itself. Every item verifies, so no later check (the epoch
    key's sender, the revision's policy) can stand in for it; the same bundle from A merges."""
    a, b = pair
    c = join(a, tmp_path / "c", "c")
    sync(a, b)
    a.do("sudo", password=PASSWORD)
    a.do("device_revoke", device="c")
    a.put("written after the revocation")
    chunks = bundle_for(a, b)
    _refused(b, chunks, peer=c.device_pub, because="The peer device is not authorized by the vault policy")
    _refused(b, chunks, peer=SigningKey.generate().verify_key.encode(), because="The peer device is not authorized")
    report = merge(b.service.vault, b.state, chunks, peer_device=a.device_pub, actor=b.caller)
    assert report.revisions_added == 1 and report.policies_added == 1


# -- audit entries -------------------------------------------------------------------------------------


def _audit(device_key: SigningKey, prev: bytes | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"ts_ms": 1_700_000_000_000, "op": "put", "outcome": "ok"}
    if prev is not None:
        entry["prev"] = prev
    signed = domain_bytes(AUDIT_TAG, 1, entry)
    return {"k": "audit", "signed": signed, "sig": sign(device_key, signed), "device": bytes(device_key.verify_key)}


def test_an_audit_entry_from_a_device_of_no_user_here_is_refused(pair: tuple[Device, Device]) -> None:
    """AU-1/SY-1: a well-formed audit entry with a valid signature by a device the policy does
    not list (so of no user of this vault, and not this user's) is refused; B's log is unchanged."""
    a, b = pair
    vault = b.state.default_vault
    _refused(b, _chunk(vault, [_audit(SigningKey.generate())]), peer=a.device_pub, because="not one of this user's")


def test_an_audit_entry_from_another_users_device_is_refused(pair: tuple[Device, Device], tmp_path: Path) -> None:
    """AU-1: audit entries travel only between one user's devices: an entry truly written and
    signed by another person's device (its own user key, its own vault) is refused by B."""
    a, b = pair
    other = first_device(tmp_path / "other-user", "other")
    other.put("their own note")
    signed = other.state.audit_log[-1]
    entry = {"k": "audit", "signed": signed, "sig": other.state.audit_sigs[sha256(signed).digest()], "device": other.device_pub}
    _refused(b, _chunk(b.state.default_vault, [entry]), peer=a.device_pub, because="not one of this user's")


def test_an_audit_entry_with_a_bad_signature_is_refused(pair: tuple[Device, Device]) -> None:
    """AU-1/SY-1: A's real newest audit entry with one bit of its signature flipped: refused by
    the signature check (its device is A, one of this user's, and its chain position is right)."""
    a, b = pair
    a.put("one note")
    items = _items(bundle_for(a, b))
    audits = [i for i in items if i["k"] == "audit"]
    assert audits, "A's bundle carries its audit entries to B"
    last = audits[-1]
    last["sig"] = bytes([last["sig"][0] ^ 1]) + last["sig"][1:]
    _refused(b, _chunk(b.state.default_vault, items), peer=a.device_pub, because="audit entry's signature does not verify")
    # The same entries with the true signature merge.
    report = merge(b.service.vault, b.state, bundle_for(a, b), peer_device=a.device_pub, actor=b.caller)
    assert report.audits_added == len(audits)


def test_an_audit_entry_in_this_devices_name_that_it_never_wrote_is_refused(pair: tuple[Device, Device]) -> None:
    """AU-1: an entry truly signed by B's own device key that B's log does not hold (B's store was
    rolled back, or the key leaked) is refused when a peer offers it: B's log is B's own record,
    never written by a peer. The signature and the device verify, so only this check can refuse."""
    a, b = pair
    entry = _audit(b.state.identity.device_key)
    _refused(b, _chunk(b.state.default_vault, [entry]), peer=a.device_pub, because="this device never wrote it")
