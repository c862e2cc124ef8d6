"""Asset ops on the shared revision DAG: put, edit (with conflicts), get, list, delete, history, diff."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

from engine.crypto.canonical import canonical_bytes
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.service import requests as rq
from engine.service.caller import Caller
from engine.service.handlers.vaults import vault_for
from engine.service.memory import gc_paused, release_free_memory
from engine.service.projections import (
    asset_summary,
    content_view,
    listed_summaries,
    newest_head,
    revision_ref,
    summary_masker,
    visible_body,
    visible_summary,
)
from engine.service.registry import op
from engine.service.service import Service
from engine.vault.core import Unlocked, VaultCore, VaultKeys
from engine.vault.diff import text_projection, unified_diff
from engine.vault.index import AssetEntry
from engine.vault.listing import SortedGroups
from engine.vault.revision import Revision, held, keep_list_fields
from engine.vault.title_order import TitleOrder

LIST_BATCH = 256  # list rows whose heads are read back together

# Kinds a generic put may create; later features (cards, files, credentials) add theirs.
# Ordinary cards (CD-1) share memory authorization and every generic op; "protected"
# cards are created only by `protected_card` and are never ordinary (CD-4).
ORDINARY_KINDS = {"memory", "knowledge", "brain", "persona"}
# Typed metadata checks per kind, run by generic put/edit (cards register theirs, CD-1).
META_VALIDATORS: dict[str, Callable[[str, dict[str, str]], dict[str, str]]] = {}
# Device-local bookkeeping kinds (CD-9 local_config) that a plain `list` does not show.
UNLISTED_KINDS: set[str] = set()
# Kinds whose body is secret: no generic op (get, diff, export, search) ever returns it (CD-3, HI-3).
SECRET_BODY_KINDS = {"credential"}
# Read-only revisions outside the DAG that history and diff show too: a restored store's
# original signed history (BK-2, engine/service/handlers/backup.py). History rows of an item,
# oldest first; and one revision by prefix with its diff projection lines.
HISTORY_EXTRAS: list[Callable[[Service, Unlocked, AssetEntry], list[dict[str, Any]]]] = []
# Link records a write's bodies imply ((revision, title, body) each), committed with the
# revisions, and a report for the caller (DT-8 wikilinks, engine/service/handlers/wikilinks.py).
BODY_LINKERS: list[
    Callable[[Service, Unlocked, list[tuple[Revision, str, str]]], tuple[list[dict[str, Any]], dict[str, Any]]]
] = []
ARCHIVED_REVISIONS: list[Callable[[Service, Unlocked, AssetEntry, str], tuple[Revision, list[str]] | None]] = []


def content_key(title: str, body: str, tags: list[str], meta: dict[str, str]) -> str:
    """Same title, body, tags and meta → same key: re-importing the same notes adds nothing."""
    material = {"title": title, "body": body, "tags": sorted(set(tags)), "meta": dict(meta)}
    return hashlib.sha256(canonical_bytes(material)).hexdigest()


def make_summary(title: str, tags: list[str], meta: dict[str, str], **extra: Any) -> dict[str, Any]:
    tags_clean = list(dict.fromkeys(t.strip() for t in tags if t.strip()))
    return {"title": title, "tags": tags_clean, "meta": dict(meta), **extra}


def new_revision(
    service: Service,
    state: Unlocked,
    *,
    asset_id: bytes,
    kind: str,
    parents: list[bytes],
    summary: dict[str, Any],
    body: str,
    tombstone: bool = False,
    reserved: list[int] | None = None,
    vault: VaultKeys | None = None,
    key: str | None = None,
    unsigned: bool = False,
) -> tuple[Revision, list[tuple[int, bytes]]]:
    """The vault core's revision, plus the content key of ordinary kinds (re-import dedupe).

    ``key``: that content key when the caller has it already (an import computes it to skip
    what is there), so that it is not computed twice."""
    if kind in ORDINARY_KINDS and not tombstone:
        if key is None:
            key = content_key(summary["title"], body, summary["tags"], summary["meta"])
        summary = {**summary, "content_key": key}
    return service.vault.new_revision(
        state,
        asset_id=asset_id,
        kind=kind,
        parents=parents,
        summary=summary,
        body=body,
        tombstone=tombstone,
        reserved=reserved,
        vault=vault,
        unsigned=unsigned,
    )


def body_links(
    service: Service, state: Unlocked, writes: list[tuple[Revision, str, str]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What every registered linker derives from these writes' bodies (records, report)."""
    records: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for linker in BODY_LINKERS:
        more, said = linker(service, state, writes)
        records.extend(more)
        report.update(said)
    return records, report


