"""The rules of the signed vault policy history (PO-1, PO-2, ID-1, HI-2).

Pure and fast: every policy here is built and signed with real Ed25519 keys and checked by
engine/vault/policy.py exactly as the engine will check one that arrives from another device.
tests/unit/test_policy_checks.py covers the genesis policy's own checks and its use at unlock;
this file covers changes: who may make which change (a role matrix), each rule of
``check_transition`` on its own, tampering and replay, and a property test over random
histories.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import CERT_TAG, DeviceIdentity, certificate_body, fingerprint, sign
from engine.errors import MemoriesError
from engine.vault.policy import (
    POLICY_TAG,
    AddDevice,
    AddMember,
    Change,
    Policy,
    RemoveMember,
    RevokeDevice,
    RotateEpoch,
    SetRole,
    TransferOwnership,
    check_transition,
    owner_policy,
    propose,
    verify_chain,
)
from tests.helpers import require

VAULT = b"\x5a" * 16
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "store-v1" / "store.db"
FIXTURE_PASSWORD = "fixture password: not a secret"  # public on purpose (tests/data/make_store_fixture.py)


# -- a cast of users, each with two devices -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Device:
    key: SigningKey
    cert: dict[str, Any]
    sig: bytes

    @property
    def pub(self) -> bytes:
        return bytes(self.key.verify_key)

    def add(self) -> AddDevice:
        return AddDevice(self.cert, self.sig)


@dataclasses.dataclass(frozen=True)
class Person:
    name: str
    key: SigningKey
    devices: tuple[Device, Device]

    @property
    def user(self) -> bytes:
        return bytes(self.key.verify_key)

    def identity(self) -> DeviceIdentity:
        first = self.devices[0]
        return DeviceIdentity(self.key, first.key, PrivateKey(bytes(range(32))), first.cert, first.sig)


def _device(user: SigningKey, seed: int) -> Device:
    key = SigningKey(bytes([seed]) * 32)
    cert = certificate_body(bytes(user.verify_key), bytes(key.verify_key), bytes(PrivateKey(bytes([seed]) * 32).public_key), 1)
    return Device(key, cert, sign(user, domain_bytes(CERT_TAG, 1, cert)))


def _person(name: str, seed: int) -> Person:
    key = SigningKey(bytes([seed]) * 32)
    return Person(name, key, (_device(key, seed + 100), _device(key, seed + 101)))


NAMES = ("owner", "admin", "admin2", "editor", "reader", "outsider", "newcomer")
CAST = {name: _person(name, 10 + 2 * i) for i, name in enumerate(NAMES)}
OWNER, ADMIN, ADMIN2, EDITOR, READER, OUTSIDER, NEWCOMER = (CAST[n] for n in NAMES)


@functools.cache
def team() -> tuple[Policy, ...]:
    """A legacy genesis (as `memories init` makes it today), then the owner builds a team:
    admin, admin2, editor and reader, each with their first device authorized."""
    chain = [owner_policy(OWNER.identity(), VAULT)]
    first = OWNER.devices[0]
    roles = {"admin": ADMIN, "admin2": ADMIN2, "editor": EDITOR, "reader": READER}
    for role, person in roles.items():
        change = AddMember(person.user, role.rstrip("2"))
        chain.append(propose(chain[-1], OWNER.key, change, certificates=[(first.cert, first.sig)]))
    for person in roles.values():
        chain.append(propose(chain[-1], OWNER.key, person.devices[0].add()))
    return tuple(chain)


def head() -> Policy:
    return team()[-1]


def code_of(action: Callable[[], object]) -> str:
    with pytest.raises(MemoriesError) as caught:
        action()
    return caught.value.code


def resign(prev: Policy, key: SigningKey, **changes: Any) -> Policy:
    """A hand-built successor of ``prev``: its body with ``changes``, linked and signed by ``key``."""
    body = {**prev.body, "seq": prev.seq + 1, "prev": prev.head, "signer": bytes(key.verify_key), **changes}
    return Policy(body=body, signature=sign(key, domain_bytes(POLICY_TAG, 1, body)))


def members_with(prev: Policy, **roles: str | None) -> list[dict[str, Any]]:
    """prev's member list with CAST[name]'s role set (None removes; new names are appended)."""
    current = prev.members()
    for name, role in roles.items():
        if role is None:
            current.pop(CAST[name].user, None)
        else:
            current[CAST[name].user] = role
    return [{"user": user, "role": role} for user, role in current.items()]


def test_team_history_verifies_and_answers_lookups() -> None:
    """PO-1/ID-1 control: the team history verifies; lookups name users, roles and exchange keys."""
    policy = verify_chain(list(team()))
    assert policy is head()
    assert policy.seq == len(team()) and policy.prev == team()[-2].head and policy.epoch == 1
    assert policy.owners() == [OWNER.user]
    assert policy.members() == {
        OWNER.user: "owner",
        ADMIN.user: "admin",
        ADMIN2.user: "admin",
        EDITOR.user: "editor",
        READER.user: "reader",
    }
    assert policy.role_of(EDITOR.user) == "editor" and policy.role_of(OUTSIDER.user) is None
    for person in (OWNER, ADMIN, EDITOR, READER):
        device = person.devices[0]
        assert policy.authorizes_device(device.pub)
        assert policy.device_user(device.pub) == person.user
        assert policy.exchange_key(device.pub) == device.cert["exchange"]
        assert not policy.authorizes_device(person.devices[1].pub)
        assert policy.device_user(person.devices[1].pub) is None
    # The first change after the legacy genesis attached the genesis device's certificate.
    assert team()[1].certificates()[OWNER.devices[0].pub] == (OWNER.devices[0].cert, OWNER.devices[0].sig)


# -- the PO-2 role matrix -------------------------------------------------------------------------

OK = "ok"
INV = "policy_invalid"
FORB = "policy_forbidden"


def _other_members_device(signer: Person) -> AddDevice:
    return (EDITOR if signer is READER else READER).devices[1].add()


CHANGES: dict[str, Callable[[Person], Change]] = {
    "add admin": lambda s: AddMember(NEWCOMER.user, "admin"),
    "add editor": lambda s: AddMember(NEWCOMER.user, "editor"),
    "add reader": lambda s: AddMember(NEWCOMER.user, "reader"),
    "add owner": lambda s: AddMember(NEWCOMER.user, "owner"),
    "remove owner": lambda s: RemoveMember(OWNER.user),
    "remove admin": lambda s: RemoveMember(ADMIN2.user),
    "remove editor": lambda s: RemoveMember(EDITOR.user),
    "remove reader": lambda s: RemoveMember(READER.user),
    "set role admin->editor": lambda s: SetRole(ADMIN2.user, "editor"),
    "set role to owner": lambda s: SetRole(EDITOR.user, "owner"),
    "revoke device": lambda s: RevokeDevice(EDITOR.devices[0].pub),
    "transfer ownership": lambda s: TransferOwnership(ADMIN2.user),
    "rotate epoch": lambda s: RotateEpoch(),
    "add own device": lambda s: s.devices[1].add(),
    "add another member's device": _other_members_device,
}

#                               owner admin editor reader outsider
MATRIX: dict[str, tuple[str, str, str, str, str]] = {
    "add admin": (OK, OK, FORB, FORB, FORB),
    "add editor": (OK, OK, FORB, FORB, FORB),
    "add reader": (OK, OK, FORB, FORB, FORB),
    "add owner": (INV, FORB, FORB, FORB, FORB),  # an Owner may, but a vault has exactly one Owner
    "remove owner": (INV, FORB, FORB, FORB, FORB),  # the Owner removing itself leaves none
    "remove admin": (OK, OK, FORB, FORB, FORB),
    "remove editor": (OK, OK, FORB, FORB, FORB),
    "remove reader": (OK, OK, FORB, FORB, FORB),
    "set role admin->editor": (OK, OK, FORB, FORB, FORB),
    "set role to owner": (INV, FORB, FORB, FORB, FORB),  # a second Owner; transfer is the way
    "revoke device": (OK, FORB, FORB, FORB, FORB),
    "transfer ownership": (OK, FORB, FORB, FORB, FORB),
    "rotate epoch": (OK, FORB, FORB, FORB, FORB),
    "add own device": (OK, OK, OK, OK, FORB),
    "add another member's device": (OK, OK, FORB, FORB, FORB),
}
SIGNERS = (OWNER, ADMIN, EDITOR, READER, OUTSIDER)
BUMPS = {"remove owner", "remove admin", "remove editor", "remove reader", "revoke device", "rotate epoch"}


@pytest.mark.parametrize(
    ("change_name", "signer", "expected"),
    [
        pytest.param(change, signer, MATRIX[change][i], id=f"{signer.name}-{change}")
        for change in MATRIX
        for i, signer in enumerate(SIGNERS)
    ],
)
def test_role_matrix(change_name: str, signer: Person, expected: str) -> None:
    """PO-2: each role may make exactly the changes the SPEC gives it (roles from the previous
    policy, PO-1); every refusal is typed and returns nothing."""
    prev = head()
    before = dict(prev.body)
    change = CHANGES[change_name](signer)
    if expected != OK:
        assert code_of(lambda: propose(prev, signer.key, change)) == expected
        assert prev.body == before  # nothing changed
        return
    new = propose(prev, signer.key, change)
    assert verify_chain([*team(), new]) is new
    assert new.signer == signer.user and new.seq == prev.seq + 1 and new.prev == prev.head
    assert new.epoch == prev.epoch + (1 if change_name in BUMPS else 0)
    assert len(new.owners()) == 1


def test_matrix_effects() -> None:
    """PO-2: the allowed changes do what they say: removal revokes the member's devices,
    a transfer keeps exactly one Owner and makes the old Owner an Admin, a device of one's
    own joins without any membership change."""
    prev = head()
    removed = propose(prev, ADMIN.key, RemoveMember(EDITOR.user))
    assert removed.role_of(EDITOR.user) is None
    assert not removed.authorizes_device(EDITOR.devices[0].pub) and EDITOR.devices[0].pub in removed.revoked()
    assert removed.device_user(EDITOR.devices[0].pub) == EDITOR.user  # still known, for old revisions
    assert removed.exchange_key(EDITOR.devices[0].pub) is None  # no new epoch key goes to it

    moved = propose(prev, OWNER.key, TransferOwnership(ADMIN2.user))
    assert moved.owners() == [ADMIN2.user] and moved.role_of(OWNER.user) == "admin"

    own = propose(prev, READER.key, READER.devices[1].add())
    assert own.members() == prev.members() and own.authorizes_device(READER.devices[1].pub)
    assert own.device_user(READER.devices[1].pub) == READER.user


# -- each check on its own --------------------------------------------------------------------------


def test_signature_check() -> None:
    """PO-1: a policy whose signature does not verify with its signer's key is refused:
    a flipped signature byte, the body changed after signing, and a key other than the signer's."""
    prev = head()
    good = propose(prev, OWNER.key, AddMember(NEWCOMER.user, "reader"))
    check_transition(prev, good)  # control
    flipped = Policy(good.body, bytes([good.signature[0] ^ 1]) + good.signature[1:])
    assert code_of(lambda: check_transition(prev, flipped)) == INV
    changed = Policy({**good.body, "members": members_with(good, newcomer="admin")}, good.signature)
    assert code_of(lambda: check_transition(prev, changed)) == INV
    # Signed by the outsider but naming the Owner as signer.
    forged = resign(prev, OUTSIDER.key, members=members_with(prev, newcomer="reader"), signer=OWNER.user)
    assert code_of(lambda: check_transition(prev, forged)) == INV


