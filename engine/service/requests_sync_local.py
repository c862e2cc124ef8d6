"""Request types of the local side of sync (SY-2, SY-3): quarantine review and fork resolution.

These never travel between devices: quarantine is reviewed and re-applied locally only, and
a fork is resolved by this user's Owner signature on this device (docs/sync.md).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import Request

__all__ = [
    "QuarantineList",
    "QuarantineShow",
    "QuarantineReapply",
    "QuarantineDiscard",
    "VaultForks",
    "VaultForkResolve",
]

QuarantineRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
HeadRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
VaultName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class QuarantineList(Request, tag="quarantine_list"):
    pass


class QuarantineShow(Request, tag="quarantine_show"):
    id: QuarantineRef


class QuarantineReapply(Request, tag="quarantine_reapply"):
    id: QuarantineRef


class QuarantineDiscard(Request, tag="quarantine_discard"):
    id: QuarantineRef


class VaultForks(Request, tag="vault_forks"):
    vault: VaultName | None = None


class VaultForkResolve(Request, tag="vault_fork_resolve"):
    keep: HeadRef
    vault: VaultName | None = None
