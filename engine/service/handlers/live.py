"""A window that stays current (SPEC DT-7): the change feed, what needs attention, unsearched conflicts.

``events`` reads the engine's change feed (``engine/service/events.py``): item created,
changed or deleted with its ID, vault, kind and revision; a bulk change (an import, a sync)
as one event with its count; counts and tags possibly changed; background jobs starting,
progressing and ending; the vault locking and unlocking; the attention summary changing
(conflicts, quarantined revisions, cloud delivery gaps). IDs, kinds and counts only: never a
title, a body, a tag or a secret. The dashboard's one long-running reader relays it to its
pages as server-sent events. Not on the MCP allowlist.

``attention`` lists what needs the user: items in conflict (kept out of search, seed 001),
revisions a sync quarantined, policy forks and cloud delivery gaps, each with what to do.
``search_conflicts`` names the conflicted items a search would have matched, so the page can
say that they were not searched.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

import msgspec

from engine.errors import MemoriesError
from engine.jobs.background import JobHandle
from engine.service.caller import Caller
from engine.service.events import EventBus, NoWaitingSlot
from engine.service.handlers.assets import ORDINARY_KINDS
from engine.service.projections import newest_head
from engine.service.registry import op
from engine.service.requests import Request
from engine.service.service import EXTENSIONS, Service
from engine.sync.forks import FORK_RECORD, RESOLUTION_RECORD, forks_for
from engine.sync.quarantine import quarantined
from engine.vault.core import Unlocked
from engine.vault.revision import Revision

__all__ = ["Events", "Attention", "SearchConflicts", "bus_of", "BULK_ITEMS", "MAX_WAIT_MS", "attention_reasons"]

log = logging.getLogger("memories.engine")

_ATTR = "_live_events"
# A commit touching more items than this is one ``items`` event (an import, a sync), not one each.
BULK_ITEMS = 32
# The longest one ``events`` request waits for a change.
MAX_WAIT_MS = 25_000
# A job's progress is published at most this often (its start and end always).
PROGRESS_EVERY_S = 0.25
# Words of a query looked for in conflicted items, and the conflicted items looked at.
MAX_QUERY_WORDS = 16
MAX_CONFLICTS_SCANNED = 2_000
# Records whose commit may change what needs attention (quarantine, policy forks and their resolutions).
QUARANTINE_RECORDS = frozenset({"sync_quarantine", "sync_quarantine_done", FORK_RECORD, RESOLUTION_RECORD})

Stream = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{16}$")]


class Events(Request, tag="events"):
    # Without ``after``: the current position (a new reader's start).
    after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    stream: Stream | None = None
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_WAIT_MS)] = 0


class Attention(Request, tag="attention"):
    pass


class SearchConflicts(Request, tag="search_conflicts"):
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=500)]


def bus_of(service: Service) -> EventBus:
    bus = getattr(service, _ATTR, None)
    if not isinstance(bus, EventBus):
        raise MemoriesError("internal")
    return bus


# -- what a commit publishes -----------------------------------------------------------------------


def _item_event(state: Unlocked, rev: Revision) -> dict[str, Any]:
    entry = state.index.assets.get(rev.asset_id) or state.index.hidden_assets.get(rev.asset_id)
    change = "deleted" if rev.tombstone else ("changed" if rev.parents else "created")
    return {
        "type": "item",
        "change": change,
        "id": rev.asset_id.hex(),
        "vault": entry.vault_id.hex() if entry is not None else None,
        "kind": rev.kind,
        "revision": rev.rev_id.hex(),
        "conflict": bool(entry is not None and entry.in_conflict),
    }


def _attention_digest(service: Service, state: Unlocked) -> dict[str, int]:
    delivery = {"not_arriving": 0, "not_taken": 0}
    for contribute in service.status_contributors:
        try:
            extra = contribute()
        except Exception as exc:  # a contributor's failure must not turn a saved change into an error
            log.error("attention: a status contributor failed type=%s", type(exc).__name__)
            continue
        delivery["not_arriving"] += int(extra.get("cloud_not_arriving", 0))
        delivery["not_taken"] += int(extra.get("cloud_not_taken", 0))
    forks = sum(len(forks_for(state, vault_id)) for vault_id in list(state.vaults))
    return {"conflicts": state.index.conflict_count, "quarantined": len(quarantined(state)), "forks": forks, **delivery}


def attention_reasons(digest: dict[str, int]) -> list[str]:
    """The fixed reason codes of a digest (the status page names them)."""
    reasons = []
    if digest.get("conflicts"):
        reasons.append("conflicts")
    if digest.get("quarantined"):
        reasons.append("quarantine")
    if digest.get("forks"):
        reasons.append("forks")
    if digest.get("not_arriving") or digest.get("not_taken"):
        reasons.append("cloud_delivery")
    return reasons


def install(service: Service) -> None:
    bus = EventBus()
    setattr(service, _ATTR, bus)
    last_digest: dict[str, dict[str, int]] = {}
    last_progress: dict[str, float] = {}

    def publish_attention(state: Unlocked, force: bool = False) -> None:
        digest = _attention_digest(service, state)
        if force or digest != last_digest.get("value"):
            last_digest["value"] = digest
            bus.publish({"type": "attention", **digest, "reasons": attention_reasons(digest)}, coalesce="attention")

    def on_commit(state: Unlocked, revisions: list[Revision], extra_records: list[dict[str, Any]]) -> None:
        latest: dict[bytes, Revision] = {}
        for rev in revisions:
            latest[rev.asset_id] = rev
        if len(latest) > BULK_ITEMS:
            vaults = {e.vault_id.hex() for a in latest if (e := state.index.assets.get(a)) is not None}
            kinds = sorted({rev.kind for rev in latest.values()})
            bus.publish({"type": "items", "count": len(latest), "vaults": sorted(vaults), "kinds": kinds})
        else:
            for rev in latest.values():
                bus.publish(_item_event(state, rev))
        if latest:
            touched = sorted({e.vault_id.hex() for a in latest if (e := state.index.assets.get(a)) is not None})
            bus.publish({"type": "counts", "vaults": touched}, coalesce="counts")
        if latest or any(r.get("t") in QUARANTINE_RECORDS or str(r.get("t", "")).startswith("cloud") for r in extra_records):
            publish_attention(state)

    def on_unlock(state: Unlocked) -> None:
        bus.publish({"type": "session", "state": "unlocked"}, coalesce="session")
        publish_attention(state, force=True)

    def on_lock() -> None:
        last_digest.clear()
        bus.publish({"type": "session", "state": "locked"}, coalesce="session")

    def on_job(handle: JobHandle) -> None:
        now = time.monotonic()
        recent = now - last_progress.get(handle.name, 0.0) < PROGRESS_EVERY_S
        if handle.state == "running" and handle.done and recent:
            return
        last_progress[handle.name] = now
        event = {"type": "job", "job": handle.name, "state": handle.state, "done": handle.done, "total": handle.total}
        bus.publish(event, coalesce="job:" + handle.name)

    def contribute() -> dict[str, int | bool]:
        """DesktopStatus: held-back revisions and policy forks ask for attention too (counts only)."""
        state = service.state
        if state is None:
            return {}
        try:
            held = len(quarantined(state))
            forks = sum(len(forks_for(state, vault_id)) for vault_id in list(state.vaults))
        except (RuntimeError, KeyError):  # the state changed under us: the next poll
            return {}
        return {"attention": bool(held or forks), "reason_quarantine": held > 0, "reason_forks": forks > 0}

    service.status_contributors.append(contribute)
    service.on_commit.append(on_commit)
    service.on_unlock.append(on_unlock)
    service.on_lock.append(on_lock)
    service.on_stop.append(bus.close)
    service.background.listeners.append(on_job)


EXTENSIONS.append(install)


# -- ops -------------------------------------------------------------------------------------------


@op(Events, needs_unlock=False, lock_free=True, touches_idle=False)
def events(service: Service, request: Events, caller: Caller) -> dict[str, Any]:
    """DT-7: the change events after ``after`` (waiting up to ``wait_ms`` for one), or resync."""
    try:
        feed = bus_of(service).read(request.after, request.stream, request.wait_ms / 1000)
    except NoWaitingSlot:
        raise MemoriesError("busy", "Too many windows are waiting for changes; try again in a moment.") from None
    return feed.to_json()


def _title(service: Service, state: Unlocked, rev: Revision) -> str:
    try:
        return str(service.vault.summary_of(state, rev).get("title", ""))
    except MemoriesError:
        return ""


def _conflicts(service: Service, state: Unlocked) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for asset_id in sorted(state.index.listing.conflicted)[:MAX_CONFLICTS_SCANNED]:
        entry = state.index.assets.get(asset_id)
        if entry is None or not entry.in_conflict or state.index.is_deleted(entry):
            continue
        heads = sorted(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq), reverse=True)
        ordinary = entry.kind in ORDINARY_KINDS
        short = state.index.short_id(asset_id)
        out.append(
            {
                "id": asset_id.hex(),
                "short_id": short,
                "kind": entry.kind,
                "title": _title(service, state, newest_head(state, entry)),
                "versions": len(heads),
                "changed_ms": heads[0].changed_ms,
                # Ordinary items are resolved in the window; the others where they are edited.
                "resolve_here": ordinary,
                "command": f"memories edit {short} --resolve --base REVISION" if ordinary else f"memories history {short}",
            }
        )
    out.sort(key=lambda item: -int(item["changed_ms"]))  # the newest conflict first
    return out


@op(Attention, touches_idle=False)
def attention(service: Service, request: Attention, caller: Caller) -> dict[str, Any]:
    """DT-7: what needs the user, each entry with what to do about it (no content, no secret)."""
    state = service.require_unlocked()
    digest = _attention_digest(service, state)
    held = quarantined(state)
    reasons: dict[str, int] = {}
    for record in held:
        reasons[str(record.get("reason", "held back"))] = reasons.get(str(record.get("reason", "held back")), 0) + 1
    return {
        "conflicts": _conflicts(service, state),
        "quarantine": {
            "count": len(held),
            "reasons": [{"reason": r, "count": n} for r, n in sorted(reasons.items())],
            "command": "memories quarantine list",
        },
        "forks": {"count": digest["forks"], "command": "memories vault forks"},
        "cloud_delivery": {
            "not_arriving": digest["not_arriving"],
            "not_taken": digest["not_taken"],
            "command": "memories cloud sync",
        },
        "reasons": attention_reasons(digest),
    }


def _words(query: str) -> list[str]:
    words: list[str] = []
    for raw in query.casefold().replace('"', " ").split():
        word = raw.strip(".,;:!?()[]{}*'`")
        if word and word.upper() not in ("OR", "AND", "NOT") and word not in words:
            words.append(word)
    return words[:MAX_QUERY_WORDS]


@op(SearchConflicts, touches_idle=False)
def search_conflicts(service: Service, request: SearchConflicts, caller: Caller) -> dict[str, Any]:
    """Items in conflict are kept out of the index (seed 001); this names those whose versions
    contain a word of the query (title, tags or body, case-folded), so a search can say so."""
    state = service.require_unlocked()
    words = _words(request.query)
    found = []
    for asset_id in sorted(state.index.listing.conflicted)[:MAX_CONFLICTS_SCANNED]:
        entry = state.index.assets.get(asset_id)
        if entry is None or not words or entry.kind not in ORDINARY_KINDS or state.index.is_deleted(entry):
            continue
        for rev in state.index.head_revisions(entry):
            if rev.tombstone:
                continue
            summary = service.vault.summary_of(state, rev)
            text = " ".join([str(summary.get("title", "")), *map(str, summary.get("tags", []))]).casefold()
            if not any(w in text for w in words):
                text = service.vault.body_of(state, rev).casefold()
            if any(w in text for w in words):
                found.append({"id": asset_id.hex(), "short_id": state.index.short_id(asset_id), "kind": entry.kind})
                break
    return {"items": found, "count": len(found)}
