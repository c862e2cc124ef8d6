"""Card ops: typed cards, links and graph, protected cards, OTP, secret maps, copy (SPEC §7).

Ordinary cards (knowledge, brain, persona) are assets on the shared DAG and work with
every generic op; this module adds the typed write/read, links with their in-memory
adjacency index, graph projections, and the secret-bearing ops that agents never reach
(``mcp_allowed=False``): protected_card, otp_code, protect_secret, credential_copy.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.cards.device_vaults import (
    LOCAL_CONFIG_KIND,
    device_only_vaults,
    ensure_local_vault,
    find_local_config,
    local_config_revision,
)
from engine.cards.graph import full_projection, neighbourhood, spread_activation
from engine.cards.links import LINK_RECORD, PPM, Link, LinkIndex, add_record, now_ms, remove_record
from engine.cards.login import LOGIN_CREDENTIAL_TYPE, login_field
from engine.cards.otp import MAX_COUNTER, hotp, totp
from engine.cards.protected import CREDENTIAL_TYPE, build_protected, otp_from_secret
from engine.cards.schema import CARD_KINDS, GRAPH_KINDS, LOGIN_KIND, ORDINARY_CARD_KINDS, PROTECTED_KIND, validate_meta
from engine.cards.secret_map import check_label, protect_fields, redact, redact_fields
from engine.crypto.canonical import decode_canonical
from engine.errors import MemoriesError
from engine.service import requests_cards as crq
from engine.service.caller import Caller
from engine.service.handlers import assets
from engine.service.handlers.assets import make_summary, new_revision, secret_map_of, visible_entry, write_one
from engine.service.handlers.reprompt import guard_reprompt
from engine.service.projections import BODY_REDACTORS, SUMMARY_REDACTORS, asset_summary, content_view, visible_body
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.vault.core import Unlocked, VaultCore
from engine.vault.credentials import (
    CREDENTIAL_KIND,
    Credential,
    prepare_credential,
    read_credential,
)
from engine.vault.index import AssetEntry
from engine.vault.revision import Revision

__all__ = ["link_index"]

# -- runtime: the adjacency index hangs off its Service (no module-global state per vault) --
_INDEXES: weakref.WeakKeyDictionary[Service, LinkIndex] = weakref.WeakKeyDictionary()


def _setup(service: Service) -> None:
    index = LinkIndex()
    _INDEXES[service] = index

    def on_unlock(state: Unlocked) -> None:
        index.clear()
        index.apply_all(record for _, record in state.extra_records.get(LINK_RECORD, []))

    def on_commit(state: Unlocked, revisions: list[Revision], extra: list[dict[str, Any]]) -> None:
        index.apply_all(extra)

    service.on_unlock.append(on_unlock)
    service.on_commit.append(on_commit)
    # CD-7: every new revision, whatever built it, keeps the asset's secrets protected.
    service.vault.revision_guards.append(_guard_new_revision)
    # ST-10: asset IDs and relation labels are plaintext; lock drops them.
    service.on_lock.append(index.clear)


EXTENSIONS.append(_setup)
assets.UNLISTED_KINDS.add(LOCAL_CONFIG_KIND)
for _kind in ORDINARY_CARD_KINDS:
    assets.META_VALIDATORS[_kind] = validate_meta


def link_index(service: Service) -> LinkIndex:
    return _INDEXES[service]


# -- helpers ---------------------------------------------------------------------------
def _newest(revs: list[Revision]) -> Revision:
    return max(revs, key=lambda r: (r.created_ms, r.seq))


def _current_head(state: Unlocked, entry: AssetEntry) -> Revision:
    return _newest([r for r in state.index.head_revisions(entry) if not r.tombstone] or state.index.head_revisions(entry))


def _node_visible(state: Unlocked, asset_id: bytes) -> bool:
    """CD-2: graph nodes are current (not deleted), unconflicted memories and cards."""
    entry = state.index.assets.get(asset_id)
    return entry is not None and entry.kind in GRAPH_KINDS and not entry.in_conflict and not state.index.is_deleted(entry)


def _node(service: Service, state: Unlocked, asset_id: bytes) -> dict[str, Any]:
    entry = state.index.assets[asset_id]
    summary = service.vault.summary_of(state, _current_head(state, entry))
    return {
        "id": asset_id.hex(),
        "short_id": state.index.short_id(asset_id),
        "kind": entry.kind,
        "title": summary.get("title", ""),
    }


def _edge(state: Unlocked, link: Link, shorts: dict[bytes, str]) -> dict[str, Any]:
    """``shorts`` memoizes short IDs within one projection (each node has many edges)."""
    for node in (link.src, link.dst):
        if node not in shorts:
            shorts[node] = state.index.short_id(node)
    return {
        "id": link.link_id.hex(),
        "src": link.src.hex(),
        "dst": link.dst.hex(),
        "src_short": shorts[link.src],
        "dst_short": shorts[link.dst],
        "rel": link.rel,
        "confidence": link.confidence,
        "valid_till_ms": link.valid_till_ms,
    }


def _opaque(state: Unlocked, credential_id: bytes) -> str:
    """CD-3: a reference the client can show and pass back, never a resolved secret."""
    return "cred:" + state.index.short_id(credential_id)


def _secret_refs(state: Unlocked, summary: dict[str, Any]) -> dict[str, str]:
    return {label: _opaque(state, bytes(cid)) for label, cid in sorted((summary.get("secrets") or {}).items())}


def _card_entry(state: Unlocked, ref: str, kinds: tuple[str, ...] = CARD_KINDS) -> AssetEntry:
    entry = visible_entry(state, ref)
    if entry.kind not in kinds:
        raise MemoriesError("invalid_input", f"That item is a {entry.kind}, not a card of type {', '.join(kinds)}.")
    return entry


def _graph_node(state: Unlocked, ref: str) -> AssetEntry:
    entry = visible_entry(state, ref)
    if entry.kind not in GRAPH_KINDS:
        raise MemoriesError("invalid_input", "Only memories and cards can be linked.")
    return entry


def _parse_valid_till(text: str | None) -> int | None:
    """An ISO date (valid through that UTC day) or an ISO date-time (naive = UTC)."""
    if text is None:
        return None
    try:
        if len(text) == 10:
            day = datetime.fromisoformat(text).replace(tzinfo=UTC)
            moment = day + timedelta(days=1)
        else:
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
        ms = int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise MemoriesError("invalid_input", "valid_till must be an ISO date (YYYY-MM-DD) or date-time.") from None
    if ms <= now_ms():
        raise MemoriesError("invalid_input", "valid_till is already in the past.")
    return ms


def _resolve_secret_map(state: Unlocked, supplied: dict[str, str]) -> dict[str, bytes]:
    resolved: dict[str, bytes] = {}
    for label, ref in supplied.items():
        check_label(label)
        try:
            entry = state.index.resolve(ref.removeprefix("cred:"))
        except MemoriesError:
            raise MemoriesError("secret_map_mismatch") from None
        resolved[label] = entry.asset_id
    return resolved


def _write_secrets(
    service: Service, state: Unlocked, entry: AssetEntry, request: crq.CardWrite, caller: Caller
) -> dict[str, Any]:
    """CD-7: keep the asset's whole map (every branch); MCP omits it, so an agent cannot update a card that has one."""
    existing = secret_map_of(service.vault, state, entry.asset_id)
    if request.secrets is None and caller.surface != "mcp":
        return {"secrets": existing} if existing else {}
    supplied = _resolve_secret_map(state, request.secrets or {}) if caller.surface != "mcp" else {}
    if supplied != existing:
        raise MemoriesError("secret_map_mismatch")
    return {"secrets": existing} if existing else {}