def test_signer_must_be_a_member_of_the_previous_policy() -> None:
    """PO-1: a correctly signed change by a non-member is refused, also when that change makes
    the signer a member (its authority must come from the previous policy)."""
    prev = head()
    stranger = resign(prev, OUTSIDER.key, members=members_with(prev, newcomer="reader"))
    assert code_of(lambda: check_transition(prev, stranger)) == FORB
    self_admitted = resign(prev, NEWCOMER.key, members=members_with(prev, newcomer="admin"))
    assert code_of(lambda: check_transition(prev, self_admitted)) == FORB
    # What any member may do (authorize a device of their own) a non-member may not.
    assert code_of(lambda: propose(prev, OUTSIDER.key, OUTSIDER.devices[0].add())) == FORB
    control = resign(prev, ADMIN.key, members=members_with(prev, newcomer="admin"))
    check_transition(prev, control)


def test_role_is_taken_from_the_previous_policy() -> None:
    """PO-1: an Admin who makes themself Owner (and the Owner an Admin) in the same policy is
    refused, though the new policy would call them Owner; likewise an Editor who promotes
    themself to Admin while adding a member."""
    prev = head()
    coup = resign(prev, ADMIN.key, members=members_with(prev, owner="admin", admin="owner"))
    assert len(coup.owners()) == 1
    assert code_of(lambda: check_transition(prev, coup)) == FORB
    climb = resign(prev, EDITOR.key, members=members_with(prev, editor="admin", newcomer="reader"))
    assert code_of(lambda: check_transition(prev, climb)) == FORB
    # Control: the same coup signed by the actual Owner is an allowed transfer.
    check_transition(prev, resign(prev, OWNER.key, members=coup.body["members"]))


