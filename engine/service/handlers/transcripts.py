"""Agent transcripts (AG-5): import, list, show, and the MCP recall ops ``recall_turn``/``recall_session``.

Each session is one asset of kind ``transcript`` in the default vault (encrypted and signed
like every revision). The daemon, not the importer, computes every identity: the importer
sends adapter-neutral events, this module merges them into the session by ``event_uid``
and writes a new revision only when something is new (or a file was read by a new
adapter version). Reads go through an in-memory cache of decoded sessions that a lock
wipes (ST-10). Results name turns and sessions by short handles (``[1]``, ``[2]``) that the
same caller (one MCP grant, or one CLI shell) can pass to its next call.
"""

from __future__ import annotations

import os
import re
import weakref
from collections import OrderedDict
from typing import Any

from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.service import requests_transcripts as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import UNLISTED_KINDS
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.transcripts.model import Event, revision_id
from engine.transcripts.session import KIND, Session, matching_turns
from engine.vault.core import Unlocked
from engine.vault.revision import Revision, chunk_count

__all__ = ["KIND", "MAX_HANDLES"]

# `memories list` shows notes and cards; transcripts have `memories transcript list`.
UNLISTED_KINDS.add(KIND)
# Handles per caller; when full, numbering starts again at [1].
MAX_HANDLES = 1000
_HANDLE = re.compile(r"^\[?(\d{1,4})\]?$")
_HEX = re.compile(r"^[0-9a-f]{6,64}$")


class _Runtime:
    """Decoded sessions (by asset), the session_uid → asset map, and each caller's handles."""

    def __init__(self) -> None:
        self.sessions: dict[bytes, tuple[bytes, Session]] = {}
        self.by_uid: dict[str, bytes] | None = None
        # Every source revision_id already imported (re-import skips those files unread).
        self.sources: set[str] = set()
        # turn_uid → (asset, turn index), built on the first lookup by a full turn_uid.
        self.turns: dict[str, tuple[bytes, int]] | None = None
        self.handles: dict[str, OrderedDict[str, int]] = {}

    def clear(self) -> None:
        self.sessions.clear()
        self.by_uid = None
        self.sources.clear()
        self.turns = None
        self.handles.clear()

    def committed(self, service: Service, state: Unlocked, revisions: list[Revision]) -> None:
        """Keep the session map and source set in step with every commit (ours or a sync's)."""
        for rev in revisions:
            if rev.kind != KIND:
                continue
            self.sessions.pop(rev.asset_id, None)
            self.turns = None
            if self.by_uid is None:
                continue
            if rev.tombstone or state.index.is_deleted(state.index.assets[rev.asset_id]):
                self.by_uid = None  # rebuilt on the next read
                continue
            summary = service.vault.summary_of(state, rev)
            self.by_uid[str(summary["transcript"]["session_uid"])] = rev.asset_id
            self.sources.update(str(k) for k in summary["transcript"].get("sources", {}))

    def handle(self, namespace: str, locator: str) -> str:
        table = self.handles.setdefault(namespace, OrderedDict())
        number = table.get(locator)
        if number is None:
            if len(table) >= MAX_HANDLES:
                table.clear()
            number = len(table) + 1
            table[locator] = number
        return f"[{number}]"

    def by_handle(self, namespace: str, number: int) -> str | None:
        for locator, n in self.handles.get(namespace, {}).items():
            if n == number:
                return locator
        return None


_RUNTIME: weakref.WeakKeyDictionary[Service, _Runtime] = weakref.WeakKeyDictionary()


def _setup(service: Service) -> None:
    runtime = _Runtime()
    _RUNTIME[service] = runtime
    service.on_lock.append(runtime.clear)
    service.on_commit.append(lambda state, revisions, _extra: runtime.committed(service, state, revisions))


EXTENSIONS.append(_setup)


def _runtime(service: Service) -> _Runtime:
    runtime = _RUNTIME.get(service)
    if runtime is None:
        _setup(service)
        runtime = _RUNTIME[service]
    return runtime


def _namespace(caller: Caller) -> str:
    return caller.namespace


