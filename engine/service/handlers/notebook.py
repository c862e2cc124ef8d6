"""Each connected agent's own notebook (AG-13): the agent's ops and the user's ops.

Agent ops (on the MCP allowlist, every scope): ``notebook_write``, ``notebook_read``,
``notebook_list``, ``notebook_search``, ``notebook_forget``, ``scratch_read``,
``scratch_write``. None of them takes a notebook, grant or agent argument: the notebook is
the one owned by the grant that ``mcp_call`` authenticated (``Caller.grant_id``), and its
key is unwrapped with the key derived from that call's token (``Caller.grant_key``).
A caller without both (the local CLI, the dashboard, a request that did not come through
``mcp_call``) is refused.

User ops (local only, never on the MCP allowlist): ``notebook_show`` lists notebooks or
reads one whole (an intent is committed first, as for every read that delivers content);
``notebook_delete`` (elevated) erases one.

Entries live in content rows sealed under the notebook's key; they are not revisions, so
they never reach the search index, sync, a backup or another agent's results.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec

from engine.agents import grants as g
from engine.agents import notebook as nb
from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.requests import Request
from engine.service.service import Service, Unlocked

__all__ = [
    "NOTEBOOK_OPS",
    "NotebookWrite",
    "NotebookRead",
    "NotebookList",
    "NotebookSearch",
    "NotebookForget",
    "ScratchRead",
    "ScratchWrite",
    "NotebookShow",
    "NotebookDelete",
]

NOTEBOOK_OPS = frozenset(
    {"notebook_write", "notebook_read", "notebook_list", "notebook_search", "notebook_forget", "scratch_read", "scratch_write"}
)
MAX_BODY_CHARS = 200_000
MAX_SCRATCH_CHARS = 100_000

EntryRef = Annotated[str, msgspec.Meta(min_length=4, max_length=32, pattern="^[0-9a-fA-F]+$")]
Title = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
Body = Annotated[str, msgspec.Meta(max_length=MAX_BODY_CHARS)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Query = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
Limit = Annotated[int, msgspec.Meta(ge=1, le=100)]
NotebookName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class NotebookWrite(Request, tag="notebook_write"):
    title: Title
    body: Body = ""
    tags: Annotated[list[Tag], msgspec.Meta(max_length=32)] = msgspec.field(default_factory=list)
    id: EntryRef | None = None


class NotebookRead(Request, tag="notebook_read"):
    id: EntryRef
    rev: Annotated[int, msgspec.Meta(ge=1)] | None = None
    history: bool = False


class NotebookList(Request, tag="notebook_list"):
    limit: Limit = 50
    offset: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0


class NotebookSearch(Request, tag="notebook_search"):
    query: Query
    limit: Limit = 10


class NotebookForget(Request, tag="notebook_forget"):
    id: EntryRef


class ScratchRead(Request, tag="scratch_read"):
    pass


class ScratchWrite(Request, tag="scratch_write"):
    text: Annotated[str, msgspec.Meta(max_length=MAX_SCRATCH_CHARS)]
    append: bool = False


class NotebookShow(Request, tag="notebook_show"):
    """The user's view: every notebook (no ``name``), or one whole by grant name or ID prefix."""

    name: NotebookName | None = None
    revisions: bool = False


class NotebookDelete(Request, tag="notebook_delete"):
    name: NotebookName


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the agent's own notebook ---------------------------------------------------------------
class _Open:
    """The calling agent's notebook and its key, for one op."""

    def __init__(self, book: nb.Book | None, key: bytes | None) -> None:
        self.book = book
        self.key = key


def _agent(caller: Caller) -> tuple[bytes, bytes]:
    if caller.surface != "mcp" or caller.grant_id is None or caller.grant_key is None:
        raise MemoriesError("permission_denied", "The notebook tools are for a connected agent; use `memories agent notebook`.")
    return caller.grant_id, caller.grant_key


def _own(state: Unlocked, caller: Caller) -> _Open:
    """The notebook the authenticated grant owns now (never one named by the request)."""
    grant_id, grant_key = _agent(caller)
    for book in nb.books(state.extra_records).values():
        if book.owner == grant_id and book.deleted_ms is None:
            # The key comes only from this grant's wrapped copy, opened with the key derived
            # from the token of this very call (not from the user's copy in ``book.key``).
            return _Open(book, nb.unwrap_key(grant_key, book.notebook_id, grant_id, book.wrapped))
    return _Open(None, None)


