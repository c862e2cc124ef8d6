"""The per-(vault, author) revision tally a status probe reads for the sync outbox (issue 32):
counted once, then only for the revisions added since, always what a full count gives."""

from __future__ import annotations

import os
from collections import Counter

from engine.crypto.keys import new_identity
from engine.vault.index import AssetIndex
from engine.vault.revision import Revision, build_revision

VAULTS = [b"\x01" * 16, b"\x02" * 16]
DEVICES = [new_identity(), new_identity()]


def _revision(vault_id: bytes, device: int, parents: list[Revision]) -> Revision:
    asset_id = parents[0].asset_id if parents else os.urandom(16)
    return build_revision(
        identity=DEVICES[device],
        vault_id=vault_id,
        policy_head=b"\x44" * 32,
        epoch=1,
        epoch_key=b"\x22" * 32,
        asset_id=asset_id,
        kind="memory",
        parents=[p.rev_id for p in parents],
        tombstone=False,
        summary={"title": "t", "tags": [], "meta": {}},
        body=b"",
        content_seqs=[1],
    ).revision


def _full_count(index: AssetIndex) -> Counter[tuple[bytes, bytes]]:
    return Counter((rev.vault_id, rev.author) for rev in index.revisions.values())


def test_the_tally_counts_what_was_added_since_as_a_full_count_does() -> None:
    index = AssetIndex()
    assert index.revision_tally() == Counter()
    made: list[Revision] = []
    for step in range(3):
        for i in range(7 + step):
            vault_id, device = VAULTS[i % 2], (i + step) % 2
            parents = [made[-1]] if made and i % 3 == 2 and made[-1].vault_id == vault_id else []
            rev = _revision(vault_id, device, parents)
            index.apply(rev)
            made.append(rev)
        tally = index.revision_tally()
        assert tally == _full_count(index)
        assert sum(tally.values()) == len(made)
    index.apply(made[0])  # applying a held revision again adds nothing
    assert index.revision_tally() == _full_count(index)
    # The answer is a copy: changing it changes nothing held.
    copy = index.revision_tally()
    copy[(VAULTS[0], DEVICES[0].device_pub)] += 100
    assert index.revision_tally() == _full_count(index)