def _head(state: Unlocked, asset_id: bytes) -> Revision:
    entry = state.index.assets[asset_id]
    heads = [r for r in state.index.head_revisions(entry) if not r.tombstone]
    return max(heads, key=lambda r: (r.created_ms, r.seq))


def _session(service: Service, state: Unlocked, asset_id: bytes) -> Session:
    runtime = _runtime(service)
    head = _head(state, asset_id)
    cached = runtime.sessions.get(asset_id)
    if cached is not None and cached[0] == head.rev_id:
        return cached[1]
    session = Session.from_stored(service.vault.summary_of(state, head), service.vault.body_of(state, head))
    runtime.sessions[asset_id] = (head.rev_id, session)
    return session


def _session_assets(service: Service, state: Unlocked) -> dict[str, bytes]:
    """session_uid → asset ID of every current transcript in the default vault."""
    runtime = _runtime(service)
    if runtime.by_uid is None:
        found: dict[str, bytes] = {}
        runtime.sources.clear()
        for entry in state.index.visible():
            if entry.kind != KIND or entry.vault_id != state.default_vault:
                continue
            summary = service.vault.summary_of(state, _head(state, entry.asset_id))
            found[str(summary["transcript"]["session_uid"])] = entry.asset_id
            runtime.sources.update(str(k) for k in summary["transcript"].get("sources", {}))
        runtime.by_uid = found
    return runtime.by_uid


def _all_sessions(service: Service, state: Unlocked) -> list[tuple[bytes, Session]]:
    return [(a, _session(service, state, a)) for a in _session_assets(service, state).values()]


def _device_id(state: Unlocked) -> str:
    return fingerprint(state.identity.device_pub)