# -- typed card write / read -------------------------------------------------------------
@op(crq.CardWrite, mcp_allowed=True)
def card_write(service: Service, request: crq.CardWrite, caller: Caller) -> dict[str, Any]:
    """Create an ordinary card, or write a new revision of any card (CD-1, CD-4, CD-7)."""
    state = service.require_unlocked()
    if request.id is None:
        if request.type is None or request.title is None:
            raise MemoriesError("invalid_input", "A new card needs a type and a title.")
        if request.base is not None or request.resolve:
            raise MemoriesError("invalid_input", "base/resolve apply to an existing card.")
        if request.secrets:
            raise MemoriesError("secret_map_mismatch", "Secret references are created only by protect_secret.")
        meta = validate_meta(request.type, request.meta or {})
        rev, rows = new_revision(
            service,
            state,
            asset_id=os.urandom(16),
            kind=request.type,
            parents=[],
            summary=make_summary(request.title, request.tags or [], meta),
            body=request.body or "",
        )
        return {**write_one(service, state, caller, "card_write", rev, rows), "kind": request.type}
    entry = _card_entry(state, request.id)
    if entry.kind in (PROTECTED_KIND, LOGIN_KIND) and caller.surface == "mcp":
        # Agents may read a protected card's opaque reference but never reshape the card.
        raise MemoriesError("permission_denied", "Agents cannot change protected cards.")
    if request.type is not None and request.type != entry.kind:
        raise MemoriesError("invalid_input", "A card's type cannot change; create a new card instead.")
    heads = state.index.head_revisions(entry)
    if request.resolve:
        parents = [h.rev_id for h in heads]
        source = state.index.resolve_revision(entry, request.base) if request.base else _current_head(state, entry)
        if source.rev_id not in parents:
            raise MemoriesError("stale_base", "The base named for a resolution must be one of the current heads.")
    else:
        if entry.in_conflict:
            raise MemoriesError("conflict")
        # Without a base the caller edits what is current now; with one, a stale base
        # makes a conflict instead of silently overwriting someone's edit (HI-4).
        source = state.index.resolve_revision(entry, request.base) if request.base else heads[0]
        parents = [source.rev_id]
    old = service.vault.summary_of(state, source)
    extra = _write_secrets(service, state, entry, request, caller)
    if entry.kind in (PROTECTED_KIND, LOGIN_KIND):
        # CD-4: the credential reference is carried from the base; no write can replace it.
        extra["protected"] = old["protected"]
        if "content_key" in old and entry.kind == LOGIN_KIND:
            extra["content_key"] = old["content_key"]  # IM-1: an edited login is still "already imported"
    meta = validate_meta(entry.kind, request.meta) if request.meta is not None else dict(old.get("meta", {}))
    summary = make_summary(
        request.title if request.title is not None else old.get("title", ""),
        request.tags if request.tags is not None else list(old.get("tags", [])),
        meta,
        **extra,
    )
    body = request.body if request.body is not None else visible_body(service, state, source)
    rev, rows = new_revision(
        service, state, asset_id=entry.asset_id, kind=entry.kind, parents=parents, summary=summary, body=body
    )
    return {**write_one(service, state, caller, "card_write", rev, rows), "kind": entry.kind}


