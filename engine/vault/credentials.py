"""Credentials: an asset kind on the shared revision DAG whose body is secret (HI-1, CD-3).

A credential revision's summary holds only non-secret fields (its name, type and
public fields such as host, port, user, allowlist); its body holds the secret
payload as canonical JSON. No generic read, search, list, diff or export op ever
returns the body: only the internal ``read_credential`` below, used by ops that
need the secret (OTP, copy, remote sessions, proxies) after their own checks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.errors import MemoriesError

if TYPE_CHECKING:
    from engine.vault.core import Actor, Unlocked, VaultCore
    from engine.vault.index import AssetEntry
    from engine.vault.revision import Revision

__all__ = [
    "CREDENTIAL_KIND",
    "Credential",
    "prepare_credential",
    "create_credential",
    "find_credential",
    "read_credential",
    "earlier_revisions",
    "secret_of",
    "credential_summary",
    "list_credentials",
    "backed_item",
]

CREDENTIAL_KIND = "credential"


@dataclass(frozen=True)
class Credential:
    asset_id: bytes
    revision: bytes
    name: str
    ctype: str
    public: dict[str, Any]
    secret: dict[str, Any]  # never returned by a generic op, never logged


def _check_name(name: str) -> None:
    if not name or len(name) > 200 or any(ord(c) < 32 for c in name):
        raise MemoriesError("invalid_input", "A credential name is 1–200 printable characters.")


def prepare_credential(
    core: VaultCore,
    state: Unlocked,
    *,
    name: str,
    ctype: str,
    public: dict[str, Any],
    secret: dict[str, Any],
    asset_id: bytes | None = None,
    parents: list[bytes] | None = None,
    reserved: list[int] | None = None,
    unsigned: bool = False,
) -> tuple[Revision, list[tuple[int, bytes]]]:
    """Build (not commit) a credential revision, e.g. to commit with a card in one transaction (CD-4).

    ``unsigned``: for a batch that signs all its revisions at once (``sign_revisions``) before
    it commits them."""
    _check_name(name)
    if asset_id is None:
        existing = _by_name(core, state, name)
        if existing is not None:
            raise MemoriesError("invalid_input", "A credential with that name already exists.")
    summary = {"title": name, "tags": [], "meta": {}, "credential": {"type": ctype, "public": public}}
    return core.new_revision(
        state,
        asset_id=asset_id or os.urandom(16),
        kind=CREDENTIAL_KIND,
        parents=parents or [],
        summary=summary,
        body=canonical_bytes(secret).decode("utf-8"),
        reserved=reserved,
        unsigned=unsigned,
    )


def create_credential(
    core: VaultCore,
    state: Unlocked,
    caller: Actor,
    *,
    name: str,
    ctype: str,
    public: dict[str, Any],
    secret: dict[str, Any],
) -> Revision:
    """Create and commit a credential with its audit record; returns the revision."""
    rev, rows = prepare_credential(core, state, name=name, ctype=ctype, public=public, secret=secret)
    audit = core.audit_record(state, "credential.create", caller, outcome="ok", assets=[rev.asset_id])
    core.commit(state, [rev], rows, [audit])
    return rev


def _current(state: Unlocked, entry: AssetEntry) -> Revision | None:
    if entry.kind != CREDENTIAL_KIND or state.index.is_deleted(entry):
        return None
    heads = [state.index.revisions[h] for h in entry.heads if not state.index.revisions[h].tombstone]
    return max(heads, key=lambda r: (r.created_ms, r.seq)) if heads else None


def _by_name(core: VaultCore, state: Unlocked, name: str) -> AssetEntry | None:
    named = _all_named(core, state, name)
    return named[0] if named else None


def _all_named(core: VaultCore, state: Unlocked, name: str) -> list[AssetEntry]:
    found = []
    for entry in state.index.assets.values():
        rev = _current(state, entry)
        if rev is not None and core.summary_of(state, rev).get("title") == name:
            found.append(entry)
    return found


def _ambiguous(state: Unlocked, entries: list[AssetEntry], why: str) -> MemoriesError:
    candidates = [{"id": e.asset_id.hex(), "short_id": state.index.short_id(e.asset_id), "kind": e.kind} for e in entries]
    return MemoriesError("ambiguous_id", why, candidates=candidates, more=0)


def find_credential(core: VaultCore, state: Unlocked, ref: str) -> AssetEntry:
    """Resolve a credential by its full ID, else by exact name, else by asset-ID prefix.

    A full ID always wins, so a credential whose *name* spells another one's ID can never
    stand in for it (internal callers pass full IDs). A reference that names one
    credential and is the ID prefix of another, or a name that two devices both gave a
    credential before they synced, is refused as ambiguous rather than resolved by the
    order of the store.
    """
    text = ref.strip().lower()
    if len(text) == 32 and all(c in "0123456789abcdef" for c in text):
        exact = state.index.assets.get(bytes.fromhex(text))
        if exact is not None and _current(state, exact) is not None:
            return exact
    named = _all_named(core, state, ref)
    if len(named) > 1:
        raise _ambiguous(state, named, f"{len(named)} credentials have that name; use one of their IDs.")
    by_id: AssetEntry | None
    try:
        by_id = state.index.resolve(ref)
    except MemoriesError as exc:
        if exc.code == "ambiguous_id" and not named:
            raise
        by_id = None
    if by_id is not None and _current(state, by_id) is None:
        by_id = None
    if named and by_id is not None and by_id.asset_id != named[0].asset_id:
        raise _ambiguous(state, [named[0], by_id], "That is one credential's name and another's ID prefix; use a longer ID.")
    entry = named[0] if named else by_id
    if entry is None:
        raise MemoriesError("not_found", "No credential has that name or ID.")
    return entry


def read_credential(core: VaultCore, state: Unlocked, ref: str) -> Credential:
    """Resolve and decrypt a credential's secret. Internal: callers check elevation/intent first."""
    entry = find_credential(core, state, ref)
    rev = _current(state, entry)
    assert rev is not None
    summary = core.summary_of(state, rev)
    info = summary.get("credential") or {}
    try:
        secret = decode_canonical(core.body_of(state, rev).encode("utf-8"))
    except ValueError as exc:
        raise MemoriesError("store_corrupt", "A credential payload is malformed.") from exc
    return Credential(
        asset_id=entry.asset_id,
        revision=rev.rev_id,
        name=str(summary.get("title", "")),
        ctype=str(info.get("type", "")),
        public=dict(info.get("public", {})),
        secret=secret if isinstance(secret, dict) else {},
    )