def _grant_name(state: Unlocked, grant_id: bytes) -> str:
    for grant in g.load_grants(state.extra_records):
        if grant.grant_id == grant_id:
            return grant.name
    return "(unknown)"


def _create(state: Unlocked, caller: Caller) -> tuple[nb.Book, bytes, list[dict[str, Any]]]:
    grant_id, grant_key = _agent(caller)
    notebook_id = nb.new_entry_id()
    key = nb.new_notebook_key()
    now = _now_ms()
    name = _grant_name(state, grant_id)
    records: list[dict[str, Any]] = [
        {"t": nb.NOTEBOOK_KIND, "notebook": notebook_id, "key": key, "name": name, "created_ms": now},
        {
            "t": nb.OWNER_KIND,
            "notebook": notebook_id,
            "grant": grant_id,
            "wrapped": nb.wrap_key(grant_key, notebook_id, grant_id, key),
            "at_ms": now,
        },
    ]
    book = nb.Book(notebook_id, key, name, now, owner=grant_id, owners=[grant_id])
    return book, key, records


def _resolve_entry(book: nb.Book | None, ref: str) -> bytes:
    if book is None:
        raise MemoriesError("not_found", "Your notebook has no entry with that ID.")
    prefix = ref.lower()
    found = [e for e in book.entries if e != nb.SCRATCH and e.hex().startswith(prefix)]
    if not found:
        raise MemoriesError("not_found", "Your notebook has no entry with that ID.")
    if len(found) > 1:
        raise MemoriesError("ambiguous_id")
    return found[0]


def _short(book: nb.Book, entry: bytes) -> str:
    """The shortest prefix (at least 8 hex digits) unique among this notebook's entries."""
    full = entry.hex()
    others = [e.hex() for e in book.entries if e != entry]
    for length in range(8, len(full) + 1):
        head = full[:length]
        if not any(o.startswith(head) for o in others):
            return head
    return full


def _read(service: Service, book: nb.Book, key: bytes, entry: bytes, revision: nb.Revision) -> dict[str, Any]:
    blob = service.require_store().read_content([revision.content_seq])[0]
    return nb.open_entry(key, book.notebook_id, entry, revision.rev, blob)


def _append(
    service: Service,
    state: Unlocked,
    caller: Caller,
    opened: _Open,
    entry: bytes,
    payload: dict[str, Any],
) -> tuple[nb.Book, int]:
    """Commit one new revision of ``entry`` (creating the notebook on the first write)."""
    records: list[dict[str, Any]] = []
    book, key = opened.book, opened.key
    if book is None or key is None:
        book, key, records = _create(state, caller)
    if book.revision_count() >= nb.MAX_REVISIONS:
        raise MemoriesError(
            "invalid_input", f"This notebook already holds {nb.MAX_REVISIONS} revisions; ask the user to export it."
        )
    if entry not in book.entries and entry != nb.SCRATCH:
        live = sum(1 for e in book.entries if e != nb.SCRATCH)
        if live >= nb.MAX_ENTRIES:
            raise MemoriesError("invalid_input", f"This notebook already holds {nb.MAX_ENTRIES} entries; update or forget one.")
    rev = len(book.entries.get(entry, [])) + 1
    blob = nb.seal_entry(key, book.notebook_id, entry, rev, payload)
    seq = service.require_store().reserve_content(1)[0]
    records.append(
        {
            "t": nb.ENTRY_KIND,
            "notebook": book.notebook_id,
            "entry": entry,
            "rev": rev,
            "at_ms": _now_ms(),
            "size": len(blob),
            "body_seqs": [seq],
        }
    )
    # Audit names the op and the notebook, never what is in it.
    records.append(service.vault.audit_record(state, "notebook_write", caller, outcome="ok", assets=[book.notebook_id]))
    service.vault.commit(state, [], [(seq, blob)], records)
    book.entries.setdefault(entry, []).append(nb.Revision(rev, _now_ms(), len(blob), seq))
    return book, rev


