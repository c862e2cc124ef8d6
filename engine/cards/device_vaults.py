"""Device-only vaults and the client's ``local_config`` record (CD-9).

A device-only vault is an ordinary vault (own key, own owner policy) whose ID is
listed in a sealed ``{"t": "device_only_vault"}`` record of this device's state.
Nothing about it leaves the device: features that share vaults (device approval,
member export, sync, backup) ask :func:`is_device_only` and filter or refuse.
The first use creates one, named "local", holding the ``local_config`` asset: the
client's version and directory metadata.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from engine.errors import MemoriesError
from engine.vault.core import Unlocked, VaultCore, VaultKeys

if TYPE_CHECKING:
    from engine.vault.revision import Revision

__all__ = [
    "DEVICE_ONLY_RECORD",
    "LOCAL_CONFIG_KIND",
    "device_only_vaults",
    "is_device_only",
    "refuse_if_device_only",
    "ensure_local_vault",
    "find_local_config",
    "local_config_revision",
]

DEVICE_ONLY_RECORD = "device_only_vault"
LOCAL_CONFIG_KIND = "local_config"


def device_only_vaults(state: Unlocked) -> set[bytes]:
    return {bytes(record["vault_id"]) for _, record in state.extra_records.get(DEVICE_ONLY_RECORD, [])}


def is_device_only(state: Unlocked, vault_id: bytes) -> bool:
    return vault_id in device_only_vaults(state)


def refuse_if_device_only(state: Unlocked, vault_id: bytes, action: str) -> None:
    """For member export and sync: a device-only vault never leaves this device."""
    if is_device_only(state, vault_id):
        raise MemoriesError("permission_denied", f"A device-only vault cannot be {action}.")


def ensure_local_vault(state: Unlocked) -> tuple[VaultKeys, list[dict[str, Any]]]:
    """The device-only vault, plus the records that create it when it does not exist yet.

    A new vault is returned but not registered: the caller adds it to ``state.vaults``
    only after the commit that persists these records succeeded (ST-5).
    """
    from engine.vault.policy import owner_policy

    existing = sorted(device_only_vaults(state) & set(state.vaults))
    if existing:
        return state.vaults[existing[0]], []
    vault_id = os.urandom(16)
    policy = owner_policy(state.identity, vault_id)
    key = os.urandom(32)
    records: list[dict[str, Any]] = [
        {
            "t": "vault",
            "vault_id": vault_id,
            "name": "local",
            "default": False,
            "policy": policy.to_record(),
            "epoch_keys": [{"epoch": policy.epoch, "key": key}],
        },
        {"t": DEVICE_ONLY_RECORD, "vault_id": vault_id},
    ]
    return VaultKeys(vault_id, "local", policy, {policy.epoch: key}), records


def local_config_revision(
    core: VaultCore, state: Unlocked, keys: VaultKeys, summary: dict[str, Any], body: str
) -> tuple[Revision, list[tuple[int, bytes]]]:
    """Encrypt and sign a revision of the local_config asset in the device-only vault."""
    existing = [e for e in state.index.assets.values() if e.kind == LOCAL_CONFIG_KIND and e.vault_id == keys.vault_id]
    return core.new_revision(
        state,
        asset_id=existing[0].asset_id if existing else os.urandom(16),
        kind=LOCAL_CONFIG_KIND,
        parents=list(existing[0].heads) if existing else [],
        summary=summary,
        body=body,
        vault=keys,
    )


def find_local_config(state: Unlocked) -> Revision | None:
    for entry in state.index.assets.values():
        if entry.kind == LOCAL_CONFIG_KIND and is_device_only(state, entry.vault_id):
            heads = state.index.head_revisions(entry)
            return max(heads, key=lambda r: (r.created_ms, r.seq))
    return None
