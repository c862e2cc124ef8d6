"""Login ops (CD-10) and the moving-in batch (IM-1).

A login card and its credential (password, TOTP seed, hidden fields) are built into the
same candidate state and committed in ONE transaction, like ``protected_card`` (CD-4).
An import batch validates every entry before it builds anything and commits the whole
batch as one transaction: a bad entry names itself and nothing of the batch is saved.
Re-importing is idempotent: each card carries a content key over its non-secret fields
and a digest of its secrets (``engine/cards/login.py``), and an entry whose key is
already current in the vault is skipped.

None of these ops is on the MCP allowlist; agents see login cards through the ordinary
card reads, which show the credential only as an opaque ``cred:…`` reference (CD-3).
"""

from __future__ import annotations

import os
from typing import Any

from engine.cards.login import LOGIN_CREDENTIAL_TYPE, LOGIN_KIND, LoginInput, LoginParts, build_login, login_content_key
from engine.cards.schema import validate_meta
from engine.crypto.canonical import canonical_bytes
from engine.errors import MemoriesError
from engine.service import requests_logins as lrq
from engine.service.caller import Caller
from engine.service.handlers.assets import make_summary, new_revision, visible_entry
from engine.service.handlers.cards import _current_head, _deliver_otp, _opaque
from engine.service.handlers.reprompt import guard_reprompt
from engine.service.memory import gc_paused
from engine.service.registry import op
from engine.service.search_runtime import expect_more_commits
from engine.service.service import Service
from engine.vault.core import Unlocked
from engine.vault.credentials import earlier_revisions, prepare_credential, read_credential, secret_of
from engine.vault.revision import Revision, chunk_count, sign_revisions

__all__ = ["login_new", "login_import_batch", "login_secret", "login_history", "login_list"]


def _input(entry: lrq.LoginEntry) -> LoginInput:
    return LoginInput(
        title=entry.title,
        username=entry.username,
        urls=list(entry.urls),
        password=entry.password,
        totp=entry.totp,
        notes=entry.notes,
        tags=list(entry.tags),
        fields=dict(entry.fields),
        hidden=dict(entry.hidden),
        note=entry.note,
        password_history=[(old.password, old.when) for old in entry.password_history],
        reprompt=entry.reprompt,
    )


def _validated(entry: lrq.LoginEntry, position: int) -> tuple[LoginInput, LoginParts]:
    """Every check of one entry; the error names the entry (its place and title), never a value."""
    login = _input(entry)
    try:
        parts = build_login(login)
        validate_meta(LOGIN_KIND, parts.meta)
    except MemoriesError as exc:
        where = entry.where or f"entry {position + 1}"
        raise MemoriesError(exc.code, f"{where} ({entry.title[:80]!r}): {exc.message}", entry=position) from None
    return login, parts


def _credential_name(card_id: bytes, title: str) -> str:
    clean = "".join(c if ord(c) >= 32 else " " for c in title[:150])
    return f"login {card_id.hex()[:12]}: {clean}"


def _build(
    service: Service,
    state: Unlocked,
    login: LoginInput,
    parts: LoginParts,
    key: str,
    next_seq: int,
    *,
    unsigned: bool = False,
) -> tuple[list[Revision], list[tuple[int, bytes]], bytes, bytes, int]:
    """The credential and card revisions of one login, content rows numbered from ``next_seq``.

    ``unsigned``: left for the caller to sign with the rest of its batch (``sign_revisions``)."""
    card_id = os.urandom(16)
    cred_id = os.urandom(16)  # given, so the credential needs no name scan (the name is unique by card ID)
    public = {**parts.public, "card": card_id.hex()}
    name = _credential_name(card_id, login.title)
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    parents: list[bytes] = []
    # The source's password history becomes the credential's earlier revisions, oldest first,
    # so `login history` lists them and `login copy-password --previous N` reads one (issue 33).
    # Each carries only the password and, in its public part, when the source says it was replaced.
    for old, when in reversed(login.password_history):
        secret = {"password": old}
        seqs = list(range(next_seq, next_seq + chunk_count(len(canonical_bytes(secret)))))
        next_seq += len(seqs)
        earlier = {**public, "replaced": when} if when else dict(public)
        rev, new_rows = prepare_credential(
            service.vault,
            state,
            name=name,
            ctype=LOGIN_CREDENTIAL_TYPE,
            public=earlier,
            secret=secret,
            asset_id=cred_id,
            parents=parents,
            reserved=seqs,
            unsigned=unsigned,
        )
        revisions.append(rev)
        rows += new_rows
        parents = [rev.rev_id]
    cred_seqs = list(range(next_seq, next_seq + chunk_count(len(canonical_bytes(parts.secret)))))
    next_seq += len(cred_seqs)
    cred_rev, cred_rows = prepare_credential(
        service.vault,
        state,
        name=name,
        ctype=LOGIN_CREDENTIAL_TYPE,
        public=public,
        secret=parts.secret,
        asset_id=cred_id,
        parents=parents,
        reserved=cred_seqs,
        unsigned=unsigned,
    )
    revisions.append(cred_rev)
    rows += cred_rows
    card_seqs = list(range(next_seq, next_seq + chunk_count(len(login.notes.encode("utf-8")))))
    next_seq += len(card_seqs)
    summary = make_summary(
        login.title,
        login.tags,
        parts.meta,
        protected={"credential": cred_id, "features": parts.features},
        content_key=key,
    )
    card_rev, card_rows = new_revision(
        service,
        state,
        asset_id=card_id,
        kind=LOGIN_KIND,
        parents=[],
        summary=summary,
        body=login.notes,
        reserved=card_seqs,
        unsigned=unsigned,
    )
    return [*revisions, card_rev], rows + card_rows, card_id, cred_id, next_seq


