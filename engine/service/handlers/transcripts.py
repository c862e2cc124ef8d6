"""Agent transcripts (AG-5, AG-8): import, list, show, and the MCP recall ops ``recall_turn``/``recall_session``.

Each turn of a session is one asset of kind ``transcript`` in the default vault (encrypted and
signed like every revision; engine/transcripts/turns.py says what a turn is). A session is the
turns that name the same ``session_uid``: importing a longer version of a file writes only the
turns that changed (the new ones, and the last one when it gained events), so appending N turns
costs O(N) however long the session already is. The daemon, not the importer, computes every
identity. Reads go through an in-memory table of turn headers (built from the sealed summaries
at first use, kept in step with every commit, wiped by a lock: ST-10). Results name turns and
sessions by short handles (``[1]``, ``[2]``) that the same caller (one MCP grant, or one CLI
shell) can pass to its next call. ``recall_turn`` with a query ranks turns with the search
index (BM25 with jieba for Chinese; hybrid with an embedding provider), like ``search``.

Stores written before turns were items (one item per session, format 1) are migrated at first
use: their events are regrouped into turns (by the rule of what starts a turn) and written as
turn items, and the session item is deleted (its history stays).
"""

from __future__ import annotations

import os
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from engine.crypto.canonical import decode_canonical
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.service import requests_transcripts as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import UNLISTED_KINDS
from engine.service.handlers.search import ASSET_GATES, HIT_DETAILS, HIT_ORDER, Found, retrieve_hits, snapshot
from engine.service.projections import BODY_REDACTORS, SUMMARY_REDACTORS
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.transcripts.model import Event, revision_id, session_uid
from engine.transcripts.redact import Redactor
from engine.transcripts.session import KIND, Session
from engine.transcripts.turns import (
    SessionState,
    TurnEvent,
    TurnHeader,
    TurnState,
    events_of,
    identify,
    is_conversation,
    merge,
    note_correction,
    parse_turn_summary,
    render,
    scrub,
    turn_summary,
)
from engine.vault.core import Unlocked
from engine.vault.credentials import CREDENTIAL_KIND
from engine.vault.revision import Revision, chunk_count

__all__ = ["KIND", "MAX_HANDLES"]

# `memories list` shows notes and cards; transcripts have `memories transcript list`.
UNLISTED_KINDS.add(KIND)
# Handles per caller; when full, numbering starts again at [1].
MAX_HANDLES = 1000
_HANDLE = re.compile(r"^\[?t?(\d{1,4})\]?$")
_HEX = re.compile(r"^[0-9a-f]{6,64}$")
RECALL_HITS = 10