def test_only_listed_unrevoked_devices_are_authorized() -> None:
    """ID-1/PO-1: a device whose author key the policy does not list is not authorized, even
    with a valid certificate from a member's user key; a revoked device is not either."""
    prev = head()
    assert prev.authorizes_device(EDITOR.devices[0].pub)  # control
    assert not prev.authorizes_device(EDITOR.devices[1].pub)  # certified by the editor, not listed
    revoked = propose(prev, OWNER.key, RevokeDevice(EDITOR.devices[0].pub))
    assert not revoked.authorizes_device(EDITOR.devices[0].pub)
    assert revoked.exchange_key(EDITOR.devices[0].pub) is None


def test_revocation_set_is_monotonic() -> None:
    """PO-1: a change that un-revokes a device (alongside an allowed change) is refused, and a
    revoked device cannot be added again."""
    revoked = propose(head(), OWNER.key, RevokeDevice(EDITOR.devices[0].pub))
    unrevoke = resign(revoked, OWNER.key, revoked=[], members=members_with(revoked, newcomer="reader"))
    assert code_of(lambda: check_transition(revoked, unrevoke)) == INV
    assert code_of(lambda: propose(revoked, OWNER.key, EDITOR.devices[0].add())) == INV
    control = resign(revoked, OWNER.key, members=members_with(revoked, newcomer="reader"))
    check_transition(revoked, control)


