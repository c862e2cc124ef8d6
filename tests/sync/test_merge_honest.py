"""Two (and three) honest devices merge both ways in-process on real stores (SY-1, HI-4).

Devices are joined by the real device handlers; bundles are made and merged by the real
``inventory`` / ``make_bundle`` / ``merge`` (tests/sync/merge_support.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.sync.bundle import Inventory, inventory
from tests.sync.merge_support import Device, first_device, join, pull, sync, view


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Device, Device]:
    a = first_device(tmp_path / "a")
    return a, join(a, tmp_path / "b", "b")


def _titles(device: Device) -> set[str]:
    return {item["title"] for item in device.do("list")["items"]}


def test_edits_on_both_sides_merge_into_identical_history(pair: tuple[Device, Device]) -> None:
    """SY-1: both see both edits with identical revision DAGs; a re-merge adds nothing."""
    a, b = pair
    a.put("from a")
    b.put("from b")
    report_b = pull(b, a)
    report_a = pull(a, b)
    assert report_b.revisions_added == 1 and report_a.revisions_added == 1
    assert _titles(a) == _titles(b) == {"from a", "from b"}
    assert view(a) == view(b)
    sync(a, b)  # carries the merges' own audit entries; after it both hold everything
    rows = a.rows(), b.rows()
    again = pull(b, a), pull(a, b)
    assert [(r.revisions_added, r.audits_added, r.policies_added) for r in again] == [(0, 0, 0), (0, 0, 0)]
    assert (a.rows(), b.rows()) == rows


def test_a_concurrent_edit_is_the_same_conflict_on_both_sides_and_resolves_once(pair: tuple[Device, Device]) -> None:
    """HI-4: a concurrent edit of one memory is a visible conflict on both sides, never an overwrite."""
    a, b = pair
    asset = a.put("shared", "v0")
    sync(a, b)
    a.edit(asset, "edited on a")
    b.edit(asset, "edited on b")
    report = pull(b, a)
    assert len(report.conflicts) == 1 and asset.startswith(report.conflicts[0][:8])
    pull(a, b)
    assert view(a) == view(b)
    heads = view(a)[next(k for k in view(a) if k.startswith(asset))]
    assert len(heads) == 2
    got = a.do("get", id=asset)
    assert got.get("conflict") or len(got.get("heads", [])) == 2
    a.do("edit", id=asset, body="resolved", resolve=True)
    sync(a, b)
    assert view(a) == view(b)
    assert len(view(b)[next(k for k in view(b) if k.startswith(asset))]) == 1
    assert b.do("get", id=asset)["body"] == "resolved"


def test_a_third_device_that_joins_later_catches_up(pair: tuple[Device, Device], tmp_path: Path) -> None:
    a, b = pair
    a.put("one")
    b.put("two")
    sync(a, b)
    c = join(b, tmp_path / "c", "c")
    # a learns of c from b's policy before c can sync with it
    pull(a, b)
    pull(c, a)
    assert _titles(c) == {"one", "two"} and view(c) == view(a)
    c.put("three")
    sync(c, b)
    sync(b, a)
    assert _titles(a) == _titles(b) == _titles(c) == {"one", "two", "three"}


def test_offline_edits_merge_in_order(pair: tuple[Device, Device]) -> None:
    """1,000 offline edits on each side, then one merge each way: every edit, in DAG order."""
    a, b = pair
    note_a = a.put("a's note", "0")
    note_b = b.put("b's note", "0")
    for i in range(1, 1000):
        a.edit(note_a, str(i))
        b.edit(note_b, str(i))
    pull(b, a)
    pull(a, b)
    assert view(a) == view(b)
    for device in (a, b):
        assert device.do("get", id=note_a)["body"] == "999"
        assert device.do("get", id=note_b)["body"] == "999"
        assert len(device.do("history", id=note_a)["revisions"]) == 1000


def test_inventory_round_trips_and_refuses_malformed_input(pair: tuple[Device, Device]) -> None:
    a, _ = pair
    a.put("x")
    inv = inventory(a.service.vault, a.state, a.state.default_vault)
    assert Inventory.from_wire(inv.to_wire()) == inv
    bad: object
    for bad in (None, [], {"v": 1}, {**inv.to_wire(), "revision_ids": [b"short"]}, {**inv.to_wire(), "extra": 1}):
        with pytest.raises(Exception) as caught:
            Inventory.from_wire(bad)
        assert getattr(caught.value, "code", None) == "sync_invalid"


def test_a_merge_commits_after_a_lock_and_unlock_as_it_was(pair: tuple[Device, Device]) -> None:
    """What a merge committed decodes the same after the store is reopened (one transaction)."""
    a, b = pair
    a.put("persisted")
    pull(b, a)
    before = view(b)
    b.service.lock_now("test")
    b.do("unlock", password="correct horse battery staple")
    assert view(b) == before and "persisted" in _titles(b)