class _Runtime:
    """Turn headers by session, the asset → turn map, and each caller's handles."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionState] | None = None
        self.headers: dict[bytes, TurnHeader] = {}  # asset ID -> header of its current head
        self.turn_session: dict[str, str] = {}  # turn_uid -> session_uid
        self.superseded: dict[str, str] = {}  # turn_uid -> the turn_uid of a later turn that corrects it (AG-9)
        # ((credentials, their revisions), every value they held): what imports redact (AG-10)
        self.vault_values: tuple[tuple[int, int], frozenset[str]] | None = None
        self.handles: dict[str, OrderedDict[str, int]] = {}

    def clear(self) -> None:
        self.forget()
        self.handles.clear()

    def forget(self) -> None:
        """Rebuilt from the store on the next read (after a failed write, or a change we cannot follow)."""
        self.sessions = None
        self.headers.clear()
        self.turn_session.clear()
        self.superseded.clear()
        self.vault_values = None

    def latest(self, turn_uid: str) -> str | None:
        """The turn that finally corrects ``turn_uid`` (following corrections of corrections), or None."""
        seen = {turn_uid}
        current = turn_uid
        while (nxt := self.superseded.get(current)) is not None and nxt not in seen and nxt in self.turn_session:
            seen.add(nxt)
            current = nxt
        return current if current != turn_uid else None

    def apply(self, header: TurnHeader) -> None:
        assert self.sessions is not None
        session = self.sessions.get(header.session_uid)
        if session is None:
            session = SessionState(header.session_uid, header.source_agent, header.session_key, header.agent_instance_id)
            self.sessions[header.session_uid] = session
        session.threads.setdefault(header.thread_key, (header.thread_uid, header.thread_parent))
        if header.cwd and not session.cwd:
            session.cwd = header.cwd
        old = session.turns.get(header.turn.turn_uid)
        if old is not None:
            session.event_uids.difference_update(old.event_uids)
        session.add_turn(header.turn)
        assert header.turn.asset_id is not None
        self.headers[header.turn.asset_id] = header
        self.turn_session[header.turn.turn_uid] = header.session_uid
        if header.turn.corrects:
            self.superseded[header.turn.corrects] = header.turn.turn_uid

    def drop(self, asset_id: bytes) -> None:
        header = self.headers.pop(asset_id, None)
        if header is None or self.sessions is None:
            return
        session = self.sessions.get(header.session_uid)
        if session is None:
            return
        turn = session.turns.pop(header.turn.turn_uid, None)
        if turn is not None:
            session.event_uids.difference_update(turn.event_uids)
            if session.last.get(turn.thread_key) is turn:
                rest = session.thread_turns(turn.thread_key)
                if rest:
                    session.last[turn.thread_key] = rest[-1]
                else:
                    del session.last[turn.thread_key]
        self.turn_session.pop(header.turn.turn_uid, None)
        if not session.turns:
            del self.sessions[header.session_uid]

    def committed(self, service: Service, state: Unlocked, revisions: list[Revision]) -> None:
        """Keep the table in step with every commit (ours or a sync's)."""
        if self.sessions is None:
            return
        for rev in revisions:
            if rev.kind != KIND:
                continue
            entry = state.index.assets.get(rev.asset_id)
            if entry is None or entry.vault_id != state.default_vault:
                continue
            header = None
            if not rev.tombstone and not state.index.is_deleted(entry):
                header = parse_turn_summary(service.vault.summary_of(state, _head(state, rev.asset_id)), rev.asset_id)
            old = self.headers.get(rev.asset_id)
            # A new revision of the same turn replaces it in place (no rescan of its session).
            if header is None or (
                old is not None and (old.session_uid, old.turn.turn_uid) != (header.session_uid, header.turn.turn_uid)
            ):
                self.drop(rev.asset_id)
            if header is not None:
                self.apply(header)

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


def _head(state: Unlocked, asset_id: bytes) -> Revision:
    entry = state.index.assets[asset_id]
    heads = [r for r in state.index.head_revisions(entry) if not r.tombstone]
    return max(heads or state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq))


def _device_id(state: Unlocked) -> str:
    return fingerprint(state.identity.device_pub)


# -- the table of turns ------------------------------------------------------------------------
def _sessions(service: Service, state: Unlocked) -> dict[str, SessionState]:
    """session_uid → session (turn headers, no text) of every current transcript in the default vault."""
    runtime = _runtime(service)
    if runtime.sessions is not None:
        return runtime.sessions
    runtime.sessions = {}
    legacy: list[tuple[bytes, dict[str, Any]]] = []
    for entry in state.index.visible():
        if entry.kind != KIND or entry.vault_id != state.default_vault:
            continue
        summary = service.vault.summary_of(state, _head(state, entry.asset_id))
        header = parse_turn_summary(summary, entry.asset_id)
        if header is not None:
            runtime.apply(header)
        elif isinstance(summary.get("transcript"), dict):
            legacy.append((entry.asset_id, summary))
    if legacy:
        _migrate(service, state, legacy)
    assert runtime.sessions is not None
    return runtime.sessions


def _load(service: Service, state: Unlocked) -> Callable[[TurnState], list[TurnEvent]]:
    runtime = _runtime(service)

    def load(turn: TurnState) -> list[TurnEvent]:
        if turn.asset_id is None:
            return []
        header = runtime.headers[turn.asset_id]
        return events_of(header, service.vault.body_of(state, _head(state, turn.asset_id)))

    return load


def _redactor(service: Service, state: Unlocked) -> Redactor:
    """What every new event's text passes through before it is stored or indexed (AG-10): the
    values every credential of the vault has ever held (logins, protected cards and secret maps
    keep theirs in credentials), and the well-known token shapes."""
    runtime = _runtime(service)
    entries = [e for e in state.index.assets.values() if e.kind == CREDENTIAL_KIND]
    stamp = (len(entries), sum(len(e.revisions) for e in entries))
    if runtime.vault_values is None or runtime.vault_values[0] != stamp:
        values: set[str] = set()
        for entry in entries:
            for rev_id in entry.revisions:
                rev = state.index.revisions[rev_id]
                if rev.tombstone:
                    continue
                try:
                    secret = decode_canonical(service.vault.body_of(state, rev).encode("utf-8"))
                except (ValueError, MemoriesError):
                    continue
                values.update(_strings(secret))
        runtime.vault_values = (stamp, frozenset(values))
    return Redactor(runtime.vault_values[1])