def test_devices_are_revoked_not_dropped() -> None:
    """PO-1/PO-2: dropping a device from the list (a silent revocation with no new epoch) is refused."""
    prev = head()
    gone = EDITOR.devices[0].pub
    dropped = resign(
        prev,
        OWNER.key,
        devices=[d for d in prev.devices() if d != gone],
        device_certs=[e for e in prev.body["device_certs"] if e["cert"]["device"] != gone],
        members=members_with(prev, newcomer="reader"),
    )
    assert code_of(lambda: check_transition(prev, dropped)) == INV


def test_exactly_one_owner() -> None:
    """PO-2: no policy may have two Owners or none, whoever signs."""
    prev = head()
    assert code_of(lambda: propose(prev, OWNER.key, AddMember(NEWCOMER.user, "owner"))) == INV
    assert code_of(lambda: propose(prev, OWNER.key, SetRole(ADMIN.user, "owner"))) == INV
    none = resign(prev, OWNER.key, members=members_with(prev, owner="admin"))
    assert code_of(lambda: check_transition(prev, none)) == INV


@pytest.mark.parametrize(
    ("seq_step", "link"),
    [(0, "prev"), (-1, "older"), (2, "prev"), (1, "older"), (1, "none")],
    ids=["same-seq", "older-seq", "skipped-seq", "forked-prev", "no-prev"],
)
def test_seq_and_prev_link_each_policy_to_its_predecessor(seq_step: int, link: str) -> None:
    """PO-1: a policy must carry seq = previous + 1 and the previous policy's head."""
    chain = team()
    prev = chain[-1]
    links = {"prev": prev.head, "older": chain[-2].head, "none": None}
    body = {**prev.body, "seq": prev.seq + seq_step, "prev": links[link], "signer": OWNER.user}
    body["members"] = members_with(prev, newcomer="reader")
    bad = Policy(body, sign(OWNER.key, domain_bytes(POLICY_TAG, 1, body)))
    expected = INV if link == "none" else "policy_stale"  # seq > 1 without prev is malformed
    assert code_of(lambda: check_transition(prev, bad)) == expected
    check_transition(prev, resign(prev, OWNER.key, members=body["members"]))  # control


def test_replayed_older_policy_is_refused() -> None:
    """PO-1: replaying an older policy after a newer one (seq not increasing) is stale."""
    chain = list(team())
    assert code_of(lambda: verify_chain([*chain, chain[-2]])) == "policy_stale"
    assert code_of(lambda: verify_chain([*chain, chain[-1]])) == "policy_stale"
    assert code_of(lambda: check_transition(chain[-1], chain[-3])) == "policy_stale"


def test_vault_id_must_not_change() -> None:
    """PO-1: a policy of another vault cannot continue this vault's history."""
    prev = head()
    other = resign(prev, OWNER.key, vault=b"\x5b" * 16, members=members_with(prev, newcomer="reader"))
    assert code_of(lambda: check_transition(prev, other)) == INV


@pytest.mark.parametrize(
    ("change", "epoch_step"),
    [
        ("remove", 0),  # a removal must start a new epoch
        ("revoke", 0),  # so must a revocation
        ("remove", 2),  # by exactly one
        ("add", 1),  # an addition must not
        ("add", -1),  # and the epoch never goes back
        ("none", 2),  # a rotation is one step
    ],
)
def test_epoch_rules(change: str, epoch_step: int) -> None:
    """PO-2: the epoch grows by exactly one iff a member is removed or a device revoked (or a
    pure rotation); no other change may move it."""
    prev = head()
    changes: dict[str, dict[str, Any]] = {
        "remove": {"members": members_with(prev, reader=None), "revoked": [READER.devices[0].pub]},
        "revoke": {"revoked": [READER.devices[0].pub]},
        "add": {"members": members_with(prev, newcomer="reader")},
        "none": {},
    }
    bad = resign(prev, OWNER.key, epoch=prev.epoch + epoch_step, **changes[change])
    assert code_of(lambda: check_transition(prev, bad)) == INV
    right = {"remove": 1, "revoke": 1, "add": 0, "none": 1}[change]
    check_transition(prev, resign(prev, OWNER.key, epoch=prev.epoch + right, **changes[change]))  # control


