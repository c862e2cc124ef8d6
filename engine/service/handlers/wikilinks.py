"""``[[wikilinks]]`` become graph links (DT-8), kept in step with the note's text.

Every write of an ordinary item (put, edit, restore, import) brings the note's outgoing
links of relation ``wikilink`` in line with the names its body gives, in the same commit as
the revision: a name that resolves adds a link, a link whose name left the text is removed.
Links of other relations (``memories card link``) are never touched.

Resolution, by title within the note's vault, over ordinary items (memory, knowledge,
brain, persona): case-insensitively, as Obsidian resolves file names; ``Folder/Title`` and
``Title.md`` also match ``Title``; when several items share a title the most recently
changed wins. A name that resolves to nothing is reported as unresolved (no link is made);
attachments (``![[x.png]]``) are never links.

Renames: a link follows its item by ID, as Obsidian's follows its file. When the target
is renamed, the source's text still says the old name; at the source's next write that name
no longer resolves by title, but it is one of the target's earlier titles, so the link is
kept (and the name is not reported as unresolved). The text is never rewritten.

A note written before the note it names exists gets its link at its next write, or when
``wikilinks_sync`` reads it again (``memories wikilinks``; `memories import` runs it over
what it imported, so links between the files of one import resolve in any order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.cards import wikilinks
from engine.cards.links import PPM, add_record, remove_record
from engine.service import requests as rq
from engine.service.caller import Caller
from engine.service.handlers import assets
from engine.service.handlers.assets import ORDINARY_KINDS
from engine.service.handlers.cards import link_index
from engine.service.handlers.vaults import vault_for
from engine.service.projections import listed_summaries, newest_head, visible_body
from engine.service.registry import op
from engine.service.service import Service
from engine.vault.core import Unlocked
from engine.vault.revision import Revision

__all__ = ["WIKILINK_REL", "link_records", "wikilinks_sync"]

WIKILINK_REL = "wikilink"
MAX_UNRESOLVED_SHOWN = 50


# Notes whose linked names are remembered (``LinkedNames``): past this, a write's are not kept
# and ``wikilinks_sync`` reads those notes' bodies again, as it always could.
MAX_REMEMBERED = 200_000


@dataclass
class _Outcome:
    records: list[dict[str, Any]] = field(default_factory=list)
    linked: int = 0
    removed: int = 0
    unresolved: dict[bytes, list[str]] = field(default_factory=dict)
    attachments: dict[bytes, list[str]] = field(default_factory=dict)
    named: dict[bytes, LinkedNames] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LinkedNames:
    """What one note's wikilinks gave when its revision ``rev_id`` was linked: each name and the
    item it resolved to (None: nothing), the note's wikilink targets afterwards, and what was
    reported. While the note is at that revision, has those links, and every name resolves as
    it did, linking it again would change and report nothing new: ``wikilinks_sync`` (which an
    import runs at its end over its notes that named something not there yet) then skips
    reading its body (issue 32: at 10k notes, half of them naming no note, reading those
    bodies again was 1.4 s of a 4.6 s import). Kept for such notes only, until that sync."""

    rev_id: bytes
    names: tuple[tuple[str, bytes | None], ...]
    links: tuple[bytes, ...]  # sorted
    unresolved: tuple[str, ...]
    attachments: tuple[str, ...]


class _Titles:
    """Case-folded title → items, for one vault, from the title map the list order keeps current
    (engine/vault/listing.py: built once, then updated for the items changed since, so each
    batch of an import costs its own notes, not the vault's)."""

    def __init__(self, service: Service, state: Unlocked, vault_id: bytes, pending: Iterable[tuple[bytes, str]]) -> None:
        self._state = state
        self._vault_id = vault_id
        self._summary = lambda asset_ids: listed_summaries(service, state, asset_ids)
        self._listed = state.index.listing
        self._keys = self._listed.by_time.keys  # where each listed item is (vault, kind)
        # Items of the write in hand are not listed yet; their titles count already.
        self._pending: dict[str, list[bytes]] = {}
        for asset_id, title in pending:
            holders = self._pending.setdefault(title.casefold(), [])
            if asset_id not in holders:
                holders.append(asset_id)

    def _holders(self, key: str) -> list[bytes]:
        keys = self._keys
        listed = self._listed.title_holders(self._summary, key)
        found = [a for a in listed if keys[a][0] == self._vault_id and keys[a][1] in ORDINARY_KINDS]
        found += [a for a in self._pending.get(key, ()) if a not in found]
        return found

    def resolve(self, name: str, source: bytes) -> bytes | None:
        for key in wikilinks.name_variants(name):
            found = [a for a in self._holders(key) if a != source]
            if found:
                return max(found, key=self._changed_ms)
        return None

    def _changed_ms(self, asset_id: bytes) -> tuple[int, bytes]:
        entry = self._state.index.assets.get(asset_id)
        when = self._state.index.newest_head(entry).created_ms if entry is not None else 1 << 62
        return (when, asset_id)


def _earlier_titles(service: Service, state: Unlocked, asset_id: bytes) -> set[str]:
    entry = state.index.assets.get(asset_id)
    if entry is None:
        return set()
    titles: set[str] = set()
    for rev_id in entry.revisions:
        title = service.vault.summary_of(state, state.index.revisions[rev_id]).get("title")
        if isinstance(title, str):
            titles.update(wikilinks.name_variants(title))
    return titles


def _wikilink_targets(service: Service, source: bytes) -> tuple[bytes, ...]:
    return tuple(sorted({link.dst for link in link_index(service).edges(source, "out") if link.rel == WIKILINK_REL}))


def _sync_one(
    service: Service, state: Unlocked, titles: _Titles, head: Revision, vault_id: bytes, body: str, out: _Outcome
) -> None:
    source = head.asset_id
    found = wikilinks.parse(body)
    wanted: dict[bytes, str] = {}
    unresolved: list[str] = []
    names: list[tuple[str, bytes | None]] = []
    for name in found.notes:
        target = titles.resolve(name, source)
        names.append((name, target))
        if target is None:
            unresolved.append(name)
        else:
            wanted.setdefault(target, name)
    existing = [link for link in link_index(service).edges(source, "out") if link.rel == WIKILINK_REL]
    links = {link.dst for link in existing}
    for link in existing:
        if link.dst in wanted:
            del wanted[link.dst]  # already linked
            continue
        # A renamed target: the text still says one of its earlier titles.
        earlier = _earlier_titles(service, state, link.dst) if unresolved else set()
        kept = [name for name in unresolved if set(wikilinks.name_variants(name)) & earlier]
        if kept:
            unresolved = [name for name in unresolved if name not in kept]
            continue
        out.records.append(remove_record(link))
        out.removed += 1
        links.discard(link.dst)
    for target in wanted:
        out.records.append(
            add_record(vault_id=vault_id, src=source, dst=target, rel=WIKILINK_REL, confidence_ppm=PPM, valid_till_ms=None)
        )
        out.linked += 1
        links.add(target)
    if unresolved:
        out.unresolved[source] = unresolved
    if found.attachments:
        out.attachments[source] = found.attachments
    out.named[source] = LinkedNames(head.rev_id, tuple(names), tuple(sorted(links)), tuple(unresolved), tuple(found.attachments))


def _still_linked(service: Service, state: Unlocked, titles: _Titles, head: Revision, out: _Outcome) -> bool:
    """True, with what it reported added to ``out``, when linking ``head`` again would change
    nothing (``LinkedNames``): then its body need not be read."""
    named: LinkedNames | None = state.linked_names.pop(head.asset_id, None)  # taken once: kept only until then
    if named is None or named.rev_id != head.rev_id or _wikilink_targets(service, head.asset_id) != named.links:
        return False
    if any(titles.resolve(name, head.asset_id) != target for name, target in named.names):
        return False
    if named.unresolved:
        out.unresolved[head.asset_id] = list(named.unresolved)
    if named.attachments:
        out.attachments[head.asset_id] = list(named.attachments)
    return True


def _remember(state: Unlocked, out: _Outcome) -> None:
    """Keep what the links of these notes gave (``LinkedNames``) for those that named something
    not there (yet): the notes an import asks ``wikilinks_sync`` for at its end, which takes
    each entry once. Within ``MAX_REMEMBERED`` notes."""
    kept = state.linked_names
    for source, named in out.named.items():
        if not named.unresolved:
            kept.pop(source, None)
        elif source in kept or len(kept) < MAX_REMEMBERED:
            kept[source] = named


def _link_writes(service: Service, state: Unlocked, writes: list[tuple[Revision, str, str]]) -> _Outcome:
    """Link records for ``writes`` ((revision, title, body) of one commit, about to be made)."""
    out = _Outcome()
    by_vault: dict[bytes, list[tuple[Revision, str, str]]] = {}
    for rev, title, body in writes:
        if rev.kind in ORDINARY_KINDS and not rev.tombstone:
            by_vault.setdefault(rev.vault_id, []).append((rev, title, body))
    for vault_id, items in by_vault.items():
        # Only a write that names something, or had wikilinks before, needs the title map.
        busy = [i for i in items if "[[" in i[2] or _has_wikilinks(service, i[0].asset_id)]
        if not busy:
            continue
        titles = _Titles(service, state, vault_id, [(rev.asset_id, title) for rev, title, _ in items])
        for rev, _, body in busy:
            _sync_one(service, state, titles, rev, vault_id, body, out)
    return out


def _has_wikilinks(service: Service, asset_id: bytes) -> bool:
    return any(link.rel == WIKILINK_REL for link in link_index(service).edges(asset_id, "out"))


def link_records(
    service: Service, state: Unlocked, writes: list[tuple[Revision, str, str]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The hook ``assets.BODY_LINKERS`` calls: records to commit, and what to tell the caller."""
    out = _link_writes(service, state, writes)
    # Remembered before the commit: if it fails, no head is at these revisions and nothing is skipped.
    _remember(state, out)
    report: dict[str, Any] = {}
    if out.linked or out.removed or out.unresolved or out.attachments:
        report = {
            "linked": out.linked,
            "removed": out.removed,
            "unresolved": sorted({n for names in out.unresolved.values() for n in names})[:MAX_UNRESOLVED_SHOWN],
            # Which notes named something not there (yet): an import links just these again at its end.
            "unresolved_ids": [source.hex() for source in out.unresolved],
            "attachments": sorted({n for names in out.attachments.values() for n in names})[:MAX_UNRESOLVED_SHOWN],
        }
    return out.records, report


assets.BODY_LINKERS.append(link_records)


@op(rq.WikilinksSync)
def wikilinks_sync(service: Service, request: rq.WikilinksSync, caller: Caller) -> dict[str, Any]:
    """Read notes again and bring their wikilink graph links up to date; list what resolves to nothing.

    ``ids`` None means every ordinary item of the vault (reads every body: an explicit repair)."""
    state = service.require_unlocked()
    vault_id = vault_for(state, request.vault).vault_id
    if request.ids is None:
        entries = [e for e in state.index.visible() if e.vault_id == vault_id and e.kind in ORDINARY_KINDS]
    else:
        entries = [assets.visible_entry(state, ref) for ref in request.ids]
        entries = [e for e in entries if e.kind in ORDINARY_KINDS and e.vault_id == vault_id]  # titles are per vault
    out = _Outcome()
    titles = _Titles(service, state, vault_id, [])
    for entry in entries:
        if entry.in_conflict:
            continue  # a note in conflict is linked again once it is resolved (a write)
        head = newest_head(state, entry)
        if _still_linked(service, state, titles, head, out):
            continue
        body = visible_body(service, state, head)
        if "[[" in body or _has_wikilinks(service, entry.asset_id):
            _sync_one(service, state, titles, head, entry.vault_id, body, out)
    if out.records:
        touched = sorted({bytes(r[k]) for r in out.records if r["op"] == "add" for k in ("src", "dst")})
        audit = service.vault.audit_record(state, "wikilinks_sync", caller, outcome="ok", assets=touched)
        service.vault.commit(state, [], [], [*out.records, audit])
    unresolved = []
    for source, names in out.unresolved.items():
        summary = service.vault.summary_of(state, newest_head(state, state.index.assets[source]))
        unresolved.append(
            {"id": source.hex(), "short_id": state.index.short_id(source), "title": summary.get("title", ""), "names": names}
        )
    unresolved.sort(key=lambda row: str(row["title"]).casefold())
    attachments = sorted({n for names in out.attachments.values() for n in names})
    return {
        "checked": len(entries),
        "linked": out.linked,
        "removed": out.removed,
        "unresolved": unresolved,
        "attachments": attachments,
    }