def _latest(service: Service, book: nb.Book, key: bytes, entry: bytes) -> tuple[nb.Revision, dict[str, Any]]:
    revision = book.entries[entry][-1]
    return revision, _read(service, book, key, entry, revision)


def _live_entries(service: Service, book: nb.Book, key: bytes) -> list[tuple[bytes, nb.Revision, dict[str, Any]]]:
    out = []
    for entry in book.entries:
        if entry == nb.SCRATCH:
            continue
        revision, payload = _latest(service, book, key, entry)
        if not payload.get("deleted"):
            out.append((entry, revision, payload))
    out.sort(key=lambda item: item[1].at_ms, reverse=True)
    return out


def _summary(book: nb.Book, entry: bytes, revision: nb.Revision, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": _short(book, entry),
        "title": payload.get("title", ""),
        "tags": payload.get("tags", []),
        "rev": revision.rev,
        "updated_ms": revision.at_ms,
    }


@op(NotebookWrite, mcp_allowed=True)
def notebook_write(service: Service, request: NotebookWrite, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    if request.id is None:
        entry = nb.new_entry_id()
    else:
        entry = _resolve_entry(opened.book, request.id)
        if opened.book is not None and opened.key is not None:
            _revision, current = _latest(service, opened.book, opened.key, entry)
            if current.get("deleted"):
                raise MemoriesError("not_found", "That entry was forgotten; write a new one.")
    payload = {"title": request.title, "body": request.body, "tags": list(request.tags)}
    book, rev = _append(service, state, caller, opened, entry, payload)
    return {"id": _short(book, entry), "rev": rev, "created": request.id is None}


@op(NotebookRead, mcp_allowed=True)
def notebook_read(service: Service, request: NotebookRead, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    entry = _resolve_entry(opened.book, request.id)
    assert opened.book is not None and opened.key is not None
    revisions = opened.book.entries[entry]
    if request.rev is not None:
        if request.rev > len(revisions):
            raise MemoriesError("not_found", "That entry has no such revision.")
        revision = revisions[request.rev - 1]
    else:
        revision = revisions[-1]
    payload = _read(service, opened.book, opened.key, entry, revision)
    if payload.get("deleted") and request.rev is None:
        raise MemoriesError("not_found", "That entry was forgotten; earlier revisions can still be read with `rev`.")
    result = {
        **_summary(opened.book, entry, revision, payload),
        "body": payload.get("body", ""),
        "deleted": bool(payload.get("deleted")),
    }
    if request.history:
        result["revisions"] = [{"rev": r.rev, "at_ms": r.at_ms, "size": r.size} for r in revisions]
    return result


@op(NotebookList, mcp_allowed=True)
def notebook_list(service: Service, request: NotebookList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    if opened.book is None or opened.key is None:
        return {"entries": [], "total": 0, "scratch": None}
    live = _live_entries(service, opened.book, opened.key)
    page = live[request.offset : request.offset + request.limit]
    scratch = opened.book.entries.get(nb.SCRATCH)
    return {
        "entries": [_summary(opened.book, e, r, p) for e, r, p in page],
        "total": len(live),
        "scratch": {"rev": scratch[-1].rev, "updated_ms": scratch[-1].at_ms} if scratch else None,
    }


def _snippet(text: str, query: str, width: int = 160) -> str:
    folded = text.casefold()
    words = [w.casefold() for w in query.split() if w.strip()]
    at = min((i for i in (folded.find(w) for w in words) if i >= 0), default=0)
    start = max(0, at - width // 3)
    piece = text[start : start + width].replace("\n", " ")
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


@op(NotebookSearch, mcp_allowed=True)
def notebook_search(service: Service, request: NotebookSearch, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    if opened.book is None or opened.key is None:
        return {"results": []}
    scored = []
    for entry, revision, payload in _live_entries(service, opened.book, opened.key):
        text = f"{payload.get('title', '')}\n{' '.join(payload.get('tags', []))}\n{payload.get('body', '')}"
        score = nb.matches(request.query, text)
        if score:
            item = _summary(opened.book, entry, revision, payload)
            item["snippet"] = _snippet(str(payload.get("body", "")) or str(payload.get("title", "")), request.query)
            scored.append((score, revision.at_ms, item))
    scratch = opened.book.entries.get(nb.SCRATCH)
    if scratch:
        text = str(_read(service, opened.book, opened.key, nb.SCRATCH, scratch[-1]).get("text", ""))
        score = nb.matches(request.query, text)
        if score:
            item = {"id": "scratch", "title": "(scratch pad)", "rev": scratch[-1].rev, "updated_ms": scratch[-1].at_ms}
            item["snippet"] = _snippet(text, request.query)
            scored.append((score, scratch[-1].at_ms, item))
    scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
    return {"results": [item for _s, _t, item in scored[: request.limit]]}


@op(NotebookForget, mcp_allowed=True)
def notebook_forget(service: Service, request: NotebookForget, caller: Caller) -> dict[str, Any]:
    """The entry leaves the agent's list and search; its revisions stay for the user's export."""
    state = service.require_unlocked()
    opened = _own(state, caller)
    entry = _resolve_entry(opened.book, request.id)
    assert opened.book is not None and opened.key is not None
    _revision, current = _latest(service, opened.book, opened.key, entry)
    if current.get("deleted"):
        raise MemoriesError("not_found", "That entry was already forgotten.")
    book, rev = _append(service, state, caller, opened, entry, {"deleted": True})
    return {"id": _short(book, entry), "rev": rev, "forgotten": True}


@op(ScratchRead, mcp_allowed=True)
def scratch_read(service: Service, request: ScratchRead, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    revisions = opened.book.entries.get(nb.SCRATCH) if opened.book is not None else None
    if not revisions or opened.book is None or opened.key is None:
        return {"text": "", "rev": 0, "updated_ms": None}
    payload = _read(service, opened.book, opened.key, nb.SCRATCH, revisions[-1])
    return {"text": str(payload.get("text", "")), "rev": revisions[-1].rev, "updated_ms": revisions[-1].at_ms}


@op(ScratchWrite, mcp_allowed=True)
def scratch_write(service: Service, request: ScratchWrite, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    opened = _own(state, caller)
    text = request.text
    if request.append and opened.book is not None and opened.key is not None and nb.SCRATCH in opened.book.entries:
        previous = str(_read(service, opened.book, opened.key, nb.SCRATCH, opened.book.entries[nb.SCRATCH][-1]).get("text", ""))
        text = previous + ("\n" if previous and not previous.endswith("\n") else "") + text
    if len(text) > MAX_SCRATCH_CHARS:
        raise MemoriesError("invalid_input", f"The scratch pad holds at most {MAX_SCRATCH_CHARS} characters; shorten it.")
    _book, rev = _append(service, state, caller, opened, nb.SCRATCH, {"text": text})
    return {"rev": rev, "chars": len(text)}


# -- the user's view --------------------------------------------------------------------------
def _user_only(caller: Caller) -> None:
    if caller.surface == "mcp":  # also kept off the MCP allowlist: belt and braces
        raise MemoriesError("permission_denied", "This operation is not available to agents.")


def _book_view(state: Unlocked, book: nb.Book, grants: dict[bytes, g.Grant]) -> dict[str, Any]:
    owner = grants.get(book.owner)
    return {
        "id": book.notebook_id.hex(),
        "agent": owner.name if owner else book.name,
        "agent_active": bool(owner and owner.active),
        "grants": [grants[x].name if x in grants else "(unknown)" for x in dict.fromkeys(book.owners)],
        "created_ms": book.created_ms,
        "entries": sum(1 for e in book.entries if e != nb.SCRATCH),
        "revisions": book.revision_count(),
        "deleted_ms": book.deleted_ms,
    }


def _find(state: Unlocked, name: str, *, include_deleted: bool = False) -> nb.Book:
    """A notebook by its agent's grant name (the active grant's first, then the newest) or ID prefix."""
    grants = {x.grant_id: x for x in g.load_grants(state.extra_records)}
    candidates = [b for b in nb.books(state.extra_records).values() if include_deleted or b.deleted_ms is None]
    by_name = [b for b in candidates if b.owner in grants and grants[b.owner].name == name]
    if by_name:
        by_name.sort(key=lambda b: (grants[b.owner].active, b.created_ms), reverse=True)
        return by_name[0]
    lowered = name.lower()
    if len(lowered) >= 6 and all(c in "0123456789abcdef" for c in lowered):
        by_id = [b for b in candidates if b.notebook_id.hex().startswith(lowered)]
        if len(by_id) == 1:
            return by_id[0]
        if len(by_id) > 1:
            raise MemoriesError("ambiguous_id")
    raise MemoriesError("not_found", "No notebook belongs to an agent of that name (see `memories agent notebook`).")


@op(NotebookShow)
def notebook_show(service: Service, request: NotebookShow, caller: Caller) -> dict[str, Any]:
    _user_only(caller)
    state = service.require_unlocked()
    grants = {x.grant_id: x for x in g.load_grants(state.extra_records)}
    if request.name is None:
        views = [_book_view(state, b, grants) for b in nb.books(state.extra_records).values() if b.deleted_ms is None]
        return {"notebooks": sorted(views, key=lambda v: v["created_ms"])}
    book = _find(state, request.name)
    service.vault.commit_intent(state, "notebook_show", caller, [book.notebook_id])
    entries = []
    for entry, revisions in book.entries.items():
        if entry == nb.SCRATCH:
            continue
        shown = revisions if request.revisions else revisions[-1:]
        items = []
        for revision in shown:
            payload = _read(service, book, book.key, entry, revision)
            items.append({"rev": revision.rev, "at_ms": revision.at_ms, **payload})
        latest = items[-1]
        entries.append(
            {
                "id": entry.hex(),
                "title": latest.get("title", ""),
                "tags": latest.get("tags", []),
                "body": latest.get("body", ""),
                "rev": latest["rev"],
                "updated_ms": latest["at_ms"],
                "forgotten": bool(latest.get("deleted")),
                **({"revisions": items} if request.revisions else {}),
            }
        )
    entries.sort(key=lambda e: e["updated_ms"], reverse=True)
    scratch = book.entries.get(nb.SCRATCH)
    scratch_view = None
    if scratch:
        shown = scratch if request.revisions else scratch[-1:]
        texts = [
            {"rev": r.rev, "at_ms": r.at_ms, "text": _read(service, book, book.key, nb.SCRATCH, r).get("text", "")} for r in shown
        ]
        scratch_view = {**texts[-1], **({"revisions": texts} if request.revisions else {})}
    return {"notebook": _book_view(state, book, grants), "entries": entries, "scratch": scratch_view}


@op(NotebookDelete, needs_elevation=True)
def notebook_delete(service: Service, request: NotebookDelete, caller: Caller) -> dict[str, Any]:
    """Erase a notebook: a tombstone record, then its content rows overwritten and removed.

    Deleting one already deleted erases again (an earlier erase cut short by a full disk)."""
    _user_only(caller)
    state = service.require_unlocked()
    book = _find(state, request.name, include_deleted=True)
    if book.deleted_ms is None:
        now = _now_ms()
        audit = service.vault.audit_record(state, "notebook_delete", caller, outcome="ok", assets=[book.notebook_id])
        service.vault.commit(state, [], [], [{"t": nb.DELETE_KIND, "notebook": book.notebook_id, "at_ms": now}, audit])
    service.require_store().erase_content(book.content_seqs())
    return {"deleted": True, "id": book.notebook_id.hex(), "revisions_erased": book.revision_count()}


def handover_records(state: Unlocked, name: str, grant_id: bytes, token: str) -> list[dict[str, Any]]:
    """AG-13: a new grant replacing a revoked one of the same name (``agent connect`` after a
    scope change, a lost token or a disconnect) takes over its notebook: the key is wrapped
    for the new grant's token, and the old grant (revoked) owns it no longer."""
    grants = {x.grant_id: x for x in g.load_grants(state.extra_records)}
    found = [
        b
        for b in nb.books(state.extra_records).values()
        if b.deleted_ms is None and b.owner in grants and grants[b.owner].name == name and not grants[b.owner].active
    ]
    if not found:
        return []
    book = max(found, key=lambda b: b.created_ms)
    wrapping = nb.grant_wrap_key(token, grant_id)
    wrapped = nb.wrap_key(wrapping, book.notebook_id, grant_id, book.key)
    return [{"t": nb.OWNER_KIND, "notebook": book.notebook_id, "grant": grant_id, "wrapped": wrapped, "at_ms": _now_ms()}]
