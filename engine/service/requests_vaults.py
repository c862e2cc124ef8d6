"""Request types of vaults and their members (API-1; PO-1, PO-2): create, list, members, policy changes.

A member is named by their user ID: the 64 hex digits of their user public key (what
``memories whoami`` prints). A vault is named by its name; without ``vault`` an op acts
on the default vault.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import Request

__all__ = [
    "VaultName",
    "UserId",
    "Role",
    "VaultNew",
    "VaultList",
    "VaultMembers",
    "VaultMemberAdd",
    "VaultMemberRole",
    "VaultMemberRemove",
    "VaultTransfer",
    "VaultRotate",
]

VaultName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
UserId = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
Role = Literal["owner", "admin", "editor", "reader"]
InviteText = Annotated[str, msgspec.Meta(min_length=1, max_length=16 * 1024)]


class VaultNew(Request, tag="vault_new"):
    """A new shared vault: its own random ID and key, this user its only Owner."""

    name: VaultName


class VaultList(Request, tag="vaults"):
    pass


class VaultMembers(Request, tag="vault_members"):
    vault: VaultName | None = None


class VaultMemberAdd(Request, tag="vault_member_add"):
    """Add a member by user ID (no device), or by another person's invitation (PO-3): the user and
    every device the invitation certifies, in one policy change. ``check`` shows the invitation's
    full fingerprints (ID-6) and changes nothing."""

    role: Role
    user: UserId | None = None
    invite: InviteText | None = None
    vault: VaultName | None = None
    check: bool = False


class VaultMemberRole(Request, tag="vault_member_role"):
    user: UserId
    role: Role
    vault: VaultName | None = None


class VaultMemberRemove(Request, tag="vault_member_remove"):
    """Removes the member and revokes their devices; starts a new epoch with a new key (PO-2)."""

    user: UserId
    vault: VaultName | None = None


class VaultTransfer(Request, tag="vault_transfer"):
    """Ownership to another member; the previous Owner becomes Admin (exactly one Owner after)."""

    user: UserId
    vault: VaultName | None = None


class VaultRotate(Request, tag="vault_rotate"):
    """A new epoch with a fresh vault key, by the Owner's hand."""

    vault: VaultName | None = None