@op(lrq.LoginNew)
def login_new(service: Service, request: lrq.LoginNew, caller: Caller) -> dict[str, Any]:
    """CD-10: validate, then commit the credential and the card together."""
    state = service.require_unlocked()
    login, parts = _validated(request, 0)
    first = service.require_store().reserve_content(1)[0]
    revs, rows, card_id, cred_id, _ = _build(service, state, login, parts, login_content_key(login), first)
    audit = service.vault.audit_record(state, "login_new", caller, outcome="ok", assets=[card_id, cred_id])
    service.vault.commit(state, revs, rows, [audit])
    return {
        "id": card_id.hex(),
        "short_id": state.index.short_id(card_id),
        "revision": revs[-1].rev_id.hex(),
        "credential": _opaque(state, cred_id),
        "features": parts.features,
    }


@op(lrq.LoginImportBatch)
def login_import_batch(service: Service, request: lrq.LoginImportBatch, caller: Caller) -> dict[str, Any]:
    """IM-1: all entries checked first; new ones committed in one transaction; known ones skipped."""
    # Bulk work: two or more revisions per entry, most of whose objects live on in the index;
    # the cyclic collector would scan them again and again as the batch grows (issue 32).
    with gc_paused():
        expect_more_commits(service, request.more)
        try:
            return _login_import_batch(service, request, caller)
        finally:
            expect_more_commits(service, False)


