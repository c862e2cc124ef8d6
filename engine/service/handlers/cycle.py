"""The extraction cycle and agent conclusions (AG-9): distilled memories that point at their turns.

``memory_cycle`` (`memories memory cycle once`) reads the transcript turns stored since its
watermark, asks the configured model seat (``[rag.extraction]``: an OpenAI-compatible
endpoint, a local llama.cpp or Ollama server included, or Anthropic's API) — or replays
recorded replies (``--replies FILE``) — to distil decisions, facts, preferences and entities,
and writes each as an ordinary memory whose ``source`` is the turn it rests on (``turns``
lists all of them). A conclusion with the key of a current one updates it: the old memory
gets a new revision saying ``valid_till`` and ``superseded_by`` (it is never deleted), and
search ranks the new one first. The memories and the watermark's advance are one commit, so
the watermark moves only when the batch was written; a model error or a reply of the wrong
shape writes nothing.

``conclusion_write`` (MCP tool ``memory_conclude``) is the same write for a connected agent
that distilled a conclusion itself, citing turn handles from its own earlier results.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Final

from engine.errors import MemoriesError
from engine.jobs.background import JobContext
from engine.rag.config import load_rag_config
from engine.rag.providers import complete, run_sync
from engine.service import requests_transcripts as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import make_summary, new_revision
from engine.service.handlers.search import HIT_DETAILS, HIT_ORDER, Found, snapshot
from engine.service.handlers.transcripts import AFTER_IMPORT, KIND, conversation_of, resolve_turns, turn_handle, turn_labels
from engine.service.projections import revision_ref
from engine.service.registry import op
from engine.service.service import Service
from engine.transcripts.extract import SYSTEM, Conclusion, TurnText, build_prompt, parse_reply, slug
from engine.vault.core import Unlocked
from engine.vault.revision import Revision, chunk_count

__all__ = ["WATERMARK_KIND", "CONCLUSION_TAG"]

WATERMARK_KIND: Final = "memory_cycle"  # device-local record: {"t", "seq": the last turn revision read}
CONCLUSION_TAG: Final = "conclusion"
_SYSTEM = Caller(namespace="engine:memory-cycle", surface="engine")
log = logging.getLogger(__name__)


def _watermark(state: Unlocked) -> int:
    return max((int(r.get("seq", 0)) for _, r in state.extra_records.get(WATERMARK_KIND, [])), default=0)


def _new_turns(state: Unlocked, watermark: int, limit: int) -> list[tuple[int, bytes]]:
    """(store seq of the head revision, asset ID) of turns written after the watermark, oldest first."""
    found: list[tuple[int, bytes]] = []
    for entry in state.index.assets.values():
        if entry.kind != KIND or entry.vault_id != state.default_vault or state.index.is_deleted(entry):
            continue
        seq = max(state.index.revisions[r].seq or 0 for r in entry.heads)
        if seq > watermark:
            found.append((seq, entry.asset_id))
    found.sort()
    return found[:limit]


def _current_conclusions(service: Service, state: Unlocked) -> dict[str, tuple[bytes, Revision, dict[str, Any]]]:
    """key → (asset, head, summary) of every conclusion not superseded."""
    out: dict[str, tuple[bytes, Revision, dict[str, Any]]] = {}
    for entry in state.index.visible():
        if entry.kind != "memory" or entry.vault_id != state.default_vault:
            continue
        head = state.index.newest_head(entry)
        summary = service.vault.summary_of(state, head)
        meta = summary.get("meta") or {}
        key = meta.get("conclusion_key")
        if isinstance(key, str) and key and not meta.get("superseded_by"):
            out[key] = (entry.asset_id, head, summary)
    return out


def _write(
    service: Service, state: Unlocked, caller: Caller, conclusions: list[tuple[Conclusion, list[str]]], source: str
) -> tuple[list[Revision], list[tuple[int, bytes]], list[dict[str, Any]]]:
    """Revisions for new conclusions (``turn_uid``s resolved) and for the ones they supersede."""
    current = _current_conclusions(service, state)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    out: list[dict[str, Any]] = []
    seq = service.require_store().reserve_content(1)[0]

    def take(body: str) -> list[int]:
        nonlocal seq
        need = chunk_count(len(body.encode("utf-8")))
        seqs = list(range(seq, seq + need))
        seq += need
        return seqs

    for conclusion, turn_uids in conclusions:
        asset_id = os.urandom(16)
        meta = {
            "source": f"turn:{turn_uids[0]}",
            "turns": ",".join(turn_uids),
            "conclusion_key": conclusion.key,
            "conclusion_kind": conclusion.kind,
            "extracted_by": source,
        }
        old = current.get(conclusion.key)
        if old is not None:
            meta["supersedes"] = old[0].hex()
        summary = make_summary(conclusion.title, [CONCLUSION_TAG, conclusion.kind], meta)
        rev, rev_rows = new_revision(
            service,
            state,
            asset_id=asset_id,
            kind="memory",
            parents=[],
            summary=summary,
            body=conclusion.body,
            reserved=take(conclusion.body),
        )
        revisions.append(rev)
        rows.extend(rev_rows)
        entry_out: dict[str, Any] = {
            "id": asset_id.hex(),
            "key": conclusion.key,
            "kind": conclusion.kind,
            "title": conclusion.title,
        }
        if old is not None:
            old_id, old_head, old_summary = old
            body = service.vault.body_of(state, old_head)
            old_meta = {**(old_summary.get("meta") or {}), "valid_till": now, "superseded_by": asset_id.hex()}
            tags = [str(t) for t in old_summary.get("tags", [])]
            rev2, rows2 = new_revision(
                service,
                state,
                asset_id=old_id,
                kind="memory",
                parents=list(state.index.assets[old_id].heads),
                summary=make_summary(str(old_summary.get("title", "")), tags, old_meta),
                body=body,
                reserved=take(body),
            )
            revisions.append(rev2)
            rows.extend(rows2)
            entry_out["supersedes"] = old_id.hex()
            current.pop(conclusion.key)
        current[conclusion.key] = (asset_id, rev, summary)
        out.append(entry_out)
    return revisions, rows, out


def _seat_error() -> MemoriesError:
    return MemoriesError(
        "provider_not_configured",
        "The cycle needs a model seat: add [rag.extraction] (kind openai or anthropic, url, model, api_key_env) "
        "to config.toml, or pass --replies FILE with recorded replies.",
    )


@op(rq.MemoryCycle, lock_free=True)
def memory_cycle(service: Service, request: rq.MemoryCycle, caller: Caller) -> dict[str, Any]:
    config = load_rag_config(service.paths.config_file)
    replies = list(request.replies) if request.replies is not None else None
    if replies is None and config.extraction is None:
        raise _seat_error()
    batches = written = superseded = read = 0
    stopped = None
    while batches < request.batches:
        with service.lock:
            state = service.require_unlocked()
            generation = service.session.generation
            watermark = _watermark(state)
            batch = _new_turns(state, watermark, request.limit)
            if not batch:
                break
            labels = turn_labels(service, state, [a for _, a in batch])
            texts = [TurnText(f"t{i}", *info) for i, info in enumerate(conversation_of(service, state, [a for _, a in batch]), 1)]
            known = [(k, str(v[2].get("title", ""))) for k, v in sorted(_current_conclusions(service, state).items())]
        prompt = build_prompt(texts, known)
        if replies is not None:
            if not replies:
                stopped = "replies_exhausted"
                break
            reply = replies.pop(0)
        else:
            assert config.extraction is not None
            reply = run_sync(complete(config, config.extraction, SYSTEM, prompt))
        conclusions = parse_reply(reply, [t.label for t in texts])
        with service.lock:
            state = service.require_unlocked()
            if service.session.generation != generation or _watermark(state) != watermark:
                raise MemoriesError("conflict", "Another cycle ran meanwhile; nothing was written. Run it again.")
            by_label = {f"t{i}": uid for i, uid in enumerate(labels, 1)}
            resolved = [(c, [by_label[t] for t in c.turns]) for c in conclusions]
            revisions, rows, out = _write(service, state, caller, resolved, "cycle")
            mark = {"t": WATERMARK_KIND, "seq": batch[-1][0]}
            audit = service.vault.audit_record(
                state, "memory_cycle", caller, outcome="ok", assets=[r.asset_id for r in revisions]
            )
            service.vault.commit(state, revisions, rows, [mark, audit])
        batches += 1
        read += len(batch)
        written += len(out)
        superseded += sum(1 for o in out if "supersedes" in o)
    with service.lock:
        state = service.require_unlocked()
        pending = len(_new_turns(state, _watermark(state), 1_000_000))
    return {
        "batches": batches,
        "turns_read": read,
        "written": written,
        "superseded": superseded,
        "pending_turns": pending,
        **({"stopped": stopped} if stopped else {}),
    }


# -- after an import: the cycle as a background job (AG-9) --------------------------------------
# Every import that wrote turns (`transcript import`, `watch`, a client's capture hook) starts
# the cycle when a seat is configured, off the request path: the import answers at once. A
# failure is the job's (`memories status`: `memory-cycle` failed, with its code) and an audit
# entry (`memory_cycle`, outcome failed: the dashboard's activity); the watermark is the cycle's
# own, so the turns wait for the next run. An import while it runs makes it look again after.
AFTER_IMPORT_JOB: Final = "memory-cycle"


class _Follow:
    def __init__(self) -> None:
        self.running = False
        self.again = False


_FOLLOW: weakref.WeakKeyDictionary[Service, _Follow] = weakref.WeakKeyDictionary()
_FOLLOW_GUARD = threading.Lock()


def _cycle_after_import(service: Service) -> None:
    try:
        config = load_rag_config(service.paths.config_file)
    except MemoriesError:
        return  # a broken config.toml is reported by the commands that read it
    if config.extraction is None or not config.cycle_after_import:
        return
    with _FOLLOW_GUARD:
        follow = _FOLLOW.setdefault(service, _Follow())
        if follow.running:
            follow.again = True
            return
        follow.running, follow.again = True, False
    try:
        service.background.start(AFTER_IMPORT_JOB, lambda context: _follow_imports(service, follow, context))
    except BaseException:
        with _FOLLOW_GUARD:
            follow.running = False
        raise


def _follow_imports(service: Service, follow: _Follow, context: JobContext) -> None:
    try:
        while True:
            memory_cycle(service, rq.MemoryCycle(), _SYSTEM)
            with _FOLLOW_GUARD:
                if not follow.again or context.cancelled.is_set():
                    follow.running = False
                    return
                follow.again = False
    except BaseException as exc:
        with _FOLLOW_GUARD:
            follow.running = False
        if isinstance(exc, MemoriesError) and exc.code != "locked":
            _audit_failure(service, exc)
        raise


def _audit_failure(service: Service, exc: MemoriesError) -> None:
    try:
        with service.lock:
            state = service.require_unlocked()
            failed = service.vault.audit_record(state, "memory_cycle", _SYSTEM, outcome="failed", code=exc.code, assets=[])
            service.vault.commit(state, [], [], [failed])
    except MemoriesError as audit_error:  # the cycle's own failure stays in the job's state
        log.warning("memory cycle failure not audited error=%s", audit_error.code)


AFTER_IMPORT.append(_cycle_after_import)


@op(rq.ConclusionWrite, mcp_allowed=True)
def conclusion_write(service: Service, request: rq.ConclusionWrite, caller: Caller) -> dict[str, Any]:
    """A conclusion the caller distilled itself, citing turns by handle or turn_uid (AG-9)."""
    state = service.require_unlocked()
    turn_uids = resolve_turns(service, state, caller, request.turns)
    key = slug(request.key) if request.key and slug(request.key) else slug(request.title)
    conclusion = Conclusion(request.kind, key, request.title, request.body, tuple(request.turns))
    revisions, rows, out = _write(service, state, caller, [(conclusion, turn_uids)], f"agent:{caller.namespace}")
    audit = service.vault.audit_record(state, "conclusion_write", caller, outcome="ok", assets=[r.asset_id for r in revisions])
    service.vault.commit(state, revisions, rows, [audit])
    first = revisions[0]
    return {
        **out[0],
        "short_id": state.index.short_id(first.asset_id),
        **revision_ref(first),
        "turns": [{"turn_uid": uid, "handle": turn_handle(service, caller, uid)} for uid in turn_uids],
    }


# -- search: a superseded conclusion comes after the one that replaced it, and says so ----------
def _meta(service: Service, state: Unlocked, asset_id: bytes) -> dict[str, Any]:
    entry = state.index.assets.get(asset_id)
    if entry is None:
        return {}
    meta = service.vault.summary_of(state, state.index.newest_head(entry)).get("meta") or {}
    return dict(meta)


def _memory_detail(service: Service, state: Unlocked, caller: Caller, asset_id: bytes) -> dict[str, Any] | None:
    meta = _meta(service, state, asset_id)
    later = meta.get("superseded_by")
    if not later:
        return None
    return {"superseded_by": str(later), "valid_till": str(meta.get("valid_till", ""))}


def _successor(service: Service, state: Unlocked, asset_id: bytes) -> bytes | None:
    """The current conclusion that finally replaced ``asset_id`` (following replacements), or None."""
    seen = {asset_id}
    current = asset_id
    while True:
        later = _meta(service, state, current).get("superseded_by")
        try:
            nxt = bytes.fromhex(str(later)) if later else None
        except ValueError:
            nxt = None
        if nxt is None or nxt in seen or nxt not in state.index.assets or state.index.is_deleted(state.index.assets[nxt]):
            return current if current != asset_id else None
        seen.add(nxt)
        current = nxt


def _newest_first(service: Service, state: Unlocked, hits: list[Found]) -> list[Found]:
    """AG-9: a superseded conclusion is preceded by the conclusion that replaced it (found or not)."""
    by_id = {h.asset_id: h for h in hits}
    out: list[Found] = []
    placed: set[bytes] = set()
    for hit in hits:
        later = _successor(service, state, hit.asset_id) if hit.kind == "memory" else None
        if later is not None and later not in placed:
            newer = by_id.get(later) or snapshot(service, state, later, hit.score)
            if newer is not None:
                out.append(newer)
                placed.add(later)
        if hit.asset_id not in placed:
            out.append(hit)
            placed.add(hit.asset_id)
    return out


HIT_DETAILS["memory"] = _memory_detail
HIT_ORDER.append(_newest_first)