def test_rotation_may_not_carry_other_changes() -> None:
    """PO-2: a bump without removal or revocation is a rotation: Owner only, and nothing else."""
    prev = head()
    mixed = resign(prev, OWNER.key, epoch=prev.epoch + 1, members=members_with(prev, newcomer="reader"))
    assert code_of(lambda: check_transition(prev, mixed)) == INV
    by_admin = resign(prev, ADMIN.key, epoch=prev.epoch + 1)
    assert code_of(lambda: check_transition(prev, by_admin)) == FORB


def test_removed_members_devices_must_be_revoked() -> None:
    """PO-2: removing a member without revoking their devices leaves an authorized device of a
    non-member: refused (the removed party must not read later writes)."""
    prev = head()
    kept = resign(prev, ADMIN.key, epoch=prev.epoch + 1, members=members_with(prev, reader=None))
    assert code_of(lambda: check_transition(prev, kept)) == INV


def _with_device(prev: Policy, signer: SigningKey, cert: dict[str, Any], sig: bytes) -> Policy:
    return resign(
        prev,
        signer,
        devices=[*prev.devices(), cert["device"]],
        device_certs=[*prev.body["device_certs"], {"cert": cert, "sig": sig}],
    )


def test_added_device_needs_a_valid_certificate_of_a_member() -> None:
    """ID-1: an added device's certificate must be signed by the user it names, and that user
    must be a member; a device without certificate, or a replaced certificate, is refused."""
    prev = head()
    device = EDITOR.devices[1]
    check_transition(prev, _with_device(prev, EDITOR.key, device.cert, device.sig))  # control
    # Claims the editor's user but is signed by the outsider's user key.
    forged_sig = sign(OUTSIDER.key, domain_bytes(CERT_TAG, 1, device.cert))
    assert code_of(lambda: check_transition(prev, _with_device(prev, EDITOR.key, device.cert, forged_sig))) == INV
    assert code_of(lambda: propose(prev, EDITOR.key, AddDevice(device.cert, forged_sig))) == INV
    # A certificate changed after its user signed it.
    altered = dict(device.cert, created_ms=2)
    assert code_of(lambda: check_transition(prev, _with_device(prev, EDITOR.key, altered, device.sig))) == INV
    # A genuine certificate of a non-member, added by the Owner.
    stranger = OUTSIDER.devices[0]
    assert code_of(lambda: propose(prev, OWNER.key, stranger.add())) == INV
    # Listed without certificate.
    bare = resign(prev, OWNER.key, devices=[*prev.devices(), device.pub])
    assert code_of(lambda: check_transition(prev, bare)) == INV
    # An existing device's certificate swapped for another genuine one of the same user.
    swapped_cert = dict(EDITOR.devices[0].cert, created_ms=5)
    swapped = {"cert": swapped_cert, "sig": sign(EDITOR.key, domain_bytes(CERT_TAG, 1, swapped_cert))}
    entries = [swapped if e["cert"]["device"] == EDITOR.devices[0].pub else e for e in prev.body["device_certs"]]
    replaced = resign(prev, OWNER.key, device_certs=entries, members=members_with(prev, newcomer="reader"))
    assert code_of(lambda: check_transition(prev, replaced)) == INV


def test_legacy_genesis_device_certificate_must_name_its_owner() -> None:
    """ID-1: a genesis from `owner_policy` has no certificates; its devices belong to its signer,
    and the certificate attached later must name that user."""
    genesis = team()[0]
    assert "device_certs" not in genesis.body
    device = OWNER.devices[0].pub
    assert genesis.device_user(device) == OWNER.user and genesis.exchange_key(device) is None
    # No certificate supplied: the successor cannot certify the genesis device.
    assert code_of(lambda: propose(genesis, OWNER.key, AddMember(ADMIN.user, "admin"))) == INV
    # A genuine certificate for that device key, but by another user (a member, the new admin).
    cert = dict(OWNER.devices[0].cert, user=ADMIN.user)
    sig = sign(ADMIN.key, domain_bytes(CERT_TAG, 1, cert))
    members = members_with(genesis, admin="admin")
    wrong = resign(genesis, OWNER.key, members=members, device_certs=[{"cert": cert, "sig": sig}])
    assert code_of(lambda: check_transition(genesis, wrong)) == INV
    right = {"cert": OWNER.devices[0].cert, "sig": OWNER.devices[0].sig}
    check_transition(genesis, resign(genesis, OWNER.key, members=members, device_certs=[right]))  # control