def _card_view(service: Service, state: Unlocked, rev: Revision) -> dict[str, Any]:
    view = content_view(service, state, rev)
    summary = service.vault.summary_of(state, rev)
    view["secrets"] = _secret_refs(state, summary)
    protected = summary.get("protected")
    if protected:
        view["protected"] = {
            "credential": _opaque(state, bytes(protected["credential"])),
            "features": list(protected.get("features", [])),
        }
        if "fields" in view["protected"]["features"]:
            # The names of a login's protected custom fields (IM-2): what `copy ID:NAME` takes.
            # Names only, from the credential's public part; never a value.
            try:
                cred = read_credential(service.vault, state, bytes(protected["credential"]).hex())
                names = cred.public.get("fields")
            except MemoriesError:
                names = None
            view["protected"]["fields"] = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    return view


@op(crq.CardRead, mcp_allowed=True)
def card_read(service: Service, request: crq.CardRead, caller: Caller) -> dict[str, Any]:
    """CD-3: opaque credential references, never resolved."""
    state = service.require_unlocked()
    entry = _card_entry(state, request.id, (*CARD_KINDS, "memory"))
    heads = sorted(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq), reverse=True)
    views = [_card_view(service, state, rev) for rev in heads if not rev.tombstone]
    at = now_ms()
    index = link_index(service)
    out_links = sum(1 for e in index.edges(entry.asset_id, "out") if not e.expired(at) and _node_visible(state, e.dst))
    in_links = sum(1 for e in index.edges(entry.asset_id, "in") if not e.expired(at) and _node_visible(state, e.src))
    service.vault.commit_intent(state, "card_read", caller, [entry.asset_id])
    return {
        **asset_summary(service, state, entry),
        **views[0],
        "head_contents": views if len(views) > 1 else [],
        "links": {"out": out_links, "in": in_links},
    }


# -- links -------------------------------------------------------------------------------
def _link_records(service: Service, state: Unlocked, item: crq.LinkItem) -> list[dict[str, Any]]:
    src = _graph_node(state, item.src)
    dst = _graph_node(state, item.dst)
    if src.asset_id == dst.asset_id:
        raise MemoriesError("invalid_input", "A link needs two different items.")
    if src.vault_id != dst.vault_id:
        raise MemoriesError("invalid_input", "Links stay inside one vault.")
    ppm = round(item.confidence * PPM)
    if not 1 <= ppm <= PPM:
        raise MemoriesError("invalid_input", "confidence must be in (0, 1].")
    records = [remove_record(old) for old in link_index(service).between(src.asset_id, dst.asset_id, item.rel)]
    records.append(
        add_record(
            vault_id=src.vault_id,
            src=src.asset_id,
            dst=dst.asset_id,
            rel=item.rel,
            confidence_ppm=ppm,
            valid_till_ms=_parse_valid_till(item.valid_till),
        )
    )
    return records


