"""Quarantine review and fork resolution (SY-2, SY-3; docs/sync.md).

* ``quarantine_list`` / ``quarantine_show``: what merge held back and why. ``show`` gives the
  item's kind, title and author — never the body of a credential-kind or protected item,
  and no body at all unless the kind is an ordinary note.
* ``quarantine_reapply`` (sudo): writes a fresh revision with the quarantined content under
  the current policy and epoch, signed by this device, if this device may write to the vault;
  otherwise refuses. ``quarantine_discard`` (sudo): records the entry as dropped.
* ``vault_forks`` lists recorded permission forks; ``vault_fork_resolve --keep HEAD`` (sudo):
  this user, who must be Owner on both branches, signs a resolution over the kept head and the
  whole discarded chain; the kept branch here must be this device's branch, and the vault's
  key is rotated on it in the same commit (SY-3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.crypto.chunks import ChunkError
from engine.errors import MemoriesError
from engine.service import requests_sync_local as rq
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.service import Service
from engine.sync.forks import RESOLUTION_RECORD, forks_for, sign_resolution
from engine.sync.quarantine import QUARANTINE_DONE_RECORD, find, quarantined
from engine.vault.core import Unlocked, VaultKeys
from engine.vault.policy import Policy, RotateEpoch
from engine.vault.revision import Revision

__all__ = ["ORDINARY_BODY_KINDS"]

# Kinds whose body `quarantine show` may print; credential kinds and protected cards never.
ORDINARY_BODY_KINDS = frozenset({"memory", "note"})


def _vault(state: Unlocked, name: str | None) -> VaultKeys:
    if name is None:
        return state.vault
    for vault in state.vaults.values():
        if vault.name == name:
            return vault
    raise MemoriesError("not_found", "No vault has that name; see `memories vaults`.")


def _opened(state: Unlocked, record: dict[str, Any]) -> tuple[Revision, dict[str, Any] | None, bytes | None]:
    rev = Revision(bytes(record["signed"]), bytes(record["sig"]), [])
    vault = state.vaults.get(rev.vault_id)
    key = vault.epoch_keys.get(rev.epoch) if vault is not None else None
    if key is None:
        return rev, None, None
    try:
        return rev, rev.open_summary(key), rev.open_body(key, [bytes(p) for p in record["parts"]])
    except ChunkError:
        return rev, None, None


def _view(state: Unlocked, record: dict[str, Any], *, body: bool) -> dict[str, Any]:
    rev, summary, plain = _opened(state, record)
    out: dict[str, Any] = {
        "id": bytes(record["id"]).hex(),
        "revision": rev.rev_id.hex(),
        "asset": rev.asset_id.hex(),
        "kind": rev.kind,
        "author": rev.author.hex(),
        "created_ms": rev.created_ms,
        "epoch": rev.epoch,
        "reason": str(record["reason"]),
        "title": summary.get("title") if summary else None,
        "readable": summary is not None,
    }
    if body:
        shown = rev.kind in ORDINARY_BODY_KINDS and plain is not None and not (summary or {}).get("protected")
        out["body"] = plain.decode("utf-8", "replace") if shown and plain is not None else None
    return out


@op(rq.QuarantineList)
def quarantine_list(service: Service, request: rq.QuarantineList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    return {"entries": [_view(state, record, body=False) for record in quarantined(state)]}


@op(rq.QuarantineShow)
def quarantine_show(service: Service, request: rq.QuarantineShow, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    record = find(state, request.id)
    view = _view(state, record, body=True)
    service.vault.commit_intent(state, "quarantine_show", caller, [bytes.fromhex(view["asset"])])
    return view


@op(rq.QuarantineReapply, needs_elevation=True)
def quarantine_reapply(service: Service, request: rq.QuarantineReapply, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    record = find(state, request.id)
    rev, summary, plain = _opened(state, record)
    if summary is None or plain is None:
        raise MemoriesError("invalid_input", "This device cannot open the quarantined content; discard it instead.")
    vault = state.vaults.get(rev.vault_id)
    if vault is None:
        raise MemoriesError("not_found", "The quarantined revision's vault is not on this device.")
    entry = state.index.assets.get(rev.asset_id)
    parents = list(entry.heads) if entry is not None else []
    # A fresh revision under the current policy and epoch (new_revision checks the role and
    # that this device is authorized: a revoked device cannot reapply).
    new, content = service.vault.new_revision(
        state,
        asset_id=rev.asset_id,
        kind=rev.kind,
        parents=parents,
        summary=dict(summary),
        body=plain.decode("utf-8"),
        vault=vault,
    )
    done = {"t": QUARANTINE_DONE_RECORD, "id": bytes(record["id"]), "action": "reapplied", "revision": new.rev_id}
    audit = service.vault.audit_record(state, "quarantine_reapply", caller, outcome="ok", assets=[rev.asset_id])
    service.vault.commit(state, [new], content, [done, audit])
    return {"id": bytes(record["id"]).hex(), "reapplied": True, "revision": new.rev_id.hex(), "asset": rev.asset_id.hex()}


@op(rq.QuarantineDiscard, needs_elevation=True)
def quarantine_discard(service: Service, request: rq.QuarantineDiscard, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    record = find(state, request.id)
    done = {"t": QUARANTINE_DONE_RECORD, "id": bytes(record["id"]), "action": "discarded"}
    audit = service.vault.audit_record(state, "quarantine_discard", caller, outcome="ok", assets=[])
    service.vault.commit(state, [], [], [done, audit])
    return {"id": bytes(record["id"]).hex(), "discarded": True}


def _branch(records: list[Any]) -> list[Policy]:
    return [Policy.parse(r) for r in records]


@op(rq.VaultForks)
def vault_forks(service: Service, request: rq.VaultForks, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = _vault(state, request.vault)
    out = []
    for fork in forks_for(state, vault.vault_id):
        ours, theirs = _branch(fork["ours"]), _branch(fork["theirs"])
        out.append(
            {
                "fork": bytes(fork["fork"]).hex(),
                "base_seq": ours[0].seq - 1,
                "ours": {"head": ours[-1].head.hex(), "policies": len(ours)},
                "theirs": {"head": theirs[-1].head.hex(), "policies": len(theirs)},
            }
        )
    return {"vault": vault.name, "forks": out}


@op(rq.VaultForkResolve, needs_elevation=True)
def vault_fork_resolve(service: Service, request: rq.VaultForkResolve, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = _vault(state, request.vault)
    forks = forks_for(state, vault.vault_id)
    if not forks:
        raise MemoriesError("not_found", "This vault has no recorded policy fork; nothing was changed.")
    keep = request.keep.strip().lower()
    if len(keep) < 8 or any(c not in "0123456789abcdef" for c in keep):
        raise MemoriesError("invalid_input", "--keep takes at least 8 hex digits of a branch head (see `memories vault forks`).")
    for fork in forks:
        ours, theirs = _branch(fork["ours"]), _branch(fork["theirs"])
        if theirs[-1].head.hex().startswith(keep):
            raise MemoriesError(
                "invalid_input",
                "The kept branch must be this device's: run the resolution on a device that holds that "
                "branch (it then reaches this one with the next sync). Nothing was changed.",
            )
        if not ours[-1].head.hex().startswith(keep) or vault.policy.head != ours[-1].head:
            continue
        base = bytes(fork["base"])
        resolution = sign_resolution(state.identity.user_key, vault.vault_id, base, ours, theirs)
        resolution.check(ours, theirs)  # Owner on both branches, or nothing is signed into the store
        record = {
            "t": RESOLUTION_RECORD,
            "vault": vault.vault_id,
            "fork": bytes(fork["fork"]),
            "resolution": resolution.to_record(),
        }
        # The resolution and the key rotation on the kept branch commit together (SY-3); the
        # discarded policies stay with the vault to verify the revisions written under them.
        state.vaults[vault.vault_id] = dataclasses.replace(vault, discarded=[*vault.discarded, *theirs])
        try:
            updated = service.vault.change_policy(state, vault.vault_id, RotateEpoch(), caller, extra_records=[record])
        except BaseException:
            state.vaults[vault.vault_id] = vault
            raise
        return {
            "vault": vault.name,
            "kept": ours[-1].head.hex(),
            "discarded": len(theirs),
            "epoch": updated.policy.epoch,
            "policy_seq": updated.policy.seq,
        }
    raise MemoriesError("not_found", "No branch of a recorded fork has that head here; see `memories vault forks`.")
