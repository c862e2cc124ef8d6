"""SY-6: writes accepted before a revocation stay valid for devices that join later (issue 29).

In-process devices of one user (tests/sync/merge_support.py: real services, stores, signatures
and the real merge). A is the Owner's first device, B and D joined it. B writes; A accepts
B's writes; B writes once more offline and D (which has not heard of any revocation) takes that
too; then A revokes B. The revocation policy records the heads of B's writes A had accepted,
so C, joining after the revocation, applies B's earlier writes and still quarantines the one
written after it, without trusting B's clock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import MemoriesError
from engine.sync.bundle import Inventory, make_bundle
from engine.sync.merge import merge
from engine.sync.quarantine import quarantined
from tests.helpers import PASSWORD
from tests.sync.merge_support import CHUNK, first_device, join, pull


def test_a_later_device_keeps_what_was_accepted_before_the_revocation(tmp_path: Path) -> None:
    """SY-6, SY-2: accepted-before-revocation applies everywhere; written-after stays quarantined."""
    a = first_device(tmp_path / "a")
    b = join(a, tmp_path / "b", "b")
    d = join(a, tmp_path / "d", "d")
    early = [b.put(f"early note {i}") for i in range(3)]
    b.edit(early[0], "early note 0, second version")
    pull(a, b)
    assert all(a.state.index.resolve(asset) for asset in early)
    late = b.put("written after A's revocation")  # B has not heard of it; D takes it from B
    pull(d, b)
    a.do("sudo", password=PASSWORD)
    revoked = a.do("device_revoke", device="b")
    head = a.state.vault.policy
    assert head.revoked() == {b.device_pub}
    recorded = {bytes(r) for r in head.body.get("accepted", [])}
    assert recorded, "the revocation records the revoked device's accepted heads"
    assert revoked["epoch"] == head.epoch

    c = join(a, tmp_path / "c", "c")
    report = pull(c, a)
    assert report.quarantined == 0 and report.revisions_added == 4
    assert c.do("get", id=early[0])["body"] == "early note 0, second version"
    # D learns of the revocation from A; C then hears of B's late write only through D.
    pull(d, a)
    late_report = pull(c, d)
    assert late_report.quarantined == 1 and late_report.revisions_added == 0
    assert [q["reason"] for q in quarantined(c.state)] == [
        "written under a superseded policy by a device the current policy no longer authorizes"
    ]
    assert all(not entry.asset_id.hex().startswith(late) for entry in c.state.index.visible())


def test_a_vault_made_by_a_revoked_device_is_not_taken(tmp_path: Path) -> None:
    """ID-5, SY-5: a revoked device keeps the user key and can make a vault that authorizes
    itself and the user's other devices; a device that has not heard of the revocation takes it
    (a device of its user), but one that knows of it refuses it when it is handed on."""
    a = first_device(tmp_path / "a")
    b = join(a, tmp_path / "b", "b")
    c = join(a, tmp_path / "c", "c")
    a.do("sudo", password=PASSWORD)
    a.do("device_revoke", device="c")
    c.do("vault_new", name="from c")  # c has not heard: it authorizes a, b and itself
    vault_id = next(v for v, keys in c.state.vaults.items() if keys.name == "from c")
    offer = make_bundle(c.service.vault, c.state, vault_id, Inventory(vault_id, [], [], [], b.device_pub), max_bytes=CHUNK)
    merge(b.service.vault, b.state, offer, peer_device=c.device_pub, actor=b.caller)  # b has not heard either
    assert vault_id in b.state.vaults
    handed = make_bundle(b.service.vault, b.state, vault_id, Inventory(vault_id, [], [], [], a.device_pub), max_bytes=CHUNK)
    rows = a.rows()
    with pytest.raises(MemoriesError) as caught:
        merge(a.service.vault, a.state, handed, peer_device=b.device_pub, actor=a.caller)
    assert caught.value.code == "sync_rejected" and "revoked here" in caught.value.message
    assert vault_id not in a.state.vaults and a.rows() == rows