# -- import -------------------------------------------------------------------------------
@op(rq.TranscriptKnown)
def transcript_known(service: Service, request: rq.TranscriptKnown, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    _session_assets(service, state)
    known = _runtime(service).sources
    return {"known": [r for r in request.revisions if r in known]}


@op(rq.TranscriptImport)
def transcript_import(service: Service, request: rq.TranscriptImport, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    store = service.require_store()
    vault = state.vault
    service.vault.writable_vault(state, b"", vault)
    device = _device_id(state)
    source_revision = revision_id(request.source_sha256, request.adapter_version)
    groups: dict[tuple[str, str], list[Event]] = {}
    for e in request.events:
        event = Event(
            session_key=e.session_key,
            thread_key=e.thread_key,
            native_key=e.native_key,
            role=e.role,
            type=e.type,
            text=e.text,
            name=e.name,
            ts=e.ts,
            turn_key=e.turn_key,
            parent_thread=e.parent_thread,
            agent_instance_id=e.agent_instance_id,
        )
        groups.setdefault((e.session_key, e.agent_instance_id), []).append(event)
    assets = _session_assets(service, state)
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    written: list[tuple[bytes, Session]] = []
    added_total = 0
    next_seq = store.reserve_content(1)[0]
    sessions_out = []
    for (session_key, instance), events in groups.items():
        fresh = Session.new(request.adapter, device, session_key, instance)
        asset_id = assets.get(fresh.uid)
        if asset_id is not None:
            # A copy: the cached object is shared with readers until the commit succeeds.
            head = _head(state, asset_id)
            session = Session.from_stored(service.vault.summary_of(state, head), service.vault.body_of(state, head))
            parents = [r.rev_id for r in state.index.head_revisions(state.index.assets[asset_id])]
        else:
            session, asset_id, parents = fresh, os.urandom(16), []
        added = session.merge(events)
        new_source = request.final and source_revision not in session.sources
        if request.final:
            session.sources[source_revision] = request.adapter_version
        added_total += added
        sessions_out.append({"session_uid": session.uid, "added": added, "turns": len(session.turns)})
        if not added and not new_source:
            continue
        summary, body = session.to_stored()
        need = chunk_count(len(body.encode("utf-8")))
        reserved = list(range(next_seq, next_seq + need))
        next_seq += need
        rev, rev_rows = service.vault.new_revision(
            state, asset_id=asset_id, kind=KIND, parents=parents, summary=summary, body=body, reserved=reserved, vault=vault
        )
        revisions.append(rev)
        rows.extend(rev_rows)
        written.append((asset_id, session))
    if revisions:
        audit = service.vault.audit_record(
            state, "transcript_import", caller, outcome="ok", assets=[r.asset_id for r in revisions]
        )
        service.vault.commit(state, revisions, rows, [audit])
        runtime = _runtime(service)
        for (asset_id, session), rev in zip(written, revisions, strict=True):
            runtime.sessions[asset_id] = (rev.rev_id, session)
    return {"revision_id": source_revision, "events_added": added_total, "written": len(revisions), "sessions": sessions_out}


# -- locating ------------------------------------------------------------------------------
def _find_turn(service: Service, state: Unlocked, caller: Caller, locator: str) -> tuple[bytes, Session, int]:
    text = locator.strip().lower()
    runtime = _runtime(service)
    handle = _HANDLE.match(text)
    if handle is not None:
        target = runtime.by_handle(_namespace(caller), int(handle.group(1)))
        if target is None:
            raise MemoriesError("not_found", "No earlier result had that handle; search or list again.")
        text = target.split(":", 1)[1]
        if target.startswith("session:"):
            asset_id, session = _find_session(service, state, caller, text)
            if not session.turns:
                raise MemoriesError("not_found", "That session has no turns.")
            return asset_id, session, 0
    if not _HEX.match(text):
        raise MemoriesError("invalid_input", "A turn is a handle like [2] or a hex turn_uid (at least 6 digits).")
    if len(text) == 64:
        if runtime.turns is None:
            runtime.turns = {t.uid: (a, i) for a, s in _all_sessions(service, state) for i, t in enumerate(s.turns)}
        exact = runtime.turns.get(text)
        matches = [(exact[0], _session(service, state, exact[0]), exact[1])] if exact is not None else []
    else:
        matches = [(a, s, i) for a, s in _all_sessions(service, state) for i, t in enumerate(s.turns) if t.uid.startswith(text)]
    if not matches:
        source = _memory_source(service, state, text)
        if source is not None:
            return _find_turn(service, state, caller, source)
        raise MemoriesError("not_found", "No imported transcript has that turn.")
    if len(matches) > 1:
        raise MemoriesError("ambiguous_id", "More than one turn starts with that; give more digits.")
    return matches[0]


def _memory_source(service: Service, state: Unlocked, ref: str) -> str | None:
    """The turn_uid a memory's ``source`` (meta) points at, when ``ref`` is such a memory's ID."""
    try:
        entry = state.index.resolve(ref)
    except MemoriesError:
        return None
    if entry.kind == KIND or state.index.is_deleted(entry):
        return None
    meta = service.vault.summary_of(state, _head(state, entry.asset_id)).get("meta") or {}
    source = str(meta.get("source", "")).strip().lower().removeprefix("turn:")
    return source if re.fullmatch(r"[0-9a-f]{64}", source) else None


def _find_session(service: Service, state: Unlocked, caller: Caller, locator: str) -> tuple[bytes, Session]:
    text = locator.strip().lower()
    handle = _HANDLE.match(text)
    if handle is not None:
        target = _runtime(service).by_handle(_namespace(caller), int(handle.group(1)))
        if target is None:
            raise MemoriesError("not_found", "No earlier result had that handle; search or list again.")
        kind, text = target.split(":", 1)
        if kind == "turn":
            asset_id, session, _ = _find_turn(service, state, caller, text)
            return asset_id, session
    if not _HEX.match(text):
        raise MemoriesError("invalid_input", "A session is a handle like [1] or a hex session_uid (at least 6 digits).")
    matches = [(a, s) for a, s in _all_sessions(service, state) if s.uid.startswith(text) or a.hex().startswith(text)]
    if not matches:
        matches = [(a, s) for a, s in _all_sessions(service, state) if any(t.uid.startswith(text) for t in s.turns)]
    if not matches:
        raise MemoriesError("not_found", "No imported transcript session matches that.")
    if len(matches) > 1:
        raise MemoriesError("ambiguous_id", "More than one session starts with that; give more digits.")
    return matches[0]


def _turn_out(service: Service, caller: Caller, session: Session, index: int) -> dict[str, Any]:
    view = session.turn_view(index)
    return {"handle": _runtime(service).handle(_namespace(caller), f"turn:{view['turn_uid']}"), **view}


def _session_out(service: Service, caller: Caller, session: Session) -> dict[str, Any]:
    return {"handle": _runtime(service).handle(_namespace(caller), f"session:{session.uid}"), **session.summary_view()}


def _intent(service: Service, state: Unlocked, name: str, caller: Caller, assets: list[bytes]) -> None:
    service.vault.commit_intent(state, name, caller, assets)


# -- reads ---------------------------------------------------------------------------------
@op(rq.TranscriptList)
def transcript_list(service: Service, request: rq.TranscriptList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    items = [
        _session_out(service, caller, s)
        for _a, s in _all_sessions(service, state)
        if request.agent is None or s.source_agent == request.agent
    ]
    items.sort(key=lambda s: (s["started"], s["session_uid"]), reverse=True)
    return {"sessions": items[request.offset : request.offset + request.limit], "total": len(items)}


@op(rq.TranscriptShow)
def transcript_show(service: Service, request: rq.TranscriptShow, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    asset_id, session = _find_session(service, state, caller, request.session)
    if request.turn is not None:
        index = session.turn_by_seq(request.turn)
        if index is None:
            raise MemoriesError("not_found", f"That session has turns 1 to {len(session.turns)}.")
        indexes = [index]
    else:
        indexes = list(range(len(session.turns)))[request.offset : request.offset + request.limit]
    _intent(service, state, "transcript_show", caller, [asset_id])
    return {"session": _session_out(service, caller, session), "turns": [_turn_out(service, caller, session, i) for i in indexes]}


@op(rq.RecallTurn, mcp_allowed=True)
def recall_turn(service: Service, request: rq.RecallTurn, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    if (request.turn is None) == (request.query is None):
        raise MemoriesError("invalid_request", "Give either `turn` (a handle or turn_uid) or `query`, not both.")
    others: list[dict[str, Any]] = []
    if request.turn is not None:
        asset_id, session, index = _find_turn(service, state, caller, request.turn)
    else:
        words = request.query.split() if request.query else []
        hits = [(score, a, s, i) for a, s in _all_sessions(service, state) for score, i in matching_turns(s, words)]
        if not hits:
            _intent(service, state, "recall_turn", caller, [])
            return {"hit": None, "turns": [], "other_hits": []}
        hits.sort(key=lambda h: (-h[0], h[2].uid, h[3]))
        _score, asset_id, session, index = hits[0]
        others = [
            {
                "handle": _runtime(service).handle(_namespace(caller), f"turn:{s.turns[i].uid}"),
                "turn_uid": s.turns[i].uid,
                "session_uid": s.uid,
                "seq": s.turns[i].seq,
            }
            for _sc, _a, s, i in hits[1:10]
        ]
    thread = session.turns[index].thread
    same = [i for i, t in enumerate(session.turns) if t.thread == thread]
    pos = same.index(index)
    window = same[max(0, pos - request.before) : pos + request.after + 1]
    _intent(service, state, "recall_turn", caller, [asset_id])
    return {
        "session": _session_out(service, caller, session),
        "hit": _runtime(service).handle(_namespace(caller), f"turn:{session.turns[index].uid}"),
        "turns": [_turn_out(service, caller, session, i) for i in window],
        "other_hits": others,
    }


@op(rq.RecallSession, mcp_allowed=True)
def recall_session(service: Service, request: rq.RecallSession, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    asset_id, session = _find_session(service, state, caller, request.session)
    indexes = list(range(len(session.turns)))[request.offset : request.offset + request.limit]
    _intent(service, state, "recall_session", caller, [asset_id])
    end = request.offset + len(indexes)
    return {
        "session": _session_out(service, caller, session),
        "turns": [_turn_out(service, caller, session, i) for i in indexes],
        "offset": request.offset,
        "next_offset": end if end < len(session.turns) else None,
        "total": len(session.turns),
    }
