"""Vaults and their members (PO-1, PO-2, ID-1): create, list, members, roles, transfer, rotation.

Every policy change goes through ``service.vault.change_policy``: ``propose`` checks the
role rules against the previous policy, the core signs the next policy with this user's
key, starts a new epoch with a fresh key on a removal or rotation, and commits it with its
audit entry in one transaction. Writes are refused in the core (``read_only``) when this
user is a Reader, or no member, of the target vault. The other handlers resolve their
``vault`` option with :func:`vault_named`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine.cards.device_vaults import is_device_only, refuse_if_device_only
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.service import requests_vaults as rq
from engine.service.caller import Caller
from engine.service.handlers.devices import own_devices
from engine.service.registry import op
from engine.service.service import Service
from engine.vault.core import Unlocked, VaultKeys
from engine.vault.invite import Invite, parse_invite
from engine.vault.policy import (
    AddDevice,
    AddMember,
    Change,
    RemoveMember,
    RotateEpoch,
    SetRole,
    TransferOwnership,
    owner_policy,
)

__all__ = ["vault_named", "vault_for", "new_vault_records", "MAX_NAME"]

MAX_NAME = 64
_ONE_OWNER = "A vault policy must have exactly one Owner."


def vault_named(state: Unlocked, name: str, option: str = "--vault") -> VaultKeys:
    """The vault of this device with exactly this name; ``not_found`` naming the option otherwise."""
    for vault in state.vaults.values():
        if vault.name == name:
            return vault
    raise MemoriesError("not_found", f"No vault here has the name given to {option}; `memories vaults` lists them.")


def vault_for(state: Unlocked, name: str | None) -> VaultKeys:
    """The named vault, or the default vault when no name was given."""
    return state.vault if name is None else vault_named(state, name)


def _check_name(state: Unlocked, name: str) -> None:
    if not 1 <= len(name) <= MAX_NAME or not name.isprintable() or name != name.strip():
        raise MemoriesError(
            "invalid_input",
            f"A vault name is 1–{MAX_NAME} printable characters without leading or trailing spaces.",
        )
    if any(v.name == name for v in state.vaults.values()):
        raise MemoriesError("invalid_input", "A vault with that name already exists here; nothing was created.")


def new_vault_records(state: Unlocked, name: str) -> tuple[VaultKeys, list[dict[str, Any]]]:
    """A new shared vault (own random ID and key; this user its only Owner) and the row that stores it.

    Its genesis carries this device's certificate (ID-1). The vault is not registered in
    ``state`` here: the caller does that only after the row is committed, before any revision
    of the vault can be written (the row must come first in the store).
    """
    vault_id = os.urandom(16)
    policy = owner_policy(state.identity, vault_id, with_certificate=True)
    keys = VaultKeys(vault_id, name, policy, {policy.epoch: os.urandom(32)})
    return keys, [keys.record(default=False)]


def _user(hex_id: str) -> bytes:
    return bytes.fromhex(hex_id)


def _vault_view(state: Unlocked, vault: VaultKeys) -> dict[str, Any]:
    policy = vault.policy
    assets = sum(1 for e in state.index.visible() if e.vault_id == vault.vault_id)
    return {
        "name": vault.name,
        "id": vault.vault_id.hex(),
        "short_id": vault.vault_id.hex()[:12],
        "role": policy.role_of(state.identity.user_pub),
        "members": len(policy.members()),
        "epoch": policy.epoch,
        "policy_seq": policy.seq,
        "device_only": is_device_only(state, vault.vault_id),
        "default": vault.vault_id == state.default_vault,
        "assets": assets,
    }


@op(rq.VaultNew)
def vault_new(service: Service, request: rq.VaultNew, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    _check_name(state, request.name)
    keys, records = new_vault_records(state, request.name)
    audit = service.vault.audit_record(state, "vault_new", caller, outcome="ok", vaults=[keys.vault_id])
    service.vault.commit(state, [], [], [*records, audit])
    state.vaults[keys.vault_id] = keys  # only once the row is durable (ST-5)
    # SY-5: the user's other devices are in it from the start; they receive it on their next sync.
    others = [pair for pair in own_devices(state) if bytes(pair[0]["device"]) != state.identity.device_pub]
    if others:
        service.vault.change_policies(state, [(keys.vault_id, AddDevice(cert, sig)) for cert, sig in others], caller)
        keys = state.vaults[keys.vault_id]
    return _vault_view(state, keys)


@op(rq.VaultList)
def vaults(service: Service, request: rq.VaultList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    ordered = sorted(state.vaults.values(), key=lambda v: (v.vault_id != state.default_vault, v.name))
    return {"vaults": [_vault_view(state, v) for v in ordered]}


@op(rq.VaultMembers)
def vault_members(service: Service, request: rq.VaultMembers, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = vault_for(state, request.vault)
    policy = vault.policy
    members = []
    for user, role in policy.members().items():
        devices = [d for d in policy.devices() if policy.device_user(d) == user]
        members.append(
            {
                "user": user.hex(),
                "fingerprint": fingerprint(user),
                "role": role,
                "devices": sum(1 for d in devices if policy.authorizes_device(d)),
                "revoked_devices": sum(1 for d in devices if d in policy.revoked()),
                "me": user == state.identity.user_pub,
            }
        )
    return {"vault": vault.name, "epoch": policy.epoch, "policy_seq": policy.seq, "members": members}


def _change(service: Service, caller: Caller, name: str | None, change: Change) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = vault_for(state, name)
    before = vault.policy.epoch
    try:
        updated = service.vault.change_policy(state, vault.vault_id, change, caller)
    except MemoriesError as exc:
        if exc.code == "policy_invalid" and exc.message == _ONE_OWNER:
            raise MemoriesError("policy_invalid", _one_owner_sentence(change)) from None
        raise
    policy = updated.policy
    return {
        "vault": updated.name,
        "policy_seq": policy.seq,
        "epoch": policy.epoch,
        "new_epoch": policy.epoch != before,
        "change": type(change).__name__,
    }


def _one_owner_sentence(change: Change) -> str:
    """PO-2 keeps exactly one Owner; say how to get where the user wanted to go."""
    if isinstance(change, RemoveMember):
        return "The Owner cannot be removed; transfer ownership first with `memories vault transfer USER_ID`."
    if isinstance(change, (AddMember, SetRole)) and change.role == "owner":
        return "A vault has exactly one Owner; make a member Owner with `memories vault transfer USER_ID`."
    return "The Owner's role changes only by a transfer (`memories vault transfer USER_ID`); a vault has exactly one Owner."


def _refuse_self(state: Unlocked, user: bytes, action: str) -> None:
    if user == state.identity.user_pub:
        raise MemoriesError("invalid_input", f"You cannot {action} yourself; ask the vault's Owner or an Admin.")


def _invite_view(invite: Invite, policy_devices: set[bytes]) -> dict[str, Any]:
    """What the Owner checks before trusting another person (ID-6): full fingerprints only."""
    return {
        "user": invite.user_pub.hex(),
        "user_fingerprint": fingerprint(invite.user_pub),
        "name": invite.name,
        "expires_ms": invite.expires_ms,
        "devices": [
            {
                "device_id": bytes(cert["device"]).hex(),
                "fingerprint": fingerprint(bytes(cert["device"])),
                "listed": bytes(cert["device"]) in policy_devices,
            }
            for cert, _ in invite.devices
        ],
    }


def _member_add_invite(service: Service, request: rq.VaultMemberAdd, caller: Caller) -> dict[str, Any]:
    """PO-3: the invited user with ``role`` and each device the invitation certifies, signed as
    consecutive policies committed at once; sync then seals the epoch keys to those devices."""
    state = service.require_unlocked()
    vault = vault_for(state, request.vault)
    refuse_if_device_only(state, vault.vault_id, "shared with other members")
    assert request.invite is not None
    invite = parse_invite(request.invite, owner_pub=state.identity.user_pub, now_ms=int(time.time() * 1000))
    policy = vault.policy
    listed = set(policy.devices())
    view = _invite_view(invite, listed)
    if request.check:
        return {"vault": vault.name, "role": request.role, "checked": True, **view}
    changes: list[tuple[bytes, Change]] = []
    role = policy.role_of(invite.user_pub)
    if role is None:
        changes.append((vault.vault_id, AddMember(invite.user_pub, request.role)))
    elif role != request.role:
        raise MemoriesError(
            "invalid_input",
            f"That person is already a member with role {role}; change it with `memories vault member role`. "
            "Nothing was changed.",
        )
    fresh = [(cert, sig) for cert, sig in invite.devices if bytes(cert["device"]) not in listed]
    changes += [(vault.vault_id, AddDevice(cert, sig)) for cert, sig in fresh]
    if not changes:
        raise MemoriesError("invalid_input", "That person and every device the invitation names are already in this vault.")
    before = policy.epoch
    try:
        updated = service.vault.change_policies(state, changes, caller)
    except MemoriesError as exc:
        if exc.code == "policy_invalid" and exc.message == _ONE_OWNER:
            raise MemoriesError("policy_invalid", _one_owner_sentence(changes[0][1])) from None
        raise
    head = updated[-1].policy
    return {
        "vault": vault.name,
        "role": request.role,
        "policy_seq": head.seq,
        "epoch": head.epoch,
        "new_epoch": head.epoch != before,
        "change": "AddMember" if role is None else "AddDevice",
        "devices_added": len(fresh),
        "owner_fingerprint": fingerprint(state.identity.user_pub),
        **_invite_view(invite, listed),
    }


@op(rq.VaultMemberAdd, needs_elevation=True)
def vault_member_add(service: Service, request: rq.VaultMemberAdd, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = vault_for(state, request.vault)
    refuse_if_device_only(state, vault.vault_id, "shared with other members")
    if (request.user is None) == (request.invite is None):
        raise MemoriesError("invalid_input", "Give either a user ID or an invitation (`memories whoami --invite` there).")
    if request.invite is not None:
        return _member_add_invite(service, request, caller)
    assert request.user is not None
    return _change(service, caller, request.vault, AddMember(_user(request.user), request.role))


@op(rq.VaultMemberRole, needs_elevation=True)
def vault_member_role(service: Service, request: rq.VaultMemberRole, caller: Caller) -> dict[str, Any]:
    return _change(service, caller, request.vault, SetRole(_user(request.user), request.role))


@op(rq.VaultMemberRemove, needs_elevation=True)
def vault_member_remove(service: Service, request: rq.VaultMemberRemove, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    user = _user(request.user)
    # The remover makes the new epoch key: a member removing themselves would keep it.
    _refuse_self(state, user, "remove")
    return _change(service, caller, request.vault, RemoveMember(user))


@op(rq.VaultTransfer, needs_elevation=True)
def vault_transfer(service: Service, request: rq.VaultTransfer, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = vault_for(state, request.vault)
    refuse_if_device_only(state, vault.vault_id, "handed to another member")
    return _change(service, caller, request.vault, TransferOwnership(_user(request.user)))


@op(rq.VaultRotate, needs_elevation=True)
def vault_rotate(service: Service, request: rq.VaultRotate, caller: Caller) -> dict[str, Any]:
    return _change(service, caller, request.vault, RotateEpoch())