def earlier_revisions(state: Unlocked, ref: bytes, limit: int = 1000) -> list[Revision]:
    """A credential's earlier revisions, newest first, along first parents (its history).

    A credential's history is linear unless two devices changed it before they synced;
    then the first parent (the side the merge kept) is followed, as `history` shows it.
    """
    entry = state.index.assets.get(ref)
    if entry is None:
        return []
    current = _current(state, entry)
    out: list[Revision] = []
    rev = current
    while rev is not None and rev.parents and len(out) < limit:
        parent = state.index.revisions.get(rev.parents[0])
        if parent is None:  # not yet received (a partial sync): the history stops here
            break
        out.append(parent)
        rev = parent
    return out


def secret_of(core: VaultCore, state: Unlocked, rev: Revision) -> dict[str, Any]:
    """The decrypted secret body of one credential revision. Internal: callers check elevation first."""
    try:
        secret = decode_canonical(core.body_of(state, rev).encode("utf-8"))
    except ValueError as exc:
        raise MemoriesError("store_corrupt", "A credential payload is malformed.") from exc
    return secret if isinstance(secret, dict) else {}


def credential_summary(core: VaultCore, state: Unlocked, entry: AssetEntry) -> dict[str, Any]:
    """The safe projection: name, type, public fields and short ID; never the secret."""
    rev = _current(state, entry)
    if rev is None:
        raise MemoriesError("not_found", "No credential has that name or ID.")
    summary = core.summary_of(state, rev)
    info = summary.get("credential") or {}
    return {
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        "name": summary.get("title", ""),
        "type": info.get("type", ""),
        "public": dict(info.get("public", {})),
        "revision": rev.rev_id.hex(),
    }


def backed_item(public: dict[str, Any]) -> str | None:
    """The item a credential was made for, as a hex ID, or None for a stand-alone credential.

    A protected card and a login keep their secret in a credential whose public part names the
    card (``card``); ``secret protect`` names the memory whose body it was cut from (``asset``).
    The engine writes these fields; ``credential new`` accepts neither.
    """
    for key in ("card", "asset"):
        value = public.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def list_credentials(core: VaultCore, state: Unlocked) -> list[dict[str, Any]]:
    return [credential_summary(core, state, entry) for entry in state.index.assets.values() if _current(state, entry) is not None]
