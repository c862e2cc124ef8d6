"""The compact title order and tag sets (issue 32, engine/vault/title_order.py): the same pages,
counts and tag sets as sorting what was read, through loads, puts and drops, for items held by
their head revision (its kept list fields) and items held as a copy of what was read (a summary
that maps secrets keeps no list fields); and no per-item copy where the head holds the fields."""

from __future__ import annotations

import random
from typing import Any

from engine.crypto.keys import new_identity
from engine.vault.revision import Revision, build_revision, keep_list_fields
from engine.vault.title_order import TitleOrder

VAULTS = [b"\x01" * 16, b"\x02" * 16]
KINDS = ["memory", "knowledge", "brain"]
# Case ties, titles that fold to one another (ß/SS), unicode, a non-string title, an empty one.
TITLES: list[Any] = ["alpha", "Alpha", "ALPHA", "Straße", "STRASSE", "Éclair", "éclair", "中文", "中文笔记", "", 7, "zeta"]
TAGS = ["red", "blue", "家", "green"]
IDENTITY = new_identity()


def _head(vault_id: bytes, kind: str, summary: dict[str, Any]) -> Revision:
    """A real revision whose summary was read by a listing (its list fields kept, if any)."""
    made = build_revision(
        identity=IDENTITY,
        vault_id=vault_id,
        policy_head=b"\x44" * 32,
        epoch=1,
        epoch_key=b"\x22" * 32,
        asset_id=b"\x33" * 16,
        kind=kind,
        parents=[],
        tombstone=False,
        summary=summary,
        body=b"",
        content_seqs=[1],
    )
    keep_list_fields([(made.revision, summary)])
    return made.revision


class Model:
    """The items as read, and the order built from them, checked against a plain sort."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.items: dict[bytes, tuple[bytes, str, dict[str, Any]]] = {}
        self.order = TitleOrder()

    def read(self) -> tuple[bytes, str, dict[str, Any], Revision | None]:
        rng = self.rng
        vault_id, kind = rng.choice(VAULTS), rng.choice(KINDS)
        tags = rng.sample(TAGS, rng.randint(0, 3))
        tags += tags[:1] * rng.randint(0, 1)  # a repeated tag counts once
        fields: dict[str, Any] = {"title": rng.choice(TITLES), "tags": tags}
        shape = rng.random()
        if shape < 0.6:
            head: Revision | None = _head(vault_id, kind, fields)
        elif shape < 0.7:  # a summary that maps secrets: no list fields kept
            head = _head(vault_id, kind, {**fields, "secrets": {"pw": b"\x01" * 16}})
        else:
            head = None
        return vault_id, kind, fields, head

    def check(self) -> None:
        order = self.order
        assert len(order) == len(self.items)
        for vault_id in VAULTS:
            for kinds in (["memory"], ["memory", "brain"], KINDS, ["absent"]):
                expected = sorted(
                    (str(f["title"]).casefold(), a) for a, (v, k, f) in self.items.items() if v == vault_id and k in kinds
                )
                ids = [a for _, a in expected]
                assert order.count(vault_id, kinds) == len(ids)
                for offset, limit in ((0, 1000), (0, 3), (2, 5), (len(ids) - 1, 4), (len(ids) + 3, 2)):
                    offset = max(offset, 0)
                    assert order.page(vault_id, kinds, offset, limit, descending=False) == ids[offset : offset + limit]
                    backwards = ids[::-1]
                    assert order.page(vault_id, kinds, offset, limit, descending=True) == backwards[offset : offset + limit]
        tagged: dict[str, set[bytes]] = {}
        for asset_id, (_, _, fields) in self.items.items():
            for tag in fields["tags"]:
                tagged.setdefault(tag, set()).add(asset_id)
        assert order.tagged == {tag: sorted(holders) for tag, holders in tagged.items()}  # each by ID
        for asset_id, (_, _, fields) in self.items.items():
            assert order.key(asset_id) == (str(fields["title"]).casefold(), asset_id)


def test_pages_counts_and_tags_match_a_plain_sort_through_changes() -> None:
    rng = random.Random(32)
    model = Model(rng)
    rows = []
    for _ in range(60):
        asset_id = rng.randbytes(16)
        vault_id, kind, fields, head = model.read()
        model.items[asset_id] = (vault_id, kind, fields)
        rows.append((asset_id, vault_id, kind, fields, head))
    model.order.load(rows)
    model.check()
    for step in range(120):
        if model.items and rng.random() < 0.3:
            asset_id = rng.choice(sorted(model.items))
            model.order.drop(asset_id)
            del model.items[asset_id]
        else:  # an edit of a held item (a new head) or a new item
            asset_id = rng.choice(sorted(model.items)) if model.items and rng.random() < 0.5 else rng.randbytes(16)
            vault_id, kind, fields, head = model.read()
            model.items[asset_id] = (vault_id, kind, fields)
            model.order.put(asset_id, vault_id, kind, fields, head)
        if step % 10 == 0:
            model.check()
    model.check()
    model.order.drop(b"\x00" * 16)  # not held: nothing changes
    model.check()


def test_an_item_is_held_by_its_head_not_by_copies_of_its_fields() -> None:
    order = TitleOrder()
    kept = _head(VAULTS[0], "memory", {"title": "Kept", "tags": ["red"]})
    secret = _head(VAULTS[0], "memory", {"title": "Secret", "tags": ["red"], "secrets": {"pw": b"\x01" * 16}})
    other_kind = _head(VAULTS[0], "brain", {"title": "Moved", "tags": []})
    ids = [bytes([n]) * 16 for n in (1, 2, 3)]
    order.load(
        [
            (ids[0], VAULTS[0], "memory", {"title": "Kept", "tags": ["red"]}, kept),
            (ids[1], VAULTS[0], "memory", {"title": "Secret", "tags": ["red"]}, secret),
            # the row's kind differs from the head's (the item's kind changed): a copy, as read
            (ids[2], VAULTS[0], "memory", {"title": "Moved", "tags": []}, other_kind),
        ]
    )
    assert order._held[ids[0]] is kept  # one reference: the head keeps the fields packed
    assert order._held[ids[1]] == (VAULTS[0], "memory", "secret", ("red",))
    assert order._held[ids[2]] == (VAULTS[0], "memory", "moved", ())
    page = order.page(VAULTS[0], ["memory"], 0, 10, descending=False)
    assert page == [ids[0], ids[2], ids[1]]  # kept, moved, secret
    assert all(listed is given for listed, given in zip(page, [ids[0], ids[2], ids[1]], strict=True))
    assert order.read(ids[0]) == (VAULTS[0], "memory", "kept", ("red",))