def write_one(
    service: Service,
    state: Unlocked,
    caller: Caller,
    op_name: str,
    rev: Revision,
    rows: list[tuple[int, bytes]],
    *,
    text: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Commit one revision with its audit entry; ``text`` (title, body) of a note also
    brings its wikilinks in the graph up to date in the same commit."""
    links, report = body_links(service, state, [(rev, *text)]) if text is not None else ([], {})
    audit = service.vault.audit_record(state, op_name, caller, outcome="ok", assets=[rev.asset_id])
    service.vault.commit(state, [rev], rows, [*links, audit])
    result = {
        "id": rev.asset_id.hex(),
        "short_id": state.index.short_id(rev.asset_id),
        **revision_ref(rev),
        "conflict": state.index.assets[rev.asset_id].in_conflict,
    }
    report.pop("unresolved_ids", None)  # one note: it is this one
    if report.get("linked") or report.get("removed") or report.get("unresolved"):
        result["wikilinks"] = report
    return result


def visible_entry(state: Unlocked, ref: str) -> AssetEntry:
    entry = state.index.resolve(ref)
    if state.index.is_deleted(entry):
        raise MemoriesError("not_found", "That item was deleted; it is still in `memories history`.")
    return entry


def _validated_meta(kind: str, meta: dict[str, str]) -> dict[str, str]:
    validator = META_VALIDATORS.get(kind)
    return validator(kind, meta) if validator is not None else meta


def secret_map_of(core: VaultCore, state: Unlocked, asset_id: bytes) -> dict[str, bytes]:
    """The union of the secret maps of every revision of an asset, on every branch (CD-7).

    Protection is monotonic: once any revision maps a label, every later revision keeps it,
    whichever base it was built from and whichever heads a resolution merges.
    """
    entry = state.index.assets.get(asset_id)
    labels: dict[str, bytes] = {}
    if entry is None:
        return labels
    for rev_id in entry.revisions:
        rev = state.index.revisions[rev_id]
        # Older revisions' summaries are not kept for this (every read of the item, and every
        # index build, asks): only what a caller keeps anyway stays decrypted (issue 32).
        for label, cred_id in (core.summary_of(state, rev, keep=False).get("secrets") or {}).items():
            labels.setdefault(str(label), bytes(cred_id))
    return labels


def carried_secrets(service: Service, state: Unlocked, entry: AssetEntry, caller: Caller) -> dict[str, Any]:
    """CD-7: a generic edit keeps every secret reference; MCP omits the map, so it cannot edit."""
    secrets = secret_map_of(service.vault, state, entry.asset_id)
    if not secrets:
        return {}
    if caller.surface == "mcp":
        raise MemoriesError("secret_map_mismatch", "This item has secret references; agents cannot update it.")
    return {"secrets": secrets}


@op(rq.Put, mcp_allowed=True)
def put(service: Service, request: rq.Put, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    if request.kind not in ORDINARY_KINDS:
        raise MemoriesError("invalid_input", f"A generic put cannot create kind {request.kind!r}.")
    meta = _validated_meta(request.kind, request.meta)
    rev, rows = new_revision(
        service,
        state,
        asset_id=os.urandom(16),
        kind=request.kind,
        parents=[],
        summary=make_summary(request.title, request.tags, meta),
        body=request.body,
        vault=vault_for(state, request.vault),
    )
    return write_one(service, state, caller, "put", rev, rows, text=(request.title, request.body))


@op(rq.Edit, mcp_allowed=True)
def edit(service: Service, request: rq.Edit, caller: Caller) -> dict[str, Any]:
    """HI-4: the new revision's parent is the named base; a stale base makes a conflict."""
    state = service.require_unlocked()
    entry = visible_entry(state, request.id)
    if entry.kind not in ORDINARY_KINDS:
        raise MemoriesError("invalid_input", "This kind of item is edited with its own command (card, credential).")
    heads = state.index.head_revisions(entry)
    if request.resolve:
        parents = [h.rev_id for h in heads]
        base = state.index.resolve_revision(entry, request.base) if request.base else None
        if base is not None and base.rev_id not in parents:
            raise MemoriesError("stale_base", "The base named for a resolution must be one of the current heads.")
        source = base or max((h for h in heads if not h.tombstone), key=lambda r: (r.created_ms, r.seq))
    else:
        if request.base is None:
            raise MemoriesError("invalid_request", "An edit must name the base revision it edits (`base`).")
        if entry.in_conflict:
            raise MemoriesError("conflict")
        source = state.index.resolve_revision(entry, request.base)
        if request.current_only and [h.rev_id for h in heads] != [source.rev_id]:
            raise MemoriesError(
                "stale_base",
                "This item was changed elsewhere since this version was loaded; nothing was saved. "
                "Load the new version, or save yours as a second version.",
            )
        parents = [source.rev_id]
    old = service.vault.summary_of(state, source)
    body = request.body if request.body is not None else visible_body(service, state, source)
    summary = make_summary(
        request.title if request.title is not None else old.get("title", ""),
        request.tags if request.tags is not None else list(old.get("tags", [])),
        _validated_meta(entry.kind, request.meta) if request.meta is not None else dict(old.get("meta", {})),
        **carried_secrets(service, state, entry, caller),
    )
    rev, rows = new_revision(
        service, state, asset_id=entry.asset_id, kind=entry.kind, parents=parents, summary=summary, body=body
    )
    return write_one(service, state, caller, "edit", rev, rows, text=(str(summary["title"]), body))


@op(rq.Get, mcp_allowed=True)
def get(service: Service, request: rq.Get, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    entry = visible_entry(state, request.id)
    if request.vault is not None and entry.vault_id != vault_for(state, request.vault).vault_id:
        raise MemoriesError("not_found", "That item is not in the vault given to --vault.")
    if request.rev is not None:
        heads = [state.index.resolve_revision(entry, request.rev)]
    else:
        heads = sorted(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq), reverse=True)
    views = [content_view(service, state, rev, with_body=entry.kind not in SECRET_BODY_KINDS) for rev in heads]
    service.vault.commit_intent(state, "get", caller, [entry.asset_id])
    summary = asset_summary(service, state, entry)
    # created_ms is the item's (its first revision's, as `list` says); a view's is its revision's.
    head_contents = views if len(views) > 1 else []
    return {**summary, **views[0], "created_ms": summary["created_ms"], "head_contents": head_contents}


@op(rq.ListAssets, mcp_allowed=True)
def list_assets(service: Service, request: rq.ListAssets, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault_id = vault_for(state, request.vault).vault_id
    # The index keeps the listed items ordered (engine/vault/listing.py): a page costs the
    # page, not the vault (issue 20); summaries are built for the page only.
    listing = state.index.listing
    if request.kind is not None:
        kinds = [request.kind]
    else:
        hidden = SECRET_BODY_KINDS | UNLISTED_KINDS
        kinds = [kind for kind in listing.by_time.kinds_in(vault_id) if kind not in hidden]
    order: SortedGroups | TitleOrder = listing.by_time
    by_title: TitleOrder | None = None
    tagged: dict[str, list[bytes]] = {}
    if request.tag is not None or request.sort == "title":
        first_build = not listing.derived_built
        by_title, tagged = listing.derived(lambda asset_ids: listed_summaries(service, state, asset_ids))
        if first_build:  # the build's sort keys and summaries are gone: their pages go back too
            release_free_memory()
        order = by_title if request.sort == "title" else order
    descending = request.sort == "updated"
    # Where each listed item is (vault, kind, and its change-time key): the title order holds the
    # same items, current after ``derived``.
    where = listing.by_time.keys
    wanted = set(kinds)
    if request.tag is None:
        ids = order.page(vault_id, kinds, request.offset, request.limit, descending=descending)
        total = order.count(vault_id, kinds)
        conflicts = sum(1 for a in listing.conflicted if (w := where[a])[0] == vault_id and w[1] in wanted)
    else:
        # Only the items carrying the tag are sorted: the cost follows the matches, not the vault.
        matched = [a for a in tagged.get(request.tag, ()) if (w := where[a])[0] == vault_id and w[1] in wanted]
        if by_title is not None and request.sort == "title":
            matched.sort(key=by_title.key)
        else:
            matched.sort(key=lambda a: where[a][2], reverse=descending)
        ids = matched[request.offset : request.offset + request.limit]
        total = len(matched)
        conflicts = sum(1 for asset_id in matched if asset_id in listing.conflicted)
    # A page is up to 10k summaries: without the pause the cyclic collector's full passes over
    # them free nothing (issue 32, `list --all` at 100k notes: 3.2 of 8.8 s of engine CPU, 25x the
    # 10k figure for 10x the notes). The summaries a page decrypts are not kept (issue 32): kept,
    # a `list --all` of 100k notes left them all in memory until the lock (+67 MiB resident, most
    # of it the fragments between them), to spare the next `list --all` ~20 µs of decryption a row.
    entries = [state.index.assets[asset_id] for asset_id in ids]
    page: list[dict[str, Any]] = []
    with gc_paused():
        for start in range(0, len(entries), LIST_BATCH):
            part = entries[start : start + LIST_BATCH]
            # The signed bytes of the heads whose summary is opened, read back in one query for
            # the batch, not one each (issue 32: revisions no longer hold them); none for a row
            # whose title and tags are kept from an earlier read (projections.asset_summary).
            opened: list[tuple[Revision, dict[str, Any]]] = []
            with held([head for entry in part if _opens_summary(state, entry, head := newest_head(state, entry))]):
                page.extend(asset_summary(service, state, entry, keep=False, opened=opened) for entry in part)
            keep_list_fields(opened)
    return {"items": page, "total": total, "conflicts": conflicts}


def _opens_summary(state: Unlocked, entry: AssetEntry, head: Revision) -> bool:
    """Whether the list row of ``entry`` opens its head's summary (see asset_summary)."""
    if head.summary_kept:
        return False
    return len(entry.heads) > 1 or head.tombstone or not head.list_fields_kept


@op(rq.Delete, mcp_allowed=True)
def delete(service: Service, request: rq.Delete, caller: Caller) -> dict[str, Any]:
    """A tombstone whose parents are all heads: gone from the view, kept in history."""
    state = service.require_unlocked()
    entry = visible_entry(state, request.id)
    heads = state.index.head_revisions(entry)
    source = max(heads, key=lambda r: (r.created_ms, r.seq))
    rev, rows = new_revision(
        service,
        state,
        asset_id=entry.asset_id,
        kind=entry.kind,
        parents=[h.rev_id for h in heads],
        summary=service.vault.summary_of(state, source),
        body="",
        tombstone=True,
    )
    result = write_one(service, state, caller, "delete", rev, rows)
    return {**result, "deleted": True}


@op(rq.History, mcp_allowed=True)
def history(service: Service, request: rq.History, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    entry = state.index.resolve(request.id)
    revisions = []
    noted: dict[bytes, int] = {}  # revision -> how many annotations its summary holds (AG-7)
    masked = summary_masker(service, state, entry.asset_id)  # protected values looked up once
    for rev in state.index.history(entry):
        summary = masked(service.vault.summary_of(state, rev))
        row = {
            **revision_ref(rev),
            "parents": [p.hex() for p in rev.parents],
            "title": summary.get("title", ""),
            "tombstone": rev.tombstone,
            "created_ms": rev.created_ms,
            "author": fingerprint(rev.author)[:16],
            "head": rev.rev_id in entry.heads,
        }
        notes = summary.get("annotations")
        notes = notes if isinstance(notes, list) else []
        noted[rev.rev_id] = len(notes)
        before = max((noted.get(p, 0) for p in rev.parents), default=0)
        if len(notes) > before:  # this revision added annotations: show them where they happened
            row["annotations"] = [dict(n) for n in notes[before:] if isinstance(n, dict)]
        revisions.append(row)
    for extra in HISTORY_EXTRAS:
        revisions = extra(service, state, entry) + revisions
    return {
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        "deleted": state.index.is_deleted(entry),
        "revisions": revisions,
    }


def _projection(service: Service, state: Unlocked, rev: Revision) -> list[str]:
    summary = visible_summary(service, state, rev)
    secret = rev.kind in SECRET_BODY_KINDS
    body = "" if rev.tombstone or secret else visible_body(service, state, rev)
    return text_projection({k: v for k, v in summary.items() if k in ("title", "tags", "meta")}, body, rev.tombstone)


@op(rq.Diff, mcp_allowed=True)
def diff(service: Service, request: rq.Diff, caller: Caller) -> dict[str, Any]:
    """No revisions: HEAD's parent vs HEAD. One: it vs HEAD. Two: A vs B (HI-3)."""
    state = service.require_unlocked()
    entry = state.index.resolve(request.id)
    heads = sorted(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq))
    head = heads[-1]
    archived: dict[bytes, list[str]] = {}

    def pick(prefix: str) -> Revision:
        try:
            return state.index.resolve_revision(entry, prefix)
        except MemoriesError as exc:
            for find in ARCHIVED_REVISIONS if exc.code == "not_found" else []:
                found = find(service, state, entry, prefix)
                if found is not None:
                    archived[found[0].rev_id] = found[1]
                    return found[0]
            raise

    if request.rev_a is None:
        new = head
        old = state.index.revisions[new.parents[0]] if new.parents else None
    else:
        old = pick(request.rev_a)
        new = pick(request.rev_b) if request.rev_b else head
    if old is None:
        old_lines: list[str] = []
    else:
        old_lines = archived[old.rev_id] if old.rev_id in archived else _projection(service, state, old)
    new_lines = archived[new.rev_id] if new.rev_id in archived else _projection(service, state, new)
    old_name = old.rev_id.hex()[:12] if old is not None else "/dev/null"
    text = unified_diff(old_lines, new_lines, old_name, new.rev_id.hex()[:12])
    service.vault.commit_intent(state, "diff", caller, [entry.asset_id])
    return {
        "id": entry.asset_id.hex(),
        "from": old.rev_id.hex() if old is not None else None,
        "to": new.rev_id.hex(),
        "diff": text,
    }