def _strings(value: Any) -> list[str]:
    """Every string inside a decoded credential body (its value, password, token, OTP seed, fields)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


class _Seqs:
    """Content row numbers for one commit: ``reserve_content`` does not move the store's cursor,
    so every revision of a commit takes its numbers from one running counter."""

    def __init__(self, service: Service) -> None:
        self.next = service.require_store().reserve_content(1)[0]

    def take(self, count: int) -> list[int]:
        out = list(range(self.next, self.next + count))
        self.next += count
        return out


def _write(
    service: Service, state: Unlocked, session: SessionState, turns: list[TurnState], seqs: _Seqs
) -> tuple[list[Revision], list[tuple[int, bytes]]]:
    """New revisions of the changed turns (not committed)."""
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    prepared: list[tuple[TurnState, dict[str, Any], str]] = []
    for turn in turns:
        if turn.events is None:
            turn.events = _load(service, state)(turn)
        note_correction(session, turn)
        body, spans = render(turn.events)
        summary = turn_summary(session, turn, spans)
        summary["aux"] = True  # the body holds AUX_MARK before tool output (engine/search/documents.py)
        prepared.append((turn, summary, body))
    for turn, summary, body in prepared:
        reserved = seqs.take(chunk_count(len(body.encode("utf-8"))))
        if turn.asset_id is None:
            turn.asset_id = os.urandom(16)
            parents: list[bytes] = []
        else:
            parents = [r.rev_id for r in state.index.head_revisions(state.index.assets[turn.asset_id])]
        rev, rev_rows = service.vault.new_revision(
            state,
            asset_id=turn.asset_id,
            kind=KIND,
            parents=parents,
            summary=summary,
            body=body,
            reserved=reserved,
            vault=state.vault,
        )
        revisions.append(rev)
        rows.extend(rev_rows)
        turn.changed = False
    return revisions, rows


def _migrate(service: Service, state: Unlocked, legacy: list[tuple[bytes, dict[str, Any]]]) -> None:
    """Format-1 session items → turn items (AG-8), one commit per session; the old item is deleted."""
    runtime = _runtime(service)
    assert runtime.sessions is not None
    try:
        service.vault.writable_vault(state, b"", state.vault)
    except MemoriesError:
        return  # a reader cannot migrate; the old items stay unread until an editor's device does
    redact = _redactor(service, state)
    for asset_id, summary in legacy:
        head = _head(state, asset_id)
        old = Session.from_stored(summary, service.vault.body_of(state, head))
        session = runtime.sessions.get(old.uid) or SessionState(old.uid, old.source_agent, old.session_key, old.agent_instance_id)
        runtime.sessions[old.uid] = session
        events: list[tuple[str, Event]] = []
        for turn in old.turns:
            thread = old.threads[turn.thread]
            for e in turn.events:
                ev = old.events[e]
                events.append(
                    (
                        ev.uid,
                        Event(
                            session_key=old.session_key,
                            thread_key=thread["key"],
                            native_key="",
                            role=ev.role,  # type: ignore[arg-type]
                            type=ev.type,  # type: ignore[arg-type]
                            text=ev.text,
                            name=ev.name,
                            ts=ev.ts,
                            parent_thread=thread.get("parent", ""),
                        ),
                    )
                )
        merge(session, events, _load(service, state), redact.apply)
        changed = session.take_changed()
        if changed:
            changed[-1].sources.update(old.sources)
            session.source_ids.update(old.sources)
        seqs = _Seqs(service)
        revisions, rows = _write(service, state, session, changed, seqs)
        tomb, tomb_rows = service.vault.new_revision(
            state,
            asset_id=asset_id,
            kind=KIND,
            parents=[r.rev_id for r in state.index.head_revisions(state.index.assets[asset_id])],
            summary=summary,
            body="",
            tombstone=True,
            reserved=seqs.take(chunk_count(0)),
        )
        audit = service.vault.audit_record(
            state, "transcript_migrate", _SYSTEM, outcome="ok", assets=[asset_id, *(r.asset_id for r in revisions)]
        )
        try:
            service.vault.commit(state, [*revisions, tomb], [*rows, *tomb_rows], [audit])
        except MemoriesError:
            runtime.forget()
            raise


_SYSTEM = Caller(namespace="engine:transcripts", surface="engine")
# Told after an import committed turns (the extraction cycle, handlers/cycle.py); must not block.
AFTER_IMPORT: list[Callable[[Service], None]] = []


# -- import -------------------------------------------------------------------------------
@op(rq.TranscriptKnown)
def transcript_known(service: Service, request: rq.TranscriptKnown, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    known: set[str] = set()
    for session in _sessions(service, state).values():
        known |= session.sources()
    return {"known": [r for r in request.revisions if r in known]}


@op(rq.TranscriptImport)
def transcript_import(service: Service, request: rq.TranscriptImport, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    service.vault.writable_vault(state, b"", state.vault)
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
            occurrence=-1 if e.occurrence is None else e.occurrence,
        )
        groups.setdefault((e.session_key, e.agent_instance_id), []).append(event)
    sessions = _sessions(service, state)
    runtime = _runtime(service)
    load = _load(service, state)
    redact = _redactor(service, state)
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    added_total = 0
    sessions_out = []
    seqs = _Seqs(service)
    try:
        for (session_key, instance), events in groups.items():
            uid = session_uid(request.adapter, device, session_key, instance or None)
            session = sessions.get(uid)
            if session is None:
                session = SessionState(uid, request.adapter, session_key, instance)
                sessions[uid] = session
            cwd = request.cwds.get(session_key, "")
            if cwd and not session.cwd:
                session.cwd = cwd
            added = merge(session, identify(uid, events), load, redact.apply)
            changed = session.take_changed()
            if request.final and source_revision not in session.sources():
                # Recorded on a turn this import wrote, else on the session's latest main-thread turn.
                target = changed[-1] if changed else session.last.get("main") or next(iter(session.last.values()), None)
                if target is not None:
                    target.sources[source_revision] = request.adapter_version
                    session.source_ids.add(source_revision)
                    if not target.changed:
                        target.changed = True
                        changed.append(target)
            added_total += added
            main = main_turns.seq if (main_turns := session.last.get("main")) is not None else 0
            sessions_out.append({"session_uid": uid, "added": added, "turns": main, "written": len(changed)})
            new_revs, new_rows = _write(service, state, session, changed, seqs)
            revisions.extend(new_revs)
            rows.extend(new_rows)
        if revisions:
            audit = service.vault.audit_record(
                state, "transcript_import", caller, outcome="ok", assets=[r.asset_id for r in revisions]
            )
            service.vault.commit(state, revisions, rows, [audit])
    except BaseException:
        runtime.forget()  # the in-memory table may hold turns that were never committed
        raise
    if revisions:
        for follow in AFTER_IMPORT:
            follow(service)
    return {
        "revision_id": source_revision,
        "events_added": added_total,
        "written": len(revisions),
        "sessions": sessions_out,
        # AG-10: secrets replaced by [redacted:KIND] in this batch, in all and per kind (never the values).
        "redacted": redact.count,
        "redacted_kinds": dict(sorted(redact.kinds.items())),
    }


# -- locating ------------------------------------------------------------------------------
def _turn_of(service: Service, state: Unlocked, turn_uid: str) -> tuple[SessionState, TurnState] | None:
    sessions = _sessions(service, state)
    suid = _runtime(service).turn_session.get(turn_uid)
    if suid is None or suid not in sessions:
        return None
    session = sessions[suid]
    return session, session.turns[turn_uid]


def in_project(cwd: str, project: str) -> bool:
    """Is the working directory ``cwd`` the folder ``project`` or inside it (AG-11)?"""
    if not cwd:
        return False  # unknown (imported before working directories were recorded): outside every project
    try:
        return PurePath(cwd).is_relative_to(PurePath(project))
    except ValueError:
        return False


def _in_scope(session: SessionState, caller: Caller) -> bool:
    return caller.transcript_scope is None or in_project(session.cwd, caller.transcript_scope)


def asset_in_scope(service: Service, state: Unlocked, caller: Caller, asset_id: bytes) -> bool:
    """Whether ``caller`` may see this asset as a transcript turn: True for anything that is not
    one; for a turn, whether its session is inside the caller's project (AG-11)."""
    if caller.transcript_scope is None:
        return True
    sessions = _sessions(service, state)
    header = _runtime(service).headers.get(asset_id)
    if header is None:
        entry = state.index.assets.get(asset_id)
        return entry is None or entry.kind != KIND  # a transcript item we cannot place: hidden
    session = sessions.get(header.session_uid)
    return session is not None and _in_scope(session, caller)