def test_change_that_changes_nothing_is_refused() -> None:
    """PO-1: a signed policy identical to its predecessor but for seq and prev is refused."""
    prev = head()
    assert code_of(lambda: check_transition(prev, resign(prev, OWNER.key))) == INV
    assert code_of(lambda: propose(prev, OWNER.key, SetRole(EDITOR.user, "editor"))) == INV


def _with_cert(**cert_changes: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation adding the editor's second device with a changed certificate, validly signed
    by the editor, so that only the certificate's shape is wrong."""

    def mutate(body: dict[str, Any]) -> None:
        cert = {**EDITOR.devices[1].cert, **cert_changes}
        for key in [k for k, v in cert_changes.items() if v is None]:
            del cert[key]
        body["devices"] = [*body["devices"], EDITOR.devices[1].pub]
        entry = {"cert": cert, "sig": sign(EDITOR.key, domain_bytes(CERT_TAG, 1, cert))}
        body["device_certs"] = [*body["device_certs"], entry]

    return mutate


def _set(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda body: body.update(fields)


def _newcomer_entry(**entry: Any) -> Callable[[dict[str, Any]], None]:
    """Replace the newcomer's member entry (the last one) by ``entry``."""
    return lambda body: body.update(members=[*body["members"][:-1], entry])


MALFORMED: dict[str, Callable[[dict[str, Any]], None]] = {
    "extra-field": _set(extra=1),
    "missing-field": lambda body: body.pop("revoked"),
    "version": _set(v=2),
    "bool-seq": _set(seq=True),
    "text-signer": _set(signer="owner"),
    "members-not-a-list": _set(members=7),
    "member-extra-key": _newcomer_entry(user=NEWCOMER.user, role="reader", note="x"),
    "unknown-role": _newcomer_entry(user=NEWCOMER.user, role="root"),
    "short-member-key": _newcomer_entry(user=b"\x01" * 31, role="reader"),
    "duplicate-member": lambda body: body.update(members=[*body["members"], body["members"][0]]),
    "short-device-key": lambda body: body.update(devices=[*body["devices"], b"\x01" * 31]),
    "duplicate-device": lambda body: body.update(devices=[*body["devices"], body["devices"][0]]),
    "revoked-unlisted": _set(revoked=[NEWCOMER.devices[0].pub]),
    "certs-not-a-list": _set(device_certs=7),
    "cert-entry-text-sig": lambda body: body.update(
        device_certs=[{**body["device_certs"][0], "sig": "x"}, *body["device_certs"][1:]]
    ),
    "cert-missing-field": _with_cert(created_ms=None),
    "cert-version": _with_cert(v=2),
    "cert-short-exchange": _with_cert(exchange=b"\x01" * 31),
    "cert-text-time": _with_cert(created_ms="1"),
    "duplicate-cert": lambda body: body.update(device_certs=[*body["device_certs"], body["device_certs"][0]]),
    "cert-of-unlisted-device": lambda body: body.update(
        device_certs=[*body["device_certs"], {"cert": NEWCOMER.devices[0].cert, "sig": NEWCOMER.devices[0].sig}]
    ),
}


@pytest.mark.parametrize("mutate", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_policies_are_refused(mutate: Callable[[dict[str, Any]], None]) -> None:
    """PO-1: a malformed body is refused with policy_invalid (never accepted, never a KeyError
    or TypeError), also when it is the previous policy or arrives as a record."""
    prev = head()
    body = {**prev.body, "seq": prev.seq + 1, "prev": prev.head, "members": members_with(prev, newcomer="reader")}
    check_transition(prev, Policy(body, sign(OWNER.key, domain_bytes(POLICY_TAG, 1, body))))  # control
    mutate(body)
    bad = Policy(body, sign(OWNER.key, domain_bytes(POLICY_TAG, 1, body)))
    assert code_of(lambda: check_transition(prev, bad)) == INV
    assert code_of(lambda: Policy.parse(bad.to_record())) == INV


def test_malformed_previous_policy_or_record_is_refused() -> None:
    """PO-1: check_transition and propose refuse a malformed previous policy with a typed error."""
    prev = head()
    broken = Policy({k: v for k, v in prev.body.items() if k != "revoked"}, prev.signature)
    new = propose(prev, OWNER.key, AddMember(NEWCOMER.user, "reader"))
    assert code_of(lambda: check_transition(broken, new)) == INV
    assert code_of(lambda: propose(broken, OWNER.key, AddMember(NEWCOMER.user, "reader"))) == INV
    for record in ({"body": [], "sig": b""}, {"body": prev.body, "sig": "text"}, {"body": prev.body}):
        assert code_of(lambda: Policy.parse(record)) == INV


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda: AddMember(EDITOR.user, "admin"), "already a member"),
        (lambda: AddMember(b"\x01" * 31, "reader"), "32 bytes"),
        (lambda: AddMember(NEWCOMER.user, "root"), "role does not exist"),
        (lambda: SetRole(EDITOR.user, "editor"), "already has role"),
        (lambda: SetRole(NEWCOMER.user, "editor"), "not a member"),
        (lambda: RemoveMember(NEWCOMER.user), "not a member"),
        (lambda: AddDevice({"v": 1}, b""), "certificate is malformed"),
        (lambda: EDITOR.devices[0].add(), "already authorized"),
        (lambda: RevokeDevice(NEWCOMER.devices[0].pub), "not listed"),
        (lambda: TransferOwnership(NEWCOMER.user), "only be transferred to a member"),
        (lambda: TransferOwnership(OWNER.user), "already the Owner"),
        (lambda: "not a change", "Unknown policy change"),
    ],
)
def test_propose_explains_impossible_changes(change: Callable[[], Any], words: str) -> None:
    """A change that cannot apply to the current policy is refused with policy_invalid and a
    sentence saying why (not a later, vaguer rule)."""
    with pytest.raises(MemoriesError) as caught:
        propose(head(), OWNER.key, change())
    assert caught.value.code == INV and words in caught.value.message