def _commit_links(service: Service, state: Unlocked, caller: Caller, op_name: str, records: list[dict[str, Any]]) -> None:
    touched = sorted({bytes(r[k]) for r in records if r["op"] == "add" for k in ("src", "dst")})
    audit = service.vault.audit_record(state, op_name, caller, outcome="ok", assets=touched)
    service.vault.commit(state, [], [], [*records, audit])


@op(crq.CardLink, mcp_allowed=True)
def card_link(service: Service, request: crq.CardLink, caller: Caller) -> dict[str, Any]:
    """CD-2: a directed edge; linking the same pair and relation again replaces the edge."""
    state = service.require_unlocked()
    records = _link_records(service, state, request)
    _commit_links(service, state, caller, "card_link", records)
    added = records[-1]
    return {"linked": True, "replaced": len(records) - 1, "id": bytes(added["id"]).hex(), **_edge_of(state, added)}


def _edge_of(state: Unlocked, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "src": bytes(record["src"]).hex(),
        "dst": bytes(record["dst"]).hex(),
        "rel": record["rel"],
        "confidence": record["conf_ppm"] / PPM,
        "valid_till_ms": record.get("valid_till_ms"),
    }


@op(crq.CardLinkMany, mcp_allowed=True)
def card_link_many(service: Service, request: crq.CardLinkMany, caller: Caller) -> dict[str, Any]:
    """Many links in one commit (graph imports); all are validated before anything is written."""
    state = service.require_unlocked()
    records: list[dict[str, Any]] = []
    for item in request.links:
        records.extend(_link_records(service, state, item))
    _commit_links(service, state, caller, "card_link", records)
    return {"linked": sum(1 for r in records if r["op"] == "add")}