def _scope_gate(service: Service, state: Unlocked, caller: Caller) -> Callable[[bytes], bool] | None:
    """For search: drop the transcript hits outside the caller's project (AG-11)."""
    if caller.transcript_scope is None:
        return None
    return lambda asset_id: asset_in_scope(service, state, caller, asset_id)


ASSET_GATES.append(_scope_gate)


def _find_turn(service: Service, state: Unlocked, caller: Caller, locator: str) -> tuple[SessionState, TurnState]:
    text = locator.strip().lower()
    runtime = _runtime(service)
    sessions = _sessions(service, state)
    handle = _HANDLE.match(text)
    if handle is not None:
        target = runtime.by_handle(caller.namespace, int(handle.group(1)))
        if target is None:
            raise MemoriesError("not_found", "No earlier result had that handle; search or list again.")
        kind, text = target.split(":", 1)
        if kind == "session":
            session = _find_session(service, state, caller, text)
            ordered = session.ordered()
            if not ordered:
                raise MemoriesError("not_found", "That session has no turns.")
            return session, ordered[0]
    if not _HEX.match(text):
        raise MemoriesError("invalid_input", "A turn is a handle like [2] or a hex turn_uid (at least 6 digits).")
    if len(text) == 64:
        found = _turn_of(service, state, text)
        matches = [found] if found is not None else []
    else:
        matches = [(s, t) for s in sessions.values() for uid, t in s.turns.items() if uid.startswith(text)]
    # A turn outside the caller's project is answered as if it did not exist (AG-11).
    matches = [(s, t) for s, t in matches if _in_scope(s, caller)]
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
    if state.index.is_deleted(entry):
        return None
    if entry.kind == KIND:
        header = _runtime(service).headers.get(entry.asset_id)
        return header.turn.turn_uid if header is not None else None
    meta = service.vault.summary_of(state, _head(state, entry.asset_id)).get("meta") or {}
    source = str(meta.get("source", "")).strip().lower().removeprefix("turn:").split(",")[0].strip()
    return source if re.fullmatch(r"[0-9a-f]{64}", source) else None


