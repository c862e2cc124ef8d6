"""Signed vault policy history (PO-1, PO-2, ID-1, HI-2).

A vault policy is one link of a signed linear history. Its body is

    {"v": 1, "vault", "seq", "prev", "epoch", "members": [{"user", "role"}],
     "devices": [device_pub ...], "revoked": [device_pub ...], "signer",
     "device_certs": [{"cert": certificate_body, "sig": bytes} ...],
     "accepted": [revision_id ...]}   # optional, only in a policy that revokes (SY-6)

signed by the ``signer``'s *user* key under the ``memories.policy`` domain tag. Its head
(SHA-256 of the signed bytes) is what revisions sign (HI-2).

* Genesis (``seq`` 1, ``prev`` None) is signed by its only Owner. The genesis made by
  :func:`owner_policy` has no ``device_certs`` (its bytes are pinned by docs/formats.md);
  its devices belong to its signer. Every later policy carries the user-signed certificate
  of every listed device, so any member can find each device's user and X25519 exchange
  key. The first change after a certificate-less genesis attaches the genesis devices'
  certificates (``propose(..., certificates=...)``).
* ``devices`` never shrinks; a device is disabled by listing it in ``revoked``, which
  never shrinks either, so a revoked device can never be authorized again.
* :func:`check_transition` holds a new policy to every rule against the *previous*
  policy, whose roles decide what the signer may change (PO-1, PO-2).
* :func:`verify_chain` checks a whole history from genesis and returns its head policy.

Errors are :class:`engine.errors.MemoriesError` with the codes ``policy_invalid`` (malformed,
badly signed, or breaking an invariant), ``policy_forbidden`` (the signer's role does not
allow the change) and ``policy_stale`` (not based on the given previous policy). Their
sentences name keys only by a 12-hex-digit fingerprint prefix.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nacl.signing import SigningKey

from engine.crypto.canonical import domain_bytes
from engine.crypto.keys import CERT_TAG, DeviceIdentity, SignatureError, fingerprint, sign, verify
from engine.errors import MemoriesError

__all__ = [
    "Policy",
    "POLICY_TAG",
    "ROLES",
    "owner_policy",
    "AddMember",
    "SetRole",
    "RemoveMember",
    "AddDevice",
    "RevokeDevice",
    "TransferOwnership",
    "RotateEpoch",
    "Change",
    "propose",
    "check_transition",
    "verify_chain",
]

POLICY_TAG = "memories.policy"
ROLES = ("owner", "admin", "editor", "reader")
_LESSER_ROLES = frozenset({"admin", "editor", "reader"})  # what an Admin may manage (PO-2)
_KEY_LEN = 32
_BODY_KEYS = frozenset({"v", "vault", "seq", "prev", "epoch", "members", "devices", "revoked", "signer"})
_CERT_KEYS = frozenset({"v", "user", "device", "exchange", "created_ms"})
# SY-6: a policy that revokes devices may record the revisions of those devices the signer had
# accepted (their heads; every ancestor was accepted with them), bounded like an inventory.
MAX_ACCEPTED = 1_000_000


def _fp(key: bytes) -> str:
    """A short fingerprint for messages (never the key itself; ID-4 checks use the full one)."""
    return fingerprint(bytes(key))[:12]


def _invalid(message: str) -> MemoriesError:
    return MemoriesError("policy_invalid", message)


def _forbidden(message: str) -> MemoriesError:
    return MemoriesError("policy_forbidden", message)


def _is_key(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == _KEY_LEN


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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

    @property
    def seq(self) -> int:
        return int(self.body["seq"])

    @property
    def prev(self) -> bytes | None:
        prev = self.body["prev"]
        return None if prev is None else bytes(prev)

    @property
    def signer(self) -> bytes:
        return bytes(self.body["signer"])

    @property
    def is_genesis(self) -> bool:
        return self.body.get("seq") == 1 and self.body.get("prev") is None

    def members(self) -> dict[bytes, str]:
        """Member user key -> role, in policy order."""
        return {bytes(m["user"]): str(m["role"]) for m in self.body["members"]}

    def role_of(self, user_pub: bytes) -> str | None:
        return self.members().get(bytes(user_pub))

    def owners(self) -> list[bytes]:
        return [user for user, role in self.members().items() if role == "owner"]

    def devices(self) -> list[bytes]:
        return [bytes(d) for d in self.body["devices"]]

    def revoked(self) -> set[bytes]:
        return {bytes(d) for d in self.body["revoked"]}

    def accepted(self) -> list[bytes]:
        """SY-6: heads of revoked devices' revisions accepted before this policy revoked them."""
        return [bytes(r) for r in self.body.get("accepted", [])]

    def certificates(self) -> dict[bytes, tuple[dict[str, Any], bytes]]:
        """Listed device -> (certificate body, user signature); empty for a legacy genesis."""
        out: dict[bytes, tuple[dict[str, Any], bytes]] = {}
        for entry in self.body.get("device_certs", []):
            out[bytes(entry["cert"]["device"])] = (entry["cert"], bytes(entry["sig"]))
        return out

    def device_user(self, device_pub: bytes) -> bytes | None:
        """The user a listed (possibly revoked) device belongs to; None if not listed.

        A device of a genesis policy without certificates belongs to its signer.
        """
        device_pub = bytes(device_pub)
        if device_pub not in self.devices():
            return None
        cert = self.certificates().get(device_pub)
        if cert is not None:
            return bytes(cert[0]["user"])
        return self.signer if self.is_genesis else None

    def exchange_key(self, device_pub: bytes) -> bytes | None:
        """The X25519 key to encrypt epoch keys to: only for authorized, certified devices."""
        device_pub = bytes(device_pub)
        if not self.authorizes_device(device_pub):
            return None
        cert = self.certificates().get(device_pub)
        return None if cert is None else bytes(cert[0]["exchange"])

    def authorizes_device(self, device_pub: bytes) -> bool:
        return device_pub in self.body["devices"] and device_pub not in self.body["revoked"]

    def verify(self) -> None:
        """Verify against the signer named in the policy, who must be an Owner of it.

        This is the genesis check, unchanged since the first format. A later policy may be
        signed by an Admin, Editor or Reader, and its signer's authority comes from the
        *previous* policy: verify histories with :func:`verify_chain` (and load their records
        with :meth:`parse`), never with this method alone.
        """
        signer = self.body["signer"]
        owners = [m["user"] for m in self.body["members"] if m["role"] == "owner"]
        if signer not in owners:
            raise SignatureError("policy signer is not an owner")
        verify(signer, self.signed_bytes, self.signature)

    def to_record(self) -> dict[str, Any]:
        return {"body": self.body, "sig": self.signature}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Policy:
        policy = cls(body=record["body"], signature=record["sig"])
        policy.verify()
        return policy

    @classmethod
    def parse(cls, record: object) -> Policy:
        """A policy from its record, checked for shape only; pass it to :func:`verify_chain`."""
        if not isinstance(record, dict) or set(record) != {"body", "sig"}:
            raise _invalid("The policy record is malformed.")
        policy = cls(body=record["body"], signature=record["sig"])
        _check_shape(policy)
        return policy