def test_propose_explains_revoked_devices() -> None:
    """PO-1: re-adding or re-revoking a revoked device says that it was revoked."""
    revoked = propose(head(), OWNER.key, RevokeDevice(EDITOR.devices[0].pub))
    for change, words in ((EDITOR.devices[0].add(), "was revoked"), (RevokeDevice(EDITOR.devices[0].pub), "already revoked")):
        with pytest.raises(MemoriesError) as caught:
            propose(revoked, OWNER.key, change)
        assert caught.value.code == INV and words in caught.value.message


def test_messages_carry_no_key_material() -> None:
    """Errors name keys only by a short fingerprint, never by the key or a full fingerprint."""
    prev = head()
    with pytest.raises(MemoriesError) as caught:
        propose(prev, OWNER.key, RevokeDevice(NEWCOMER.devices[0].pub))
    message = caught.value.message
    assert fingerprint(NEWCOMER.devices[0].pub)[:12] in message
    assert fingerprint(NEWCOMER.devices[0].pub) not in message
    assert NEWCOMER.devices[0].pub.hex()[:16] not in message


# -- genesis and whole chains ---------------------------------------------------------------------


def test_genesis_rules() -> None:
    """PO-1: a history starts with seq 1, no predecessor, epoch 1, signed by its only member, the Owner."""
    genesis = owner_policy(OWNER.identity(), VAULT)
    assert verify_chain([genesis]) is genesis  # today's genesis
    certified = owner_policy(OWNER.identity(), VAULT, with_certificate=True)
    assert verify_chain([certified]).exchange_key(OWNER.devices[0].pub) == OWNER.devices[0].cert["exchange"]

    def genesis_with(key: SigningKey = OWNER.key, **changes: Any) -> Policy:
        body = {**genesis.body, **changes}
        return Policy(body, sign(key, domain_bytes(POLICY_TAG, 1, body)))

    assert code_of(lambda: verify_chain([])) == INV
    assert code_of(lambda: verify_chain([genesis_with(epoch=2)])) == INV
    assert code_of(lambda: verify_chain([genesis_with(ADMIN.key, signer=ADMIN.user)])) == INV
    two = genesis_with(members=[*genesis.body["members"], {"user": ADMIN.user, "role": "admin"}])
    assert code_of(lambda: verify_chain([two])) == INV
    flipped = Policy(genesis.body, bytes([genesis.signature[0] ^ 1]) + genesis.signature[1:])
    assert code_of(lambda: verify_chain([flipped])) == INV
    assert code_of(lambda: verify_chain([team()[1]])) == INV  # not a genesis
    bad_cert = {"cert": OWNER.devices[0].cert, "sig": OWNER.devices[1].sig}
    assert code_of(lambda: verify_chain([genesis_with(device_certs=[bad_cert])])) == INV
    # Certificates, when present, cover every device, and every device is the Owner's.
    assert code_of(lambda: verify_chain([genesis_with(device_certs=[])])) == INV
    own = {"cert": OWNER.devices[0].cert, "sig": OWNER.devices[0].sig}
    alien = {"cert": ADMIN.devices[0].cert, "sig": ADMIN.devices[0].sig}
    devices = [OWNER.devices[0].pub, ADMIN.devices[0].pub]
    assert code_of(lambda: verify_chain([genesis_with(devices=devices, device_certs=[own, alien])])) == INV
    # Shape: nothing else compares a genesis against anything.
    for changes in ({"extra": 1}, {"vault": b""}, {"vault": b"\x01" * 65}, {"epoch": True}):
        assert code_of(lambda: verify_chain([genesis_with(**changes)])) == INV
    # A single-member, correctly signed policy that is not seq 1 cannot start a history.
    later = Policy(
        {**certified.body, "seq": 2, "prev": genesis.head},
        sign(OWNER.key, domain_bytes(POLICY_TAG, 1, {**certified.body, "seq": 2, "prev": genesis.head})),
    )
    assert code_of(lambda: verify_chain([later])) == INV