def _find_session(service: Service, state: Unlocked, caller: Caller, locator: str) -> SessionState:
    text = locator.strip().lower()
    sessions = _sessions(service, state)
    handle = _HANDLE.match(text)
    if handle is not None:
        target = _runtime(service).by_handle(caller.namespace, int(handle.group(1)))
        if target is None:
            raise MemoriesError("not_found", "No earlier result had that handle; search or list again.")
        kind, text = target.split(":", 1)
        if kind == "turn":
            return _find_turn(service, state, caller, text)[0]
    if not _HEX.match(text):
        raise MemoriesError("invalid_input", "A session is a handle like [1] or a hex session_uid (at least 6 digits).")
    matches = [s for uid, s in sessions.items() if uid.startswith(text) and _in_scope(s, caller)]
    if not matches:
        matches = [s for s in sessions.values() if _in_scope(s, caller) and any(uid.startswith(text) for uid in s.turns)]
    if not matches:
        raise MemoriesError("not_found", "No imported transcript session matches that.")
    if len(matches) > 1:
        raise MemoriesError("ambiguous_id", "More than one session starts with that; give more digits.")
    return matches[0]


def _visible(service: Service, state: Unlocked, asset_id: bytes, events: list[TurnEvent]) -> list[str]:
    """The events' texts as clients may see them: values protected after the import are masked
    (CD-7). The redactors run once on the whole turn; only a turn they change is done per event."""

    def masked(text: str) -> str:
        for redactor in BODY_REDACTORS:
            text = redactor(service.vault, state, asset_id, text)
        return text

    texts = [e.text for e in events]
    whole = "\x00".join(texts)
    return texts if masked(whole) == whole else [masked(t) for t in texts]


def _later(service: Service, caller: Caller, turn_uid: str) -> str | None:
    """The later turn that corrects ``turn_uid`` (AG-9), if the caller may see it (AG-11)."""
    runtime = _runtime(service)
    later = runtime.latest(turn_uid)
    if later is None or caller.transcript_scope is None:
        return later
    sessions = runtime.sessions or {}
    session = sessions.get(runtime.turn_session.get(later, ""))
    return later if session is not None and _in_scope(session, caller) else None


def _superseded(service: Service, caller: Caller, turn: TurnState) -> dict[str, Any]:
    """``superseded_by``: the handle of the later turn that corrects this one (AG-9), when there is one."""
    later = _later(service, caller, turn.turn_uid)
    return {"superseded_by": _runtime(service).handle(caller.namespace, f"turn:{later}")} if later else {}


def _turn_out(service: Service, state: Unlocked, caller: Caller, session: SessionState, turn: TurnState) -> dict[str, Any]:
    runtime = _runtime(service)
    if turn.events is None:
        turn.events = _load(service, state)(turn)
    assert turn.asset_id is not None
    thread_uid_ = session.threads[turn.thread_key][0]
    return {
        "handle": runtime.handle(caller.namespace, f"turn:{turn.turn_uid}"),
        **_superseded(service, caller, turn),
        "turn_uid": turn.turn_uid,
        "seq": turn.seq,
        "thread": turn.thread_key,
        "thread_uid": thread_uid_,
        "session_uid": session.uid,
        "ts": turn.ts,
        "id": turn.asset_id.hex(),
        "events": [
            {
                "event_uid": e.uid,
                "role": e.role,
                "type": e.type,
                **({"name": e.name} if e.name else {}),
                "ts": e.ts,
                "text": text,
            }
            for e, text in zip(turn.events, _visible(service, state, turn.asset_id, turn.events), strict=True)
        ],
    }


