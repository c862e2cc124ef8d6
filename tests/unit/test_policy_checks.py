"""Each check of the signed vault policy fails on its own (PO-1, ID-1, HI-2).

The format-vector test recomputes the policy head itself; these tests hold the code under
test to the documented vector and prove that every refusal in engine/vault/policy.py (and
the service's per-revision policy check) refuses by itself.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import DeviceIdentity, SignatureError, new_identity, sign
from engine.store.database import StoreFile
from engine.vault.core import VaultCore, VaultKeys
from engine.vault.policy import POLICY_TAG, Policy, owner_policy
from engine.vault.revision import Revision, build_revision
from tests.helpers import PASSWORD, Cli
from tests.unit.test_format_vectors import DEVICE, DEVICE_PUB, USER, USER_PUB, VAULT, documented_vectors

VAULT_ID = b"\x11" * 16


def _signed(key: SigningKey, body: dict[str, Any]) -> Policy:
    return Policy(body=body, signature=sign(key, domain_bytes(POLICY_TAG, 1, body)))


def _owner_body(identity: DeviceIdentity, **changes: Any) -> dict[str, Any]:
    return {**owner_policy(identity, VAULT_ID).body, **changes}


def test_owner_policy_verifies_and_round_trips() -> None:
    """PO-1 control: the genesis policy verifies and survives its record round trip."""
    identity = new_identity()
    policy = Policy.from_record(owner_policy(identity, VAULT_ID).to_record())
    assert policy.authorizes_device(identity.device_pub)
    assert policy.epoch == 1


@pytest.mark.parametrize("where", ["signature", "body"])
def test_tampered_policy_signature_is_refused(where: str) -> None:
    """PO-1: a policy whose signature does not cover its exact body is refused on load."""
    identity = new_identity()
    record = owner_policy(identity, VAULT_ID).to_record()
    if where == "signature":
        record["sig"] = bytes([record["sig"][0] ^ 1]) + record["sig"][1:]
    else:  # an extra device slipped in after signing
        record["body"] = dict(record["body"], devices=[*record["body"]["devices"], b"\x07" * 32])
    with pytest.raises(SignatureError):
        Policy.from_record(record)


def test_policy_signed_by_a_non_owner_is_refused() -> None:
    """PO-1: a correctly signed policy whose signer is not an Owner of it is refused."""
    identity = new_identity()
    outsider = SigningKey.generate()
    body = _owner_body(identity, signer=bytes(outsider.verify_key))
    with pytest.raises(SignatureError, match="not an owner"):
        Policy.from_record(_signed(outsider, body).to_record())
    # A member with a lesser role is not an Owner either.
    admin = SigningKey.generate()
    members = [*body["members"], {"user": bytes(admin.verify_key), "role": "admin"}]
    with pytest.raises(SignatureError, match="not an owner"):
        Policy.from_record(_signed(admin, dict(body, members=members, signer=bytes(admin.verify_key))).to_record())


def test_unlisted_and_revoked_devices_are_not_authorized() -> None:
    """ID-1/PO-1: a certificate alone grants nothing; a revoked device stays refused while listed."""
    identity = new_identity()
    other = new_identity()
    policy = owner_policy(identity, VAULT_ID)
    assert policy.authorizes_device(identity.device_pub)
    assert not policy.authorizes_device(other.device_pub)  # same user key would not help either
    revoked = _signed(identity.user_key, _owner_body(identity, revoked=[identity.device_pub]))
    revoked.verify()
    assert not revoked.authorizes_device(identity.device_pub)


def test_policy_head_of_the_code_matches_the_documented_vector() -> None:
    """HI-2: the head revisions sign is computed by Policy.head (not recomputed by the test)."""
    vectors = documented_vectors()
    body = {
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
    policy = Policy(body=body, signature=bytes.fromhex(vectors["policy_signature"]))
    policy.verify()
    assert policy.head.hex() == vectors["policy_head"]
    # owner_policy builds and signs exactly those bytes with the user key.
    made = owner_policy(dataclasses.replace(new_identity(), user_key=USER, device_key=DEVICE), VAULT)
    assert made.body == body
    assert made.signature.hex() == vectors["policy_signature"]
    assert made.head.hex() == vectors["policy_head"]


# -- the per-revision check the service runs at unlock -----------------------------------------


def _revision(identity: DeviceIdentity, policy: Policy) -> Revision:
    return build_revision(
        identity=identity,
        vault_id=VAULT_ID,
        policy_head=policy.head,
        epoch=1,
        epoch_key=b"\x22" * 32,
        asset_id=b"\x33" * 16,
        kind="memory",
        parents=[],
        tombstone=False,
        summary={"title": "t"},
        body=b"body",
        content_seqs=[1],
    ).revision


def _vaults(policy: Policy) -> dict[bytes, VaultKeys]:
    return {VAULT_ID: VaultKeys(VAULT_ID, "default", policy, {1: b"\x22" * 32})}


def test_revision_checks_policy_head_and_device() -> None:
    """HI-2/PO-1: a revision is accepted only under the current policy head, from a listed,
    unrevoked device; each condition refuses by itself."""
    identity = new_identity()
    policy = owner_policy(identity, VAULT_ID)
    VaultCore.check_revision(_revision(identity, policy), identity, _vaults(policy))  # control

    stale = _signed(identity.user_key, _owner_body(identity, seq=2))  # same devices, other head
    with pytest.raises(SignatureError):
        VaultCore.check_revision(_revision(identity, stale), identity, _vaults(policy))

    stranger = dataclasses.replace(new_identity(), user_key=identity.user_key)
    with pytest.raises(SignatureError):
        VaultCore.check_revision(_revision(stranger, policy), identity, _vaults(policy))

    revoked = _signed(identity.user_key, _owner_body(identity, revoked=[identity.device_pub]))
    with pytest.raises(SignatureError):
        VaultCore.check_revision(_revision(identity, revoked), identity, _vaults(revoked))


# -- the same refusals through a real unlock ------------------------------------------------------


def _append_vault_record(home: Path, change: Any) -> None:
    """Append a re-sealed copy of the vault record, changed by ``change(record, identity)``."""
    store = StoreFile.open(home / "store.db")
    try:
        store.install_master(store.check_password(PASSWORD))
        records = [record for _, record in store.load().records]
        identity = DeviceIdentity.from_record(next(r for r in records if r.get("t") == "identity"))
        vault = next(r for r in records if r.get("t") == "vault")
        store.commit([change(dict(vault), identity)])
    finally:
        store.close()


def _forged_signature(record: dict[str, Any], identity: DeviceIdentity) -> dict[str, Any]:
    policy = dict(record["policy"])
    policy["sig"] = bytes([policy["sig"][0] ^ 1]) + bytes(policy["sig"][1:])
    return dict(record, policy=policy)


def _outsider_signed(record: dict[str, Any], identity: DeviceIdentity) -> dict[str, Any]:
    outsider = SigningKey.generate()
    body = dict(record["policy"]["body"], signer=bytes(outsider.verify_key))
    return dict(record, policy=_signed(outsider, body).to_record())


@pytest.mark.parametrize("change", [_forged_signature, _outsider_signed], ids=["tampered", "non-owner"])
def test_unlock_refuses_a_bad_policy_record(vault: Cli, change: Any) -> None:
    """PO-1: a stored policy with a bad signature or a non-owner signer makes unlock fail with
    store_corrupt (the record is sealed with the right master key, so only the policy check
    can catch it; the vault has no revisions that would fail for another reason)."""
    vault.stop()
    _append_vault_record(vault.home, lambda record, identity: record)  # control: a faithful copy
    vault.unlock()
    vault.stop()
    _append_vault_record(vault.home, change)
    assert vault.err("unlock", "--password-stdin", input=PASSWORD + "\n")["code"] == "store_corrupt"
    assert vault.ok("status")["state"] == "locked"


def test_fresh_vault_has_no_revisions(vault: Cli) -> None:
    """Premise of the unlock test above: init writes no revision, so nothing but the policy fails."""
    vault.stop()
    conn = sqlite3.connect(vault.home / "store.db")
    rows = conn.execute("SELECT COUNT(*) FROM state").fetchone()[0]
    conn.close()
    store = StoreFile.open(vault.home / "store.db")
    try:
        store.install_master(store.check_password(PASSWORD))
        kinds = [record.get("t") for _, record in store.load().records]
    finally:
        store.close()
    assert len(kinds) == rows and "revision" not in kinds