def _login_import_batch(service: Service, request: lrq.LoginImportBatch, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    checked = [_validated(entry, i) for i, entry in enumerate(request.entries)]
    fresh: list[tuple[LoginInput, LoginParts, str]] = []
    seen: set[str] = set()
    skipped = 0
    for login, parts in checked:
        key = login_content_key(login)
        if key in seen or service.vault.has_content(state, key):
            skipped += 1
            continue
        seen.add(key)
        fresh.append((login, parts, key))
    if request.dry_run or not fresh:
        return {"created": 0, "would_create": len(fresh), "skipped": skipped, "dry_run": request.dry_run, "ids": []}
    next_seq = service.require_store().reserve_content(1)[0]
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    touched: list[bytes] = []
    cards: list[bytes] = []
    for login, parts, key in fresh:
        revs, new_rows, card_id, cred_id, next_seq = _build(service, state, login, parts, key, next_seq, unsigned=True)
        revisions += revs
        rows += new_rows
        touched += [card_id, cred_id]
        cards.append(card_id)
    # Every revision is signed before the commit, all at once on two cores (sign_many).
    sign_revisions(state.identity, revisions)
    audit = service.vault.audit_record(state, "login_import_batch", caller, outcome="ok", assets=touched)
    service.vault.commit(state, revisions, rows, [audit])
    return {"created": len(cards), "would_create": 0, "skipped": skipped, "dry_run": False, "ids": [c.hex() for c in cards]}


def _login_credential(service: Service, state: Unlocked, ref: str) -> tuple[bytes, bytes]:
    entry = visible_entry(state, ref)
    if entry.kind != LOGIN_KIND:
        raise MemoriesError("invalid_input", f"That item is a {entry.kind}, not a login.")
    summary = service.vault.summary_of(state, _current_head(state, entry))
    return entry.asset_id, bytes(summary["protected"]["credential"])


@op(lrq.LoginSecret, needs_elevation=True)
def login_secret(service: Service, request: lrq.LoginSecret, caller: Caller) -> dict[str, Any]:
    """CD-8/CD-10: only a local, elevated CLI caller; the audit intent is committed before delivery."""
    if caller.surface != "ipc" or not caller.namespace.startswith("cli:"):
        raise MemoriesError("permission_denied", "Only the local CLI copies secrets.")
    state = service.require_unlocked()
    _, cred_id = _login_credential(service, state, request.id)
    cred = read_credential(service.vault, state, cred_id.hex())
    guard_reprompt(service, state, caller, [cred_id])
    if request.previous:
        if request.what != "password":
            raise MemoriesError("invalid_input", "Only passwords have a history; leave out --previous.")
        return _earlier_password(service, state, caller, cred_id, request.previous)
    if request.what == "otp":
        if "otp_key" not in cred.secret:
            raise MemoriesError("nothing_to_copy", "That login has no TOTP secret.")
        delivered = _deliver_otp(service, state, caller, "login_secret", cred)
        return {"secret": delivered["code"], "kind": "otp"}
    password = cred.secret.get("password")
    if not isinstance(password, str) or not password:
        raise MemoriesError("nothing_to_copy", "That login has no password.")
    service.vault.commit_intent(state, "login_secret", caller, [cred.asset_id])
    return {"secret": password, "kind": "password"}


def _earlier_password(service: Service, state: Unlocked, caller: Caller, cred_id: bytes, number: int) -> dict[str, Any]:
    earlier = earlier_revisions(state, cred_id, limit=number)
    if len(earlier) < number:
        have = f"only {len(earlier)} earlier password(s)" if earlier else "no earlier passwords"
        raise MemoriesError("nothing_to_copy", f"That login has {have}; `memories login history ID` lists them.")
    password = secret_of(service.vault, state, earlier[number - 1]).get("password")
    if not isinstance(password, str) or not password:
        raise MemoriesError("nothing_to_copy", "That earlier version of the login had no password.")
    service.vault.commit_intent(state, "login_secret", caller, [cred_id])
    return {"secret": password, "kind": "password", "previous": number}


@op(lrq.LoginHistory)
def login_history(service: Service, request: lrq.LoginHistory, caller: Caller) -> dict[str, Any]:
    """The login's earlier passwords by number (1 = the one before the current), with when each was replaced."""
    state = service.require_unlocked()
    card_id, cred_id = _login_credential(service, state, request.id)
    rows: list[dict[str, Any]] = []
    for number, rev in enumerate(earlier_revisions(state, cred_id), start=1):
        public = (service.vault.summary_of(state, rev).get("credential") or {}).get("public") or {}
        replaced = public.get("replaced")
        rows.append(
            {
                "number": number,
                # As the source app said it for a moved-in history; else when it was recorded here.
                "replaced": replaced if isinstance(replaced, str) else None,
                "recorded_ms": rev.created_ms,
            }
        )
    return {"id": card_id.hex(), "short_id": state.index.short_id(card_id), "earlier": rows}


@op(lrq.LoginList)
def login_list(service: Service, request: lrq.LoginList, caller: Caller) -> dict[str, Any]:
    """Titles, usernames, URLs and features of the current login cards; never a secret."""
    state = service.require_unlocked()
    items: list[dict[str, Any]] = []
    for entry in state.index.visible():
        if entry.kind != LOGIN_KIND:
            continue
        head = _current_head(state, entry)
        summary = service.vault.summary_of(state, head)
        meta = summary.get("meta", {})
        protected = summary.get("protected") or {}
        items.append(
            {
                "id": entry.asset_id.hex(),
                "short_id": state.index.short_id(entry.asset_id),
                "title": summary.get("title", ""),
                "username": meta.get("username"),
                "urls": [u for u in str(meta.get("urls", "")).split("\n") if u],
                "tags": list(summary.get("tags", [])),
                "features": list(protected.get("features", [])),
                "credential": _opaque(state, bytes(protected["credential"])) if protected else None,
                "conflict": entry.in_conflict,
                "updated_ms": head.changed_ms,
            }
        )
    words = request.query.casefold().split()
    if words or request.tag is not None:
        items = [i for i in items if _matches(i, words, request.tag)]
    items.sort(key=lambda i: (str(i["title"]).lower(), i["id"]))
    return {"items": items[: request.limit], "total": len(items)}


def _matches(item: dict[str, Any], words: list[str], tag: str | None) -> bool:
    """Every word is in the title, username, a URL or a tag (any case; Chinese as substrings);
    never in a secret, which the listing does not hold."""
    if tag is not None and tag not in item["tags"]:
        return False
    fields = [str(item["title"]), str(item["username"] or ""), *item["urls"], *item["tags"]]
    haystack = "\n".join(fields).casefold()
    return all(word in haystack for word in words)