def _session_out(service: Service, caller: Caller, session: SessionState) -> dict[str, Any]:
    return {
        "handle": _runtime(service).handle(caller.namespace, f"session:{session.uid}"),
        "session_uid": session.uid,
        "source_agent": session.source_agent,
        "session_key": session.session_key,
        "title": session.title(),
        "started": session.started(),
        "turns": len(session.turns),
        "main_turns": sum(1 for t in session.turns.values() if t.thread_key == "main"),
        "events": len(session.event_uids),
        "threads": [{"key": k, "thread_uid": u, "parent": p} for k, (u, p) in session.threads.items()],
        "revisions": sorted(session.sources()),
    }


def _intent(service: Service, state: Unlocked, name: str, caller: Caller, assets: list[bytes]) -> None:
    service.vault.commit_intent(state, name, caller, assets)


def turn_detail(service: Service, state: Unlocked, caller: Caller, asset_id: bytes) -> dict[str, Any] | None:
    """What a search hit on a turn adds (AG-8): session, turn as the user saw it, time, handle."""
    _sessions(service, state)
    header = _runtime(service).headers.get(asset_id)
    if header is None:
        return None
    found = _turn_of(service, state, header.turn.turn_uid)
    if found is None:
        return None
    session, turn = found
    if not _in_scope(session, caller):
        return None
    later = _later(service, caller, turn.turn_uid)
    return {
        "turn": {
            "handle": _runtime(service).handle(caller.namespace, f"turn:{turn.turn_uid}"),
            **({"superseded_by": _runtime(service).handle(caller.namespace, f"turn:{later}")} if later else {}),
            "session_uid": session.uid,
            "session_title": session.title(),
            "source_agent": session.source_agent,
            "seq": turn.seq,
            "thread": turn.thread_key,
            "ts": turn.ts,
            "turn_uid": turn.turn_uid,
        }
    }


HIT_DETAILS[KIND] = turn_detail


# -- for the extraction cycle and agent conclusions (handlers/cycle.py) -------------------------
def turn_labels(service: Service, state: Unlocked, assets: list[bytes]) -> list[str]:
    """The turn_uid of each turn item."""
    _sessions(service, state)
    headers = _runtime(service).headers
    return [headers[a].turn.turn_uid for a in assets]


def conversation_of(service: Service, state: Unlocked, assets: list[bytes]) -> list[tuple[str, int, str, str]]:
    """(session title, turn number, time, the user's words and the reply) of each turn item."""
    sessions = _sessions(service, state)
    headers = _runtime(service).headers
    out = []
    for asset_id in assets:
        header = headers[asset_id]
        events = events_of(header, service.vault.body_of(state, _head(state, asset_id)))
        text = "\n".join(f"{e.role}: {e.text}" for e in events if is_conversation(e.role, e.type, e.text))
        out.append((sessions[header.session_uid].title(), header.turn.seq, header.turn.ts, text))
    return out


def resolve_turns(service: Service, state: Unlocked, caller: Caller, refs: list[str]) -> list[str]:
    """The turn_uids that handles ([2]) or turn_uids (or unique prefixes) name, in order, once each."""
    if KIND in caller.hidden_kinds:
        raise MemoriesError("scope_denied", "This grant does not include transcripts.")
    return list(dict.fromkeys(_find_turn(service, state, caller, ref)[1].turn_uid for ref in refs))


def turn_handle(service: Service, caller: Caller, turn_uid: str) -> str:
    return _runtime(service).handle(caller.namespace, f"turn:{turn_uid}")


def _latest_first(service: Service, state: Unlocked, hits: list[Found]) -> list[Found]:
    """AG-9: a turn that a later turn corrects is preceded by that later turn (found or not)."""
    _sessions(service, state)
    runtime = _runtime(service)
    by_asset = {h.asset_id: h for h in hits}
    out: list[Found] = []
    placed: set[bytes] = set()
    for hit in hits:
        header = runtime.headers.get(hit.asset_id) if hit.kind == KIND else None
        later = runtime.latest(header.turn.turn_uid) if header is not None else None
        found = _turn_of(service, state, later) if later is not None else None
        if found is not None and found[1].asset_id is not None and found[1].asset_id not in placed:
            asset_id = found[1].asset_id
            newer = by_asset.get(asset_id) or snapshot(service, state, asset_id, hit.score)
            if newer is not None:
                out.append(newer)
                placed.add(asset_id)
        if hit.asset_id not in placed:
            out.append(hit)
            placed.add(hit.asset_id)
    return out