def test_committed_store_fixture_policy_verifies(tmp_path: Path) -> None:
    """PO-1: the genesis policy of a store written by an earlier version verifies as a history."""
    require(FIXTURE.exists(), "tests/data/store-v1/store.db is missing")
    from engine.store.database import StoreFile

    copy = tmp_path / "store.db"
    shutil.copyfile(FIXTURE, copy)
    store = StoreFile.open(copy)
    try:
        store.install_master(store.check_password(FIXTURE_PASSWORD))
        records = [record for _, record in store.load().records]
    finally:
        store.close()
    vaults = [r for r in records if r.get("t") == "vault"]
    assert vaults
    for vault in vaults:
        policy = verify_chain([Policy.parse(vault["policy"])])
        assert policy.epoch == 1 and len(policy.owners()) == 1


# -- random histories ------------------------------------------------------------------------------

PEOPLE = (OWNER, ADMIN, EDITOR, READER, OUTSIDER)
KINDS = ("add", "role", "remove", "device", "revoke", "transfer", "rotate")


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[int, str, int, int, int]]:
    n = draw(st.integers(1, 15))
    return [
        (
            draw(st.integers(0, 4)),  # signer
            draw(st.sampled_from(KINDS)),
            draw(st.integers(0, 4)),  # target person
            draw(st.integers(0, 3)),  # role
            draw(st.integers(0, 1)),  # device
        )
        for _ in range(n)
    ]


def _build(kind: str, target: Person, role: str, device: Device) -> Change:
    if kind == "add":
        return AddMember(target.user, role)
    if kind == "role":
        return SetRole(target.user, role)
    if kind == "remove":
        return RemoveMember(target.user)
    if kind == "device":
        return device.add()
    if kind == "revoke":
        return RevokeDevice(device.pub)
    if kind == "transfer":
        return TransferOwnership(target.user)
    return RotateEpoch()


@functools.cache
def cast_start() -> tuple[Policy, ...]:
    """Genesis, then admin, editor and reader join with their first device; the outsider stays out."""
    chain = [owner_policy(OWNER.identity(), VAULT)]
    first = OWNER.devices[0]
    for person, role in ((ADMIN, "admin"), (EDITOR, "editor"), (READER, "reader")):
        chain.append(propose(chain[-1], OWNER.key, AddMember(person.user, role), certificates=[(first.cert, first.sig)]))
        chain.append(propose(chain[-1], OWNER.key, person.devices[0].add()))
    return tuple(chain)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps())
def test_random_histories_keep_the_invariants(plan: list[tuple[int, str, int, int, int]]) -> None:
    """PO-1/PO-2 property: from a genesis, random changes by random signers either raise a typed
    policy error (changing nothing) or yield a policy whose whole history verifies; there is
    always exactly one Owner, revocations never shrink, and the epoch counts removals,
    revocations and rotations."""
    first = OWNER.devices[0]
    chain = list(cast_start())
    bumps = 0
    roles = ("owner", "admin", "editor", "reader")
    for signer_i, kind, target_i, role_i, device_i in plan:
        target = PEOPLE[target_i]
        change = _build(kind, target, roles[role_i], target.devices[device_i])
        prev = chain[-1]
        snapshot = (dict(prev.body), prev.head)
        try:
            new = propose(prev, PEOPLE[signer_i].key, change, certificates=[(first.cert, first.sig)])
        except MemoriesError as exc:
            assert exc.code in ("policy_invalid", "policy_forbidden")
            assert (dict(prev.body), prev.head) == snapshot
            continue
        chain.append(new)
        assert verify_chain(chain) is new
        bumps += kind in ("remove", "revoke", "rotate")
        assert len(new.owners()) == 1
        assert prev.revoked() <= new.revoked() and set(prev.devices()) <= set(new.devices())
        assert new.epoch == 1 + bumps
        for device in new.devices():
            if new.authorizes_device(device):
                assert new.device_user(device) in new.members()
