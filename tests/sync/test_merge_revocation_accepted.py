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

from engine.sync.quarantine import quarantined
from tests.helpers import PASSWORD
from tests.sync.merge_support import first_device, join, pull


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