HIT_ORDER.append(_latest_first)


# -- reads ---------------------------------------------------------------------------------
@op(rq.TranscriptList)
def transcript_list(service: Service, request: rq.TranscriptList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    items = [
        _session_out(service, caller, s)
        for s in _sessions(service, state).values()
        if request.agent is None or s.source_agent == request.agent
    ]
    items.sort(key=lambda s: (s["started"], s["session_uid"]), reverse=True)
    return {"sessions": items[request.offset : request.offset + request.limit], "total": len(items)}


@op(rq.TranscriptShow)
def transcript_show(service: Service, request: rq.TranscriptShow, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    session = _find_session(service, state, caller, request.session)
    ordered = session.ordered()
    if request.turn is not None:
        main = session.thread_turns("main")
        if not 1 <= request.turn <= len(main):
            raise MemoriesError("not_found", f"That session has turns 1 to {len(main)}.")
        shown = [main[request.turn - 1]]
    else:
        shown = ordered[request.offset : request.offset + request.limit]
    _intent(service, state, "transcript_show", caller, [t.asset_id for t in shown if t.asset_id])
    return {
        "session": _session_out(service, caller, session),
        "turns": [_turn_out(service, state, caller, session, t) for t in shown],
    }


@op(rq.TranscriptAssign)
def transcript_assign(service: Service, request: rq.TranscriptAssign, caller: Caller) -> dict[str, Any]:
    """AG-11: give a session without a recorded working directory the project folder it belongs to,
    so that project-scoped grants see it. Each turn gets a new revision naming it; a directory the
    client recorded is never replaced."""
    if caller.surface == "mcp":
        raise MemoriesError("scope_denied", "Only the user assigns sessions to projects.")
    project = request.project
    if not PurePath(project).is_absolute():
        raise MemoriesError("invalid_input", "The project is an absolute path.")
    state = service.require_unlocked()
    service.vault.writable_vault(state, b"", state.vault)
    session = _find_session(service, state, caller, request.session)
    if session.cwd and session.cwd != project:
        raise MemoriesError("invalid_input", "That session's client recorded its working directory already; it is not replaced.")
    changed = [] if session.cwd == project else session.ordered()
    if changed:
        session.cwd = project
        try:
            revisions, rows = _write(service, state, session, changed, _Seqs(service))
            audit = service.vault.audit_record(
                state, "transcript_assign", caller, outcome="ok", assets=[r.asset_id for r in revisions]
            )
            service.vault.commit(state, revisions, rows, [audit])
        except BaseException:
            _runtime(service).forget()  # the in-memory table holds a directory that was never committed
            raise
    return {"session_uid": session.uid, "project": project, "turns_written": len(changed)}


@op(rq.TranscriptScrub)
def transcript_scrub(service: Service, request: rq.TranscriptScrub, caller: Caller) -> dict[str, Any]:
    """AG-10 for what is already stored: every turn's events pass the import's redactor again;
    a turn that held a secret gets a redacted revision, which search and recall then read. Earlier
    revisions stay sealed in the store (signed history, replicated by sync, kept by backups: there
    is no purge), and every surface shows them through the same redaction (``_mask_history``)."""
    if caller.surface == "mcp":
        raise MemoriesError("scope_denied", "Only the user scrubs transcripts.")
    state = service.require_unlocked()
    service.vault.writable_vault(state, b"", state.vault)
    redact = _redactor(service, state)
    load = _load(service, state)
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    seqs = _Seqs(service)
    turns = secrets = 0
    try:
        for session in list(_sessions(service, state).values()):
            changed = []
            for turn in session.ordered():
                if turn.events is None:
                    turn.events = load(turn)
                found = scrub(turn, redact.apply)
                if turn.changed:
                    changed.append(turn)
                    secrets += found
                elif not request.dry_run:
                    turn.events = None  # not kept in memory
            turns += len(changed)
            if changed and not request.dry_run:
                new_revs, new_rows = _write(service, state, session, changed, seqs)
                revisions.extend(new_revs)
                rows.extend(new_rows)
        if request.dry_run:
            _runtime(service).forget()  # the table holds redacted turns that were not written
        elif revisions:
            audit = service.vault.audit_record(
                state, "transcript_scrub", caller, outcome="ok", assets=[r.asset_id for r in revisions]
            )
            service.vault.commit(state, revisions, rows, [audit])
    except BaseException:
        _runtime(service).forget()
        raise
    return {"turns_redacted": turns, "redacted": secrets, "kinds": dict(sorted(redact.kinds.items())), "dry_run": request.dry_run}


def _mask_history(_vault: Any, state: Unlocked, asset_id: bytes, body: str) -> str:
    """AG-10: a transcript revision is shown through the token-shape redaction, whichever revision
    it is, so one stored before redaction (history, `get --rev`) shows no token either. Values
    the vault protects are masked by the cards' redactor (CD-7)."""
    entry = state.index.assets.get(asset_id)
    if entry is None or entry.kind != KIND:
        return body
    return Redactor()(body)


def _mask_history_title(_vault: Any, state: Unlocked, asset_id: bytes) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    entry = state.index.assets.get(asset_id)
    if entry is None or entry.kind != KIND:
        return None

    def mask(summary: dict[str, Any]) -> dict[str, Any]:
        title = summary.get("title")
        return {**summary, "title": Redactor()(title)} if isinstance(title, str) and title else summary

    return mask


BODY_REDACTORS.append(_mask_history)
SUMMARY_REDACTORS.append(_mask_history_title)


def _window(session: SessionState, turn: TurnState, before: int, after: int) -> list[TurnState]:
    same = session.thread_turns(turn.thread_key)
    pos = next(i for i, t in enumerate(same) if t.turn_uid == turn.turn_uid)
    return same[max(0, pos - before) : pos + after + 1]


@op(rq.RecallTurn, mcp_allowed=True, lock_free=True)
def recall_turn(service: Service, request: rq.RecallTurn, caller: Caller) -> dict[str, Any]:
    if (request.turn is None) == (request.query is None):
        raise MemoriesError("invalid_request", "Give either `turn` (a handle or turn_uid) or `query`, not both.")
    others: list[dict[str, Any]] = []
    ranked: list[bytes] = []
    generation = None
    if request.query is not None:
        found = retrieve_hits(service, request.query, frozenset({KIND}), RECALL_HITS, caller=caller)
        generation = found.generation
    with service.lock:
        state = service.require_unlocked()
        if generation is not None and service.session.generation != generation:
            raise MemoriesError("locked", "The vault was locked while this request ran; the result was dropped.")
        if request.query is not None:
            ranked = [h.asset_id for h in _latest_first(service, state, found.hits)][:RECALL_HITS]
        if request.turn is not None:
            session, turn = _find_turn(service, state, caller, request.turn)
        else:
            _sessions(service, state)
            headers = _runtime(service).headers
            hits = [
                found_turn
                for asset_id in ranked
                if asset_id in headers
                and (found_turn := _turn_of(service, state, headers[asset_id].turn.turn_uid)) is not None
                and _in_scope(found_turn[0], caller)
            ]
            if not hits:
                _intent(service, state, "recall_turn", caller, [])
                return {"hit": None, "turns": [], "other_hits": []}
            session, turn = hits[0]
            runtime = _runtime(service)
            others = [
                {
                    "handle": runtime.handle(caller.namespace, f"turn:{t.turn_uid}"),
                    **_superseded(service, caller, t),
                    "turn_uid": t.turn_uid,
                    "session_uid": s.uid,
                    "seq": t.seq,
                    "thread": t.thread_key,
                    "ts": t.ts,
                    "title": t.title,
                }
                for s, t in hits[1:]
            ]
        window = _window(session, turn, request.before, request.after)
        _intent(service, state, "recall_turn", caller, [t.asset_id for t in window if t.asset_id])
        return {
            "session": _session_out(service, caller, session),
            "hit": _runtime(service).handle(caller.namespace, f"turn:{turn.turn_uid}"),
            "turns": [_turn_out(service, state, caller, session, t) for t in window],
            "other_hits": others,
        }


@op(rq.RecallSession, mcp_allowed=True)
def recall_session(service: Service, request: rq.RecallSession, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    session = _find_session(service, state, caller, request.session)
    ordered = session.ordered()
    shown = ordered[request.offset : request.offset + request.limit]
    _intent(service, state, "recall_session", caller, [t.asset_id for t in shown if t.asset_id])
    end = request.offset + len(shown)
    return {
        "session": _session_out(service, caller, session),
        "turns": [_turn_out(service, state, caller, session, t) for t in shown],
        "offset": request.offset,
        "next_offset": end if end < len(ordered) else None,
        "total": len(ordered),
    }
