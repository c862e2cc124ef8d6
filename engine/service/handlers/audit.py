"""The audit log, readable by its owner (AU-1): ``memories audit`` and the dashboard's activity view.

Every read intent, write and agent call is already a sealed, signed audit entry (see
``VaultCore.audit_record`` in engine/vault/core.py). At unlock the engine keeps the signed
bytes of each entry (``Unlocked.audit_log``, oldest first, ~300 bytes each, dropped with the
rest of the unlocked state at lock) and this module appends each new one as it commits. The ``audit`` op
decodes entries newest first and stops once it has ``limit`` + 1 matches, so an
unfiltered view costs the same in any vault and a selective filter costs one scan.

An answer carries only what an entry recorded that is safe to show: time, caller
namespace and surface, op, phase, outcome or error code, and asset IDs with their
*current* titles (a credential's title is its name; no body, no secret, no value).
A deleted or unknown asset shows no title. Reading the log needs elevation, and the
read itself is committed as an ``audit`` intent before the answer is delivered.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from engine.crypto.canonical import decode_canonical_flat
from engine.errors import MemoriesError
from engine.service import requests as rq
from engine.service.caller import CLIENT_LABELS, Caller
from engine.service.handlers.devices import device_names
from engine.service.integrity import AUDIT_TAG
from engine.service.projections import asset_summary
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.sync.bundle import PEER_AUDIT_RECORD
from engine.vault.revision import Revision

__all__ = ["AUDIT_VIEW_VERSION", "actor_label", "actor_matches", "decode_entry"]

AUDIT_VIEW_VERSION = 1
_PREFIX = AUDIT_TAG.encode("ascii") + b"\x00\x01"
# Entry fields a view may show: codes and names the engine chose, never request data.
_TEXT_FIELDS = ("op", "caller", "surface", "client", "phase", "outcome", "error")
_DEVICE = "\x00device"  # set on entries another device signed (never a key of a stored entry)


def decode_entry(signed: bytes) -> dict[str, Any]:
    """The fields of one version-1 audit entry (the signature was checked at unlock)."""
    if not signed.startswith(_PREFIX):
        raise MemoriesError("store_corrupt", "An audit entry is not in the version-1 format.")
    try:
        entry = decode_canonical_flat(signed[len(_PREFIX) :])
    except (ValueError, TypeError) as exc:
        raise MemoriesError("store_corrupt", "An audit entry could not be decoded.") from exc
    if not isinstance(entry, dict) or not isinstance(entry.get("ts_ms"), int):
        raise MemoriesError("store_corrupt", "An audit entry has no time.")
    return entry


def actor_matches(namespace: str, actor: str) -> bool:
    """``mcp`` or ``mcp:`` matches every agent; ``mcp:claude`` only that agent (exact namespace)."""
    if namespace == actor:
        return True
    prefix = actor if actor.endswith(":") else actor + ":"
    return ":" not in actor[:-1] and namespace.startswith(prefix)


def actor_label(namespace: str, surface: str, client: str = "") -> str:
    """Who acted, in words: "you (cli)", "agent claude (mcp)", "dashboard", or the namespace.

    ``client`` is a local program's name for itself (engine/service/caller.py): it names a
    local IPC caller ("dashboard", "tray") and nothing else, so no label can pose as an agent
    or a remote device."""
    kind, _, name = namespace.partition(":")
    if surface == "mcp" and kind == "mcp":
        return f"agent {name} (mcp)"
    if surface == "dashboard":
        return "dashboard"
    if surface == "ipc" and kind == "cli" and client in CLIENT_LABELS:
        return client
    if kind == "cli":
        return "you (cli)"
    if name == "remote":
        return f"remote ({kind})"
    return namespace


def _asset_view(service: Service, state: Unlocked, asset_id: bytes) -> dict[str, Any]:
    entry = state.index.assets.get(asset_id)
    if entry is None:
        return {"id": asset_id.hex(), "short_id": asset_id.hex()[:12], "kind": None, "title": None, "state": "unknown"}
    short = state.index.short_id(asset_id)
    if state.index.is_deleted(entry):
        return {"id": asset_id.hex(), "short_id": short, "kind": entry.kind, "title": None, "state": "deleted"}
    title = asset_summary(service, state, entry)["title"]
    return {"id": asset_id.hex(), "short_id": short, "kind": entry.kind, "title": str(title), "state": "current"}


def _matches(entry: dict[str, Any], request: rq.Audit) -> bool:
    ts = entry["ts_ms"]
    if request.since_ms is not None and ts < request.since_ms:
        return False
    if request.until_ms is not None and ts >= request.until_ms:
        return False
    if request.operation is not None and entry.get("op") != request.operation:
        return False
    return request.actor is None or actor_matches(str(entry.get("caller", "")), request.actor)


@op(rq.Audit, needs_elevation=True)
def audit(service: Service, request: rq.Audit, caller: Caller) -> dict[str, Any]:
    """AU-1: matching entries, newest first, with the current titles of their assets."""
    state = service.require_unlocked()
    if request.since_ms is not None and request.until_ms is not None and request.since_ms >= request.until_ms:
        raise MemoriesError("invalid_input", "The start of the time range must be before its end.")
    found: list[dict[str, Any]] = []
    for entry in _newest_first(state):
        if _matches(entry, request):
            found.append(entry)
            if len(found) > request.limit:
                break
    names = device_names(state) if any(_DEVICE in e for e in found) else {}
    assets: dict[bytes, dict[str, Any]] = {}
    entries = []
    for entry in found[: request.limit]:
        fields = {name: (value if isinstance(value := entry.get(name), str) else None) for name in _TEXT_FIELDS}
        ids = [bytes(a) for a in entry.get("assets", []) if isinstance(a, bytes)]
        for asset_id in ids:
            if asset_id not in assets:
                assets[asset_id] = _asset_view(service, state, asset_id)
        entries.append(
            {
                "ts_ms": entry["ts_ms"],
                "op": fields["op"] or "",
                "actor": fields["caller"] or "",
                "surface": fields["surface"] or "",
                "who": _who(entry, fields, names),
                "device": entry[_DEVICE].hex() if _DEVICE in entry else None,
                "phase": fields["phase"],
                "outcome": fields["outcome"],
                "error": fields["error"],
                "assets": [assets[a] for a in ids],
            }
        )
    # Delivered only after this read is on disk: a failed commit delivers nothing.
    service.vault.commit_intent(state, "audit", caller, [])
    return {"v": AUDIT_VIEW_VERSION, "entries": entries, "more": len(found) > request.limit}


def _newest_first(state: Unlocked) -> Iterator[dict[str, Any]]:
    """This device's entries and those other devices of this user sent by sync (merge stored
    them as ``peer_audit`` records after checking their signatures and hash chains), newest
    first. A peer's entry carries the device that signed it under ``_DEVICE``."""
    own = (decode_entry(signed) for signed in reversed(state.audit_log))
    peers = []
    for _, record in state.extra_records.get(PEER_AUDIT_RECORD, []):
        entry = decode_entry(bytes(record["signed"]))
        entry[_DEVICE] = bytes(record["device"])
        peers.append(entry)
    peers.sort(key=lambda e: int(e["ts_ms"]), reverse=True)
    return heapq.merge(own, peers, key=lambda e: -int(e["ts_ms"]))


def _who(entry: dict[str, Any], fields: dict[str, str | None], names: dict[bytes, str]) -> str:
    label = actor_label(fields["caller"] or "", fields["surface"] or "", fields.get("client") or "")
    device = entry.get(_DEVICE)
    if not isinstance(device, bytes):
        return label
    return f"{label} on {names.get(device) or device.hex()[:12]}"


def _setup(service: Service) -> None:
    def on_commit(state: Unlocked, revisions: list[Revision], extra: list[dict[str, Any]]) -> None:
        state.audit_log.extend(bytes(record["signed"]) for record in extra if record.get("t") == "audit")

    service.on_commit.append(on_commit)


EXTENSIONS.append(_setup)
