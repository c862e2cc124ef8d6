"""The title map [[wikilinks]] resolve by (engine/vault/listing.py, issue 32): kept current as
items are listed, renamed, unlisted and listed again, it equals one built from scratch over the
same items, so an import batch may ask it again without a rebuild."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from engine.vault.listing import ListOrder

VAULTS = [b"v" * 16, b"w" * 16]
TITLES = ["Alpha", "alpha", "ALPHA", "Beta", "Straße", "STRASSE", "", "Gamma"]  # case ties, casefold


def _fresh(titles: dict[bytes, str], places: dict[bytes, tuple[bytes, str]]) -> ListOrder:
    order = ListOrder()
    for asset_id, (vault_id, kind) in places.items():
        order.listed(asset_id, vault_id, kind, 1, False)
    order.title_holders(lambda ids: [{"title": titles[a]} for a in ids], "")
    return order


def test_kept_map_equals_a_rebuilt_one_through_renames_and_removals() -> None:
    rng = random.Random(32)
    titles: dict[bytes, str] = {}
    places: dict[bytes, tuple[bytes, str]] = {}
    kept = ListOrder()

    def summary(asset_ids: Sequence[bytes]) -> list[dict[str, Any]]:
        return [{"title": titles[asset_id]} for asset_id in asset_ids]

    ids = [bytes([i]) * 16 for i in range(40)]
    for step in range(400):
        asset_id = rng.choice(ids)
        action = rng.random()
        if action < 0.6:  # a new item, or a rename of a listed one (maybe to another vault)
            titles[asset_id] = rng.choice(TITLES)
            places[asset_id] = (rng.choice(VAULTS), rng.choice(["memory", "knowledge"]))
            kept.listed(asset_id, *places[asset_id], step, False)
        elif asset_id in places:  # deleted or hidden
            del places[asset_id]
            kept.unlisted(asset_id)
        if step % 7 == 0:  # asked between changes, as each import batch asks
            kept.title_holders(summary, "alpha")
            assert kept.held_titles() == _fresh(titles, places).held_titles()
    kept.title_holders(summary, "alpha")
    expected: dict[str, list[bytes]] = {}
    for asset_id in places:
        expected.setdefault(titles[asset_id].casefold(), []).append(asset_id)
    assert kept.held_titles() == {title: sorted(holders) for title, holders in expected.items()}
    for title, holders in expected.items():
        assert sorted(kept.title_holders(summary, title)) == sorted(holders)
    assert kept.title_holders(summary, "no such title") == []