def owner_policy(identity: DeviceIdentity, vault_id: bytes, *, with_certificate: bool = False) -> Policy:
    """The genesis policy: this identity's user is the only Owner, its device the only device.

    The default body has no ``device_certs``: its bytes are the documented vector, and every
    store created so far holds one. ``with_certificate=True`` embeds the device certificate.
    """
    body: dict[str, Any] = {
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
    if with_certificate:
        body["device_certs"] = [{"cert": identity.certificate, "sig": identity.certificate_sig}]
    return Policy(body=body, signature=sign(identity.user_key, domain_bytes(POLICY_TAG, 1, body)))


# -- shape ------------------------------------------------------------------------------------


def _check_shape(policy: Policy) -> None:
    """Types, lengths and uniqueness of a policy body; nothing about who may sign it."""
    body = policy.body
    if not isinstance(body, dict) or not isinstance(policy.signature, bytes):
        raise _invalid("The policy record is malformed.")
    keys = set(body)
    if not keys >= _BODY_KEYS or not keys <= _BODY_KEYS | {"device_certs", "accepted"}:
        raise _invalid("The policy body does not have exactly the policy fields.")
    if "accepted" in body:
        accepted = body["accepted"]
        if not isinstance(accepted, list) or not accepted or len(accepted) > MAX_ACCEPTED:
            raise _invalid("The policy's accepted revisions are malformed.")
        if not all(_is_key(r) for r in accepted) or len(set(accepted)) != len(accepted):
            raise _invalid("The policy's accepted revisions are malformed.")
    if body["v"] != 1 or not _is_int(body["v"]):
        raise _invalid("The policy format version is not supported.")
    vault = body["vault"]
    if not isinstance(vault, bytes) or not 1 <= len(vault) <= 64:
        raise _invalid("The policy's vault ID is malformed.")
    if not _is_int(body["seq"]) or body["seq"] < 1 or not _is_int(body["epoch"]) or body["epoch"] < 1:
        raise _invalid("The policy's sequence number or epoch is malformed.")
    prev = body["prev"]
    if (body["seq"] == 1) != (prev is None) or (prev is not None and not _is_key(prev)):
        raise _invalid("The policy's link to its predecessor is malformed.")
    if not _is_key(body["signer"]):
        raise _invalid("The policy's signer is malformed.")
    members = body["members"]
    if not isinstance(members, list) or not members:
        raise _invalid("The policy has no member list.")
    users: set[bytes] = set()
    for member in members:
        if not isinstance(member, dict) or set(member) != {"user", "role"}:
            raise _invalid("A policy member entry is malformed.")
        if not _is_key(member["user"]) or member["role"] not in ROLES:
            raise _invalid("A policy member entry has a malformed key or an unknown role.")
        if member["user"] in users:
            raise _invalid(f"User {_fp(member['user'])} is listed twice.")
        users.add(member["user"])
    for name in ("devices", "revoked"):
        items = body[name]
        if not isinstance(items, list) or not all(_is_key(d) for d in items):
            raise _invalid(f"The policy's {name} list is malformed.")
        if len(set(items)) != len(items):
            raise _invalid(f"The policy's {name} list names a device twice.")
    if not set(body["revoked"]) <= set(body["devices"]):
        raise _invalid("The policy revokes a device it does not list.")
    if "device_certs" in body:
        entries = body["device_certs"]
        if not isinstance(entries, list):
            raise _invalid("The policy's device certificates are malformed.")
        seen: set[bytes] = set()
        for entry in entries:
            if not isinstance(entry, dict) or set(entry) != {"cert", "sig"} or not isinstance(entry["sig"], bytes):
                raise _invalid("A device certificate entry is malformed.")
            cert = entry["cert"]
            if not isinstance(cert, dict) or set(cert) != _CERT_KEYS or cert["v"] != 1 or not _is_int(cert["v"]):
                raise _invalid("A device certificate is malformed.")
            if not all(_is_key(cert[k]) for k in ("user", "device", "exchange")) or not _is_int(cert["created_ms"]):
                raise _invalid("A device certificate is malformed.")
            if cert["device"] in seen:
                raise _invalid(f"Device {_fp(cert['device'])} has two certificates.")
            seen.add(cert["device"])
        if not seen <= set(body["devices"]):
            raise _invalid("The policy carries a certificate for a device it does not list.")


def _check_signature(policy: Policy) -> None:
    try:
        verify(policy.signer, policy.signed_bytes, policy.signature)
    except SignatureError:
        raise _invalid("The policy signature does not verify with its signer's key.") from None


def _check_certificate(device: bytes, cert: dict[str, Any], sig: bytes) -> None:
    """ID-1: the certificate is signed by the user it names (certificates are keyed by their device)."""
    try:
        verify(cert["user"], domain_bytes(CERT_TAG, 1, cert), sig)
    except SignatureError:
        raise _invalid(f"The certificate of device {_fp(device)} is not signed by its user.") from None


def _check_one_owner(policy: Policy) -> None:
    if len(policy.owners()) != 1:
        raise _invalid("A vault policy must have exactly one Owner.")


def _check_members_devices(policy: Policy) -> None:
    """Every authorized (unrevoked) device belongs to a current member."""
    members = policy.members()
    for device in policy.devices():
        if device in policy.revoked():
            continue
        user = policy.device_user(device)
        if user is None or user not in members:
            raise _invalid(f"Device {_fp(device)} is authorized but its user is not a member.")


def _check_genesis(policy: Policy) -> None:
    _check_shape(policy)
    if not policy.is_genesis:
        raise _invalid("The first policy of a history must have sequence number 1 and no predecessor.")
    if policy.epoch != 1 or policy.revoked() or "accepted" in policy.body:
        raise _invalid("A genesis policy starts at epoch 1 with no revoked devices.")
    _check_signature(policy)
    if policy.owners() != [policy.signer] or len(policy.members()) != 1:
        raise _invalid("A genesis policy must be signed by its only member, the Owner.")
    certs = policy.certificates()
    if "device_certs" in policy.body and set(certs) != set(policy.devices()):
        raise _invalid("A genesis policy with certificates must certify every device it lists.")
    for device, (cert, sig) in certs.items():
        _check_certificate(device, cert, sig)
    _check_members_devices(policy)


# -- transitions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Diff:
    added: dict[bytes, str]  # user -> role
    removed: dict[bytes, str]  # user -> role it had
    changed: dict[bytes, tuple[str, str]]  # user -> (old role, new role)
    devices_added: dict[bytes, bytes]  # device -> the user its certificate claims
    revoked: set[bytes]
    certified: set[bytes]  # genesis devices whose certificate was attached
    epoch_step: int

    @property
    def membership_or_devices(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.devices_added or self.revoked)


def _diff(prev: Policy, new: Policy) -> _Diff:
    before, after = prev.members(), new.members()
    new_certs, prev_certs = new.certificates(), prev.certificates()
    prev_devices = set(prev.devices())
    return _Diff(
        added={u: r for u, r in after.items() if u not in before},
        removed={u: r for u, r in before.items() if u not in after},
        changed={u: (before[u], r) for u, r in after.items() if u in before and before[u] != r},
        devices_added={
            d: bytes(new_certs[d][0]["user"]) if d in new_certs else b"" for d in new.devices() if d not in prev_devices
        },
        revoked=new.revoked() - prev.revoked(),
        certified={d for d in new_certs if d in prev_devices and d not in prev_certs},
        epoch_step=new.epoch - prev.epoch,
    )


def _check_role(role: str, signer: bytes, prev: Policy, diff: _Diff) -> None:
    """PO-2, with the signer's role taken from the previous policy (PO-1)."""
    if role == "owner":
        return
    removal_revokes = {d for d in prev.devices() if d not in prev.revoked() and prev.device_user(d) in diff.removed}
    rotation = diff.epoch_step > 0 and not diff.removed and not diff.revoked
    if role == "admin":
        if "owner" in diff.added.values() or "owner" in diff.removed.values():
            raise _forbidden("An Admin may not add or remove the Owner.")
        if any("owner" in pair for pair in diff.changed.values()):
            raise _forbidden("An Admin may not change the Owner's role or make anyone Owner.")
        if diff.revoked - removal_revokes:
            raise _forbidden("Only the Owner may revoke devices.")
        if rotation:
            raise _forbidden("Only the Owner may rotate the vault key.")
        return
    # Editor and Reader: only another device of their own user (PO-2).
    if diff.added or diff.removed or diff.changed or diff.revoked or rotation:
        raise _forbidden(f"A member with role {role} may only authorize a device of their own.")
    if any(user != signer for user in diff.devices_added.values()):
        raise _forbidden(f"A member with role {role} may only authorize a device of their own.")


def check_transition(prev: Policy, new: Policy) -> None:
    """Every rule a policy must meet to follow ``prev`` (PO-1, PO-2, ID-1); raises MemoriesError."""
    _check_shape(prev)
    _check_shape(new)
    if new.body["vault"] != prev.body["vault"]:
        raise _invalid("The policy belongs to another vault.")
    if new.seq != prev.seq + 1 or new.prev != prev.head:
        raise MemoriesError("policy_stale", "The policy change does not follow the current policy.")
    _check_signature(new)
    role = prev.role_of(new.signer)
    if role is None:
        raise _forbidden(f"The signer {_fp(new.signer)} is not a member of the vault.")
    diff = _diff(prev, new)
    _check_role(role, new.signer, prev, diff)
    # Invariants: they hold whoever signs.
    _check_one_owner(new)
    if not prev.revoked() <= new.revoked():
        raise _invalid("A policy change may not un-revoke a device.")
    if not set(prev.devices()) <= set(new.devices()):
        raise _invalid("A policy change may not drop a device from the list; revoke it instead.")
    new_certs, prev_certs = new.certificates(), prev.certificates()
    for device in new.devices():
        if device not in new_certs:
            raise _invalid(f"Device {_fp(device)} has no certificate in the policy.")
        cert, sig = new_certs[device]
        if device in prev_certs:
            if prev_certs[device] != (cert, sig):
                raise _invalid(f"The certificate of device {_fp(device)} was replaced.")
            continue
        if device in diff.certified and cert["user"] != prev.device_user(device):
            raise _invalid(f"The certificate of device {_fp(device)} names a user it did not belong to.")
        _check_certificate(device, cert, sig)
    _check_members_devices(new)
    if "accepted" in new.body and not diff.revoked:
        raise _invalid("Only a policy that revokes a device records the revisions accepted before it.")
    must_bump = bool(diff.removed or diff.revoked)
    if must_bump and diff.epoch_step != 1:
        raise _invalid("Removing a member or revoking a device must start exactly one new epoch.")
    if not must_bump and diff.epoch_step not in (0, 1):
        raise _invalid("The epoch may only stay or grow by one.")
    if not must_bump and diff.epoch_step == 1 and diff.membership_or_devices:
        raise _invalid("A key rotation may not be combined with membership or device changes.")
    if not diff.membership_or_devices and diff.epoch_step == 0 and not diff.certified:
        raise _invalid("The policy change changes nothing.")


def verify_chain(chain: list[Policy]) -> Policy:
    """Verify a whole policy history from its genesis; returns the head (latest) policy."""
    if not chain:
        raise _invalid("A policy history needs at least its genesis policy.")
    _check_genesis(chain[0])
    for prev, new in itertools.pairwise(chain):
        check_transition(prev, new)
    return chain[-1]


# -- proposing changes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AddMember:
    user: bytes
    role: str


@dataclass(frozen=True)
class SetRole:
    user: bytes
    role: str


@dataclass(frozen=True)
class RemoveMember:
    user: bytes


@dataclass(frozen=True)
class AddDevice:
    cert: dict[str, Any]
    cert_sig: bytes


@dataclass(frozen=True)
class RevokeDevice:
    device: bytes


@dataclass(frozen=True)
class TransferOwnership:
    to_user: bytes


@dataclass(frozen=True)
class RotateEpoch:
    pass


Change = AddMember | SetRole | RemoveMember | AddDevice | RevokeDevice | TransferOwnership | RotateEpoch


def _role(role: str) -> str:
    if role not in ROLES:
        raise _invalid("That role does not exist; use owner, admin, editor or reader.")
    return role


def propose(
    prev: Policy,
    signer_key: SigningKey,
    change: Change,
    *,
    certificates: Iterable[tuple[dict[str, Any], bytes]] = (),
    accepted: Iterable[bytes] = (),
) -> Policy:
    """The next policy after ``prev`` with ``change``, signed by ``signer_key`` (a user key).

    ``accepted``: for a change that revokes devices, the heads of those devices' revisions the
    signer's device accepted (SY-6); recorded in the policy so a device that joins later applies
    them instead of quarantining them. Ignored for other changes.

    ``certificates`` are (certificate, signature) pairs of devices ``prev`` lists without a
    certificate (a genesis from :func:`owner_policy`); the engine passes its own device's.
    Pairs for other devices are ignored. The result passes :func:`check_transition`, or
    this raises and returns nothing; ``prev`` is never modified.
    """
    _check_shape(prev)
    members = prev.members()
    devices = prev.devices()
    revoked = prev.revoked()
    revoked_order = [bytes(d) for d in prev.body["revoked"]]
    certs = dict(prev.certificates())
    legacy = [d for d in devices if d not in certs]
    for cert, sig in certificates:
        device = cert.get("device") if isinstance(cert, dict) else None
        if isinstance(device, bytes) and device in legacy:
            certs[device] = (cert, bytes(sig))
    epoch = prev.epoch

    def revoke(device: bytes) -> None:
        if device not in revoked:
            revoked.add(device)
            revoked_order.append(device)

    if isinstance(change, AddMember):
        if change.user in members:
            raise _invalid(f"User {_fp(change.user)} is already a member.")
        if not _is_key(change.user):
            raise _invalid("A member's user key must be 32 bytes.")
        members[change.user] = _role(change.role)
    elif isinstance(change, SetRole):
        if change.user not in members:
            raise _invalid(f"User {_fp(change.user)} is not a member.")
        if members[change.user] == _role(change.role):
            raise _invalid(f"User {_fp(change.user)} already has role {change.role}.")
        members[change.user] = change.role
    elif isinstance(change, RemoveMember):
        if change.user not in members:
            raise _invalid(f"User {_fp(change.user)} is not a member.")
        del members[change.user]
        for device in devices:
            if prev.device_user(device) == change.user:
                revoke(device)
        epoch += 1
    elif isinstance(change, AddDevice):
        cert = change.cert
        device = cert.get("device") if isinstance(cert, dict) else None
        if not _is_key(device):
            raise _invalid("The device certificate is malformed.")
        assert isinstance(device, bytes)
        if device in revoked:
            raise _invalid(f"Device {_fp(device)} was revoked and cannot be added again.")
        if device in devices:
            raise _invalid(f"Device {_fp(device)} is already authorized.")
        devices.append(device)
        certs[device] = (dict(cert), bytes(change.cert_sig))
    elif isinstance(change, RevokeDevice):
        if change.device not in devices:
            raise _invalid(f"Device {_fp(change.device)} is not listed in the policy.")
        if change.device in revoked:
            raise _invalid(f"Device {_fp(change.device)} is already revoked.")
        revoke(change.device)
        epoch += 1
    elif isinstance(change, TransferOwnership):
        if change.to_user not in members:
            raise _invalid("Ownership can only be transferred to a member of the vault.")
        if members[change.to_user] == "owner":
            raise _invalid("That member is already the Owner.")
        for user, role in members.items():
            if role == "owner":
                members[user] = "admin"
        members[change.to_user] = "owner"
    elif isinstance(change, RotateEpoch):
        epoch += 1
    else:  # pragma: no cover - the Change union is closed
        raise _invalid("Unknown policy change.")

    body: dict[str, Any] = {
        "v": 1,
        "vault": prev.body["vault"],
        "seq": prev.seq + 1,
        "prev": prev.head,
        "epoch": epoch,
        "members": [{"user": user, "role": role} for user, role in members.items()],
        "devices": devices,
        "revoked": revoked_order,
        "signer": bytes(signer_key.verify_key),
        "device_certs": [{"cert": certs[d][0], "sig": certs[d][1]} for d in devices if d in certs],
    }
    heads = sorted({bytes(r) for r in accepted})
    if heads and revoked != prev.revoked():
        body["accepted"] = heads[:MAX_ACCEPTED]
    policy = Policy(body=body, signature=sign(signer_key, domain_bytes(POLICY_TAG, 1, body)))
    check_transition(prev, policy)
    return policy
