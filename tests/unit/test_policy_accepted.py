"""SY-6: a revocation may record the revoked device's accepted revisions (engine/vault/policy.py).

The ``accepted`` field is optional, signed with the policy, allowed only in a policy that
revokes a device, and type- and length-checked; a genesis never carries it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import new_identity, sign
from engine.errors import MemoriesError
from engine.vault.joining import make_certificate
from engine.vault.policy import (
    POLICY_TAG,
    AddDevice,
    Policy,
    RevokeDevice,
    RotateEpoch,
    check_transition,
    owner_policy,
    propose,
    verify_chain,
)

OWNER = new_identity()
OTHER = new_identity()


def _chain() -> list[Policy]:
    genesis = owner_policy(OWNER, os.urandom(16), with_certificate=True)
    cert, sig = make_certificate(OWNER.user_key, OTHER.device_pub, bytes(OTHER.exchange_key.public_key), 1)
    added = propose(genesis, OWNER.user_key, AddDevice(cert, sig))
    return [genesis, added]


def _resigned(prev: Policy, body: dict[str, Any]) -> Policy:
    return Policy(body=body, signature=sign(OWNER.user_key, domain_bytes(POLICY_TAG, 1, body)))


def test_a_revocation_records_accepted_heads() -> None:
    chain = _chain()
    heads = [os.urandom(32) for _ in range(3)]
    revoked = propose(chain[-1], OWNER.user_key, RevokeDevice(OTHER.device_pub), accepted=heads)
    assert sorted(revoked.accepted()) == sorted(heads)
    assert verify_chain([*chain, revoked]) == revoked
    # Nothing accepted: no field at all (the bytes of such policies are as before).
    bare = propose(chain[-1], OWNER.user_key, RevokeDevice(OTHER.device_pub))
    assert "accepted" not in bare.body and bare.accepted() == []


def test_accepted_only_in_a_revocation_and_well_formed() -> None:
    chain = _chain()
    rotated = propose(chain[-1], OWNER.user_key, RotateEpoch(), accepted=[os.urandom(32)])
    assert "accepted" not in rotated.body  # ignored for a change that revokes nothing
    forged = _resigned(chain[-1], {**rotated.body, "accepted": [os.urandom(32)]})
    with pytest.raises(MemoriesError) as caught:
        check_transition(chain[-1], forged)
    assert caught.value.code == "policy_invalid"
    good = propose(chain[-1], OWNER.user_key, RevokeDevice(OTHER.device_pub), accepted=[os.urandom(32)])
    for bad in ([], [b"short"], [bytes(32), bytes(32)], "x"):
        with pytest.raises(MemoriesError) as caught:
            check_transition(chain[-1], _resigned(chain[-1], {**good.body, "accepted": bad}))
        assert caught.value.code == "policy_invalid", bad
    genesis = chain[0]
    with pytest.raises(MemoriesError):
        verify_chain([_resigned(genesis, {**genesis.body, "accepted": [os.urandom(32)]})])