@op(crq.CardUnlink, mcp_allowed=True)
def card_unlink(service: Service, request: crq.CardUnlink, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    src = state.index.resolve(request.src)
    dst = state.index.resolve(request.dst)
    found = link_index(service).between(src.asset_id, dst.asset_id, request.rel)
    if not found:
        raise MemoriesError("not_found", "No link matches that source, destination and relation.")
    records = [remove_record(link) for link in found]
    audit = service.vault.audit_record(state, "card_unlink", caller, outcome="ok", assets=[src.asset_id, dst.asset_id])
    service.vault.commit(state, [], [], [*records, audit])
    return {"unlinked": len(records)}


# -- graph projections ---------------------------------------------------------------------
@op(crq.Graph, mcp_allowed=True)
def graph(service: Service, request: crq.Graph, caller: Caller) -> dict[str, Any]:
    """The whole visible graph, or the neighbourhood of one node to ``depth`` hops (CD-2)."""
    state = service.require_unlocked()
    index = link_index(service)
    at = now_ms()
    shorts: dict[bytes, str] = {}

    def visible(node: bytes) -> bool:
        return _node_visible(state, node)

    if request.id is not None:
        start = _graph_node(state, request.id)
        hood = neighbourhood(index, start.asset_id, depth=request.depth, visible=visible, at_ms=at, max_nodes=request.limit)
        nodes = [{**_node(service, state, n), "distance": d} for n, d in hood.distance.items()]
        return {
            "root": start.asset_id.hex(),
            "nodes": nodes,
            "edges": [_edge(state, e, shorts) for e in hood.edges.values()],
            "truncated": hood.truncated,
        }
    node_ids = [e.asset_id for e in state.index.visible() if _node_visible(state, e.asset_id)]
    truncated = len(node_ids) > request.limit
    node_ids = node_ids[: request.limit]
    kept = set(node_ids)  # visibility was decided once per node above; edges only test membership
    edges = full_projection(index, node_ids, visible=kept.__contains__, at_ms=at)
    return {
        "root": None,
        "nodes": [_node(service, state, n) for n in node_ids],
        "edges": [_edge(state, e, shorts) for e in edges],
        "truncated": truncated,
    }


@op(crq.Connections, mcp_allowed=True)
def connections(service: Service, request: crq.Connections, caller: Caller) -> dict[str, Any]:
    """Neighbours of one node up to ``depth`` hops, nearest first, with the live edges between them."""
    state = service.require_unlocked()
    start = _graph_node(state, request.id)
    hood = neighbourhood(
        link_index(service),
        start.asset_id,
        depth=request.depth,
        visible=lambda n: _node_visible(state, n),
        at_ms=now_ms(),
        direction=request.direction,
        rel=request.rel,
        max_nodes=request.limit + 1,
    )
    ordered = sorted(((d, n) for n, d in hood.distance.items() if n != start.asset_id), key=lambda x: (x[0], x[1]))
    return {
        "id": start.asset_id.hex(),
        "neighbours": [{**_node(service, state, n), "distance": d} for d, n in ordered],
        "edges": [_edge(state, e, {}) for e in hood.edges.values()],
        "truncated": hood.truncated,
    }


@op(crq.RecallConnected, mcp_allowed=True)
def recall_connected(service: Service, request: crq.RecallConnected, caller: Caller) -> dict[str, Any]:
    """Spreading activation from seed nodes over live links, bounded hops (AG-3)."""
    state = service.require_unlocked()
    seeds = [_graph_node(state, ref).asset_id for ref in request.ids]
    ranked = spread_activation(
        link_index(service),
        seeds,
        hops=request.hops,
        decay=request.decay,
        visible=lambda n: _node_visible(state, n),
        at_ms=now_ms(),
        direction=request.direction,
    )[: request.limit]
    return {
        "seeds": [s.hex() for s in seeds],
        "results": [{**_node(service, state, a.node), "activation": round(a.activation, 6), "hops": a.hops} for a in ranked],
    }


# -- protected cards and OTP ----------------------------------------------------------------
@op(crq.ProtectedCard)
def protected_card(service: Service, request: crq.ProtectedCard, caller: Caller) -> dict[str, Any]:
    """CD-4: validate everything, then commit the credential and the card together."""
    state = service.require_unlocked()
    parts = build_protected(account=request.account, env=request.env, token=request.token, totp=request.totp, hotp=request.hotp)
    meta = dict(parts.meta)
    if request.url is not None:
        meta["url"] = request.url
    meta = validate_meta(PROTECTED_KIND, meta)
    card_id = os.urandom(16)
    store = service.require_store()
    # Both revisions go into one commit, so their content rows are numbered one after the other.
    cred_seq = store.reserve_content(1)[0]
    cred_rev, cred_rows = prepare_credential(
        service.vault,
        state,
        name=f"card {card_id.hex()[:12]}: {request.title[:150]}",
        ctype=CREDENTIAL_TYPE,
        public={**parts.public, "card": card_id.hex()},
        secret=parts.secret,
        reserved=[cred_seq],
    )
    from engine.vault.revision import chunk_count

    card_seqs = list(range(cred_seq + 1, cred_seq + 1 + chunk_count(len(request.body.encode("utf-8")))))
    summary = make_summary(
        request.title,
        request.tags,
        meta,
        protected={"credential": cred_rev.asset_id, "features": parts.features},
    )
    card_rev, card_rows = new_revision(
        service,
        state,
        asset_id=card_id,
        kind=PROTECTED_KIND,
        parents=[],
        summary=summary,
        body=request.body,
        reserved=card_seqs,
    )
    audit = service.vault.audit_record(state, "protected_card", caller, outcome="ok", assets=[card_id, cred_rev.asset_id])
    service.vault.commit(state, [cred_rev, card_rev], cred_rows + card_rows, [audit])
    return {
        "id": card_id.hex(),
        "short_id": state.index.short_id(card_id),
        "revision": card_rev.rev_id.hex(),
        "credential": _opaque(state, cred_rev.asset_id),
        "features": parts.features,
    }


def _credential_of(service: Service, state: Unlocked, ref: str) -> tuple[AssetEntry | None, Credential]:
    """A protected card's credential, or a credential named/identified directly."""
    entry: AssetEntry | None
    try:
        entry = state.index.resolve(ref.removeprefix("cred:"))
    except MemoriesError:
        entry = None
    if entry is not None and entry.kind in (PROTECTED_KIND, LOGIN_KIND) and not state.index.is_deleted(entry):
        summary = service.vault.summary_of(state, _current_head(state, entry))
        return entry, read_credential(service.vault, state, bytes(summary["protected"]["credential"]).hex())
    return None, read_credential(service.vault, state, ref.removeprefix("cred:"))


def _hotp_counter(summary: dict[str, Any]) -> int:
    public = (summary.get("credential") or {}).get("public", {})
    return int(public.get("otp", {}).get("counter", 0))


def _deliver_otp(
    service: Service, state: Unlocked, caller: Caller, op_name: str, cred: Credential, at: int | None = None
) -> dict[str, Any]:
    """Commit the intent (and, for HOTP, the advanced counter) before computing the code (CD-5)."""
    params = otp_from_secret(cred.public, cred.secret)
    if params is None:
        raise MemoriesError("nothing_to_copy", "That card or credential has no OTP secret.")
    if params.kind == "totp":
        service.vault.commit_intent(state, op_name, caller, [cred.asset_id])
        now = int(time.time()) if at is None else at
        code = totp(params.key, now, period=params.period, digits=params.digits, algorithm=params.algorithm)
        return {"code": code, "type": "totp", "valid_for": params.period - now % params.period}
    if at is not None:
        raise MemoriesError("invalid_input", "`at` applies to TOTP codes only; HOTP codes follow the counter.")
    entry = state.index.assets[cred.asset_id]
    heads = [state.index.revisions[h] for h in entry.heads if not state.index.revisions[h].tombstone]
    # Concurrent heads may carry different counters: continue after the highest, so
    # no value is ever used twice; the new revision also resolves that conflict.
    counter = max(_hotp_counter(service.vault.summary_of(state, h)) for h in heads)
    if counter > MAX_COUNTER:  # checked before the advance commits: nothing is burnt
        raise MemoriesError("invalid_input", "This HOTP counter is used up; import the secret again with a new counter.")
    public = dict(cred.public)
    public["otp"] = {**public["otp"], "counter": counter + 1}
    rev, rows = prepare_credential(
        service.vault,
        state,
        name=cred.name,
        ctype=cred.ctype,
        public=public,
        secret=cred.secret,
        asset_id=cred.asset_id,
        parents=[h.rev_id for h in heads],
    )
    intent = service.vault.audit_record(state, op_name, caller, phase="intent", assets=[cred.asset_id])
    service.vault.commit(state, [rev], rows, [intent])
    code = hotp(params.key, counter, digits=params.digits, algorithm=params.algorithm)
    return {"code": code, "type": "hotp", "counter": counter}


@op(crq.OtpCode)
def otp_code(service: Service, request: crq.OtpCode, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    _, cred = _credential_of(service, state, request.id)
    guard_reprompt(service, state, caller, [cred.asset_id])
    return _deliver_otp(service, state, caller, "otp_code", cred, request.at)


# -- secret maps and copy ----------------------------------------------------------------
@op(crq.ProtectSecret)
def protect_secret(service: Service, request: crq.ProtectSecret, caller: Caller) -> dict[str, Any]:
    """CD-7: replace exact matches with {{secret:LABEL}} and create the credential, one commit."""
    state = service.require_unlocked()
    label = check_label(request.label)
    entry = visible_entry(state, request.id)
    if entry.kind not in ("memory", *ORDINARY_CARD_KINDS):
        raise MemoriesError("invalid_input", "Only memories and ordinary cards carry secret maps.")
    if entry.in_conflict:
        raise MemoriesError("conflict")
    head = state.index.head_revisions(entry)[0]
    old = service.vault.summary_of(state, head)
    secrets = secret_map_of(service.vault, state, entry.asset_id)
    if label in secrets:
        raise MemoriesError("invalid_input", "That label is already used in this item's secret map.")
    # Issue 27: every text field, not only the body (a value left in the title is found by
    # search and shown to agents). Checked on what clients see of the head.
    old, body, fields = protect_fields(old, visible_body(service, state, head), request.value, label)
    count = sum(fields.values())
    if count == 0:
        raise MemoriesError(
            "invalid_input",
            "The value does not occur in this item (title, tags, metadata, annotations or body); nothing was changed.",
        )
    store = service.require_store()
    cred_seq = store.reserve_content(1)[0]
    cred_rev, cred_rows = prepare_credential(
        service.vault,
        state,
        name=f"secret {label} of {entry.asset_id.hex()[:12]}",
        ctype="secret",
        public={"label": label, "asset": entry.asset_id.hex()},
        secret={"value": request.value},
        reserved=[cred_seq],
    )
    from engine.vault.revision import chunk_count

    secrets[label] = cred_rev.asset_id
    summary = {**old, "secrets": secrets}
    seqs = list(range(cred_seq + 1, cred_seq + 1 + chunk_count(len(body.encode("utf-8")))))
    rev, rows = new_revision(
        service,
        state,
        asset_id=entry.asset_id,
        kind=entry.kind,
        parents=[head.rev_id],
        summary=summary,
        body=body,
        reserved=seqs,
    )
    audit = service.vault.audit_record(state, "protect_secret", caller, outcome="ok", assets=[entry.asset_id, cred_rev.asset_id])
    service.vault.commit(state, [cred_rev, rev], cred_rows + rows, [audit])
    return {
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        "revision": rev.rev_id.hex(),
        "label": label,
        "replaced": count,
        "fields": fields,
        "credential": _opaque(state, cred_rev.asset_id),
    }


def _secret_maps(service: Service, state: Unlocked) -> list[tuple[AssetEntry, dict[str, bytes]]]:
    found = []
    for entry in state.index.visible():
        if entry.kind in GRAPH_KINDS and not entry.in_conflict:
            secrets = service.vault.summary_of(state, _current_head(state, entry)).get("secrets")
            if secrets:
                found.append((entry, {k: bytes(v) for k, v in secrets.items()}))
    return found


def _by_label(service: Service, state: Unlocked, ref: str) -> bytes | None:
    """``LABEL`` or ``ASSET:LABEL``; a label used by several assets must be qualified."""
    asset_ref, sep, label = ref.rpartition(":")
    if not sep:
        label = ref
    owner = state.index.resolve(asset_ref).asset_id if sep and asset_ref and asset_ref != "cred" else None
    if owner is None and sep:
        return None
    hits = [m[label] for e, m in _secret_maps(service, state) if label in m and (owner is None or e.asset_id == owner)]
    if len(hits) > 1:
        raise MemoriesError("ambiguous_id", "Several items use that label; write ID:LABEL.")
    return hits[0] if hits else None


def _secret_value(secret: dict[str, Any]) -> str | None:
    for key in ("value", "token", "password"):
        value = secret.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def login_field_ref(service: Service, state: Unlocked, ref: str) -> tuple[Credential, str] | None:
    """``ID:FIELD`` where ID is a login (or its credential) and FIELD one of its protected fields (IM-2).

    The ID never holds a colon, and a field name may (1Password's "Section: Field"), so the
    reference is split at the first colon. None when the reference is not of that shape;
    ``not_found`` naming the fields there are when the login has no such field.
    """
    target, sep, name = ref.removeprefix("cred:").partition(":")
    if not sep or not target or not name:
        return None
    try:
        _, cred = _credential_of(service, state, target)
    except MemoriesError:
        return None
    if cred.ctype != LOGIN_CREDENTIAL_TYPE:
        return None
    value = login_field(cred.secret, name)
    if value is None:
        names = cred.public.get("fields")
        listed = ", ".join(repr(n) for n in names) if isinstance(names, list) and names else "none"
        raise MemoriesError("not_found", f"That login has no protected field of that name (its fields: {listed}).")
    return cred, value


def _copy_value(cred: Credential) -> str | None:
    return _secret_value(cred.secret)


@op(crq.CredentialCopy, needs_elevation=True)
def credential_copy(service: Service, request: crq.CredentialCopy, caller: Caller) -> dict[str, Any]:
    """CD-8: only a local, elevated CLI caller; the audit intent is committed before delivery."""
    if caller.surface != "ipc" or not caller.namespace.startswith("cli:"):
        raise MemoriesError("permission_denied", "Only the local CLI copies secrets.")
    state = service.require_unlocked()
    # A login's protected field first: a login has no label map, and its field names may hold colons.
    field = login_field_ref(service, state, request.ref)
    if field is not None:
        guard_reprompt(service, state, caller, [field[0].asset_id])
        service.vault.commit_intent(state, "credential_copy", caller, [field[0].asset_id])
        return {"secret": field[1], "kind": "field"}
    cred_id = _by_label(service, state, request.ref)
    if cred_id is not None:
        cred = read_credential(service.vault, state, cred_id.hex())
    else:
        _, cred = _credential_of(service, state, request.ref)
    guard_reprompt(service, state, caller, [cred.asset_id])
    value = _copy_value(cred)
    if value is None:
        if otp_from_secret(cred.public, cred.secret) is not None:
            delivered = _deliver_otp(service, state, caller, "credential_copy", cred)
            return {"secret": delivered["code"], "kind": "otp"}
        raise MemoriesError("nothing_to_copy")
    service.vault.commit_intent(state, "credential_copy", caller, [cred.asset_id])
    return {"secret": value, "kind": cred.ctype}


# -- protected values stay protected (CD-7, HI-3) ----------------------------------------------
def _protected_values(core: VaultCore, state: Unlocked, labels: dict[str, bytes]) -> list[tuple[str, str]]:
    """(label, value) for every value each label's credential has ever held.

    Read from every revision of the credential, deleted or rotated ones included: masking
    must not depend on the credential still being current, or deleting it would unmask
    every older revision that held the value in clear.
    """
    pairs: list[tuple[str, str]] = []
    for label, cred_id in labels.items():
        entry = state.index.assets.get(cred_id)
        if entry is None or entry.kind != CREDENTIAL_KIND:
            continue
        for rev_id in entry.revisions:
            rev = state.index.revisions[rev_id]
            if rev.tombstone:
                continue
            try:
                secret = decode_canonical(core.body_of(state, rev).encode("utf-8"))
            except ValueError:
                continue
            value = _secret_value(secret) if isinstance(secret, dict) else None
            if value is not None:
                pairs.append((label, value))
    return pairs


def _redact_protected(core: VaultCore, state: Unlocked, asset_id: bytes, body: str) -> str:
    """Signed bodies are never rewritten: a value protected later is masked on every read."""
    entry = state.index.assets.get(asset_id)
    if not body or entry is None or entry.kind == CREDENTIAL_KIND:
        return body
    labels = secret_map_of(core, state, asset_id)
    return redact(body, _protected_values(core, state, labels)) if labels else body


def _guard_new_revision(
    core: VaultCore, state: Unlocked, asset_id: bytes, summary: dict[str, Any], body: str
) -> tuple[dict[str, Any], str]:
    """Every new revision keeps the union of the asset's secret maps and no protected value in clear.

    This is the one place that makes protection monotonic, whatever built the revision: an
    edit or card save from an old base, a conflict resolution, an import, the dashboard or
    MCP. A value typed in again is replaced by its placeholder, like `secret protect` does.
    """
    entry = state.index.assets.get(asset_id)
    if entry is None or entry.kind == CREDENTIAL_KIND:
        return summary, body
    labels = secret_map_of(core, state, asset_id)
    own = {str(k): bytes(v) for k, v in (summary.get("secrets") or {}).items()}
    if not labels and not own:
        return summary, body
    merged = {**own, **labels}  # an existing label is never redirected
    values = _protected_values(core, state, merged)
    return {**redact_fields(summary, values), "secrets": merged}, redact(body, values)


def _protected_summary_masker(
    core: VaultCore, state: Unlocked, asset_id: bytes
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """Signed summaries are never rewritten: a value protected later is masked in every title,
    tag, metadata value and annotation shown (issue 27).

    Protection is monotonic (every live revision after a protection carries the map), so an
    asset whose heads are all live and carry no map was never protected: only its heads are
    opened then. A deleted one (a tombstone head) is looked at in full.
    """
    entry = state.index.assets.get(asset_id)
    if entry is None or entry.kind == CREDENTIAL_KIND:
        return None
    heads = [state.index.revisions[h] for h in entry.heads]
    if not any(rev.tombstone or core.summary_of(state, rev).get("secrets") for rev in heads):
        return None
    values = _protected_values(core, state, secret_map_of(core, state, asset_id))
    if not values:
        return None
    return lambda summary: redact_fields(summary, values)


BODY_REDACTORS.append(_redact_protected)
SUMMARY_REDACTORS.append(_protected_summary_masker)


# -- device-only vaults (CD-9) ----------------------------------------------------------------
@op(crq.LocalConfig)
def local_config(service: Service, request: crq.LocalConfig, caller: Caller) -> dict[str, Any]:
    """Record the client's version and directories in this device's device-only vault."""
    state = service.require_unlocked()
    keys, creation = ensure_local_vault(state)
    if creation:
        # The vault record must be stored before any revision of that vault (load order).
        audit = service.vault.audit_record(state, "device_only_vault.create", caller, outcome="ok")
        service.vault.commit(state, [], [], [*creation, audit])
        state.vaults[keys.vault_id] = keys
    summary = {
        "title": "local_config",
        "tags": [],
        "meta": {},
        "client_version": request.client_version,
        "directories": dict(sorted(request.directories.items())),
    }
    rev, rows = local_config_revision(service.vault, state, keys, summary, "")
    audit = service.vault.audit_record(state, "local_config", caller, outcome="ok", assets=[rev.asset_id])
    service.vault.commit(state, [rev], rows, [audit])
    return {"recorded": True, "created_vault": bool(creation), "revision": rev.rev_id.hex()}


@op(crq.LocalConfigGet)
def local_config_get(service: Service, request: crq.LocalConfigGet, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    rev = find_local_config(state)
    summary = service.vault.summary_of(state, rev) if rev is not None else {}
    return {
        "device_only_vaults": len(device_only_vaults(state)),
        "client_version": summary.get("client_version"),
        "directories": dict(summary.get("directories", {})),
    }
