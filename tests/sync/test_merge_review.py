"""Quarantine review and permission-fork resolution, in-process on real stores (SY-2, SY-3)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from engine.errors import MemoriesError
from engine.sync.bundle import MAGIC
from engine.sync.forks import forks_for
from engine.sync.merge import merge
from tests.helpers import PASSWORD
from tests.sync.merge_support import Device, bundle_for, first_device, join, pull, sync, view


@pytest.fixture
def trio(tmp_path: Path) -> tuple[Device, Device, Device]:
    a = first_device(tmp_path / "a")
    b = join(a, tmp_path / "b", "b")
    c = join(a, tmp_path / "c", "c")
    sync(a, b)
    return a, b, c


def _quarantine_one(a: Device, b: Device, c: Device) -> str:
    a.do("sudo", password=PASSWORD)
    a.do("device_revoke", device="c")
    c.put("late note", "written by c after its revocation")
    pull(b, c)  # b has not heard of the revocation
    assert pull(a, b).quarantined == 1
    entries = a.do("quarantine_list")["entries"]
    assert len(entries) == 1
    return str(entries[0]["id"])


def test_quarantine_list_show_and_reapply(trio: tuple[Device, Device, Device]) -> None:
    """SY-2: a quarantined write is out of the view; reapply makes a fresh revision under the
    current policy, signed by this device; it is then no longer listed."""
    a, b, c = trio
    qid = _quarantine_one(a, b, c)
    shown = a.do("quarantine_show", id=qid)
    assert shown["title"] == "late note" and shown["body"] == "written by c after its revocation"
    assert "late note" not in {i["title"] for i in a.do("list")["items"]}
    a.do("sudo", password=PASSWORD)
    result = a.do("quarantine_reapply", id=qid)
    rev = a.state.index.revisions[bytes.fromhex(result["revision"])]
    assert rev.author == a.device_pub and bytes(rev.body["policy"]) == a.state.vault.policy.head
    assert "late note" in {i["title"] for i in a.do("list")["items"]}
    assert a.do("quarantine_list")["entries"] == []
    # Delivered again by b, the quarantined revision stays out (no incoming field clears it).
    rows = a.rows()
    pull(a, b)
    assert a.do("quarantine_list")["entries"] == [] and a.rows() >= rows
    assert view(a)[result["asset"]] == (result["revision"],)


def test_quarantine_discard(trio: tuple[Device, Device, Device]) -> None:
    a, b, c = trio
    qid = _quarantine_one(a, b, c)
    a.do("sudo", password=PASSWORD)
    assert a.do("quarantine_discard", id=qid)["discarded"] is True
    assert a.do("quarantine_list")["entries"] == []
    with pytest.raises(MemoriesError) as caught:
        a.do("quarantine_reapply", id=qid)
    assert caught.value.code == "not_found"


def test_a_fork_is_resolved_by_the_owner_and_the_discarded_branch_is_refused_afterwards(
    trio: tuple[Device, Device, Device],
) -> None:
    """SY-3: an Owner's signed resolution over the kept head and the whole discarded chain;
    the other side adopts the kept branch only with it, and the discarded branch is refused."""
    a, b, _ = trio
    a.do("vault_rotate")
    b.do("vault_member_add", user="ab" * 32, role="reader")
    b_note = b.put("written on b's branch")
    discarded = b.state.vault.policy.to_record()
    for receiver, sender in ((b, a), (a, b)):
        with pytest.raises(MemoriesError) as caught:
            pull(receiver, sender)
        assert caught.value.code == "policy_fork"
    forks = a.do("vault_forks")["forks"]
    assert len(forks) == 1
    with pytest.raises(MemoriesError) as caught:
        a.do("vault_fork_resolve", keep=forks[0]["theirs"]["head"][:16])
    assert caught.value.code == "invalid_input"
    a.do("sudo", password=PASSWORD)
    resolved = a.do("vault_fork_resolve", keep=forks[0]["ours"]["head"][:16])
    assert resolved["epoch"] == 3 and resolved["discarded"] == 1
    assert a.do("vault_forks")["forks"] == []
    # b adopts a's branch with the resolution; its own discarded policy still verifies its note.
    report = pull(b, a)
    assert report.policies_added == 2
    assert report.discarded_policies == 1 and report.to_wire()["discarded_policies"] == 1  # b is told (issue 29)
    assert b.state.vault.policy.head == a.state.vault.policy.head and b.state.vault.policy.epoch == 3
    assert forks_for(b.state, b.state.default_vault) == []
    pull(a, b)
    assert view(a) == view(b) and any(k.startswith(b_note) for k in view(a))
    b.service.lock_now("test")
    b.do("unlock", password=PASSWORD)  # the store still decodes: discarded policies verify old revisions
    assert b.state.vault.policy.head == a.state.vault.policy.head
    # A peer that still offers the discarded branch is refused, on both sides.
    stale = [
        MAGIC + msgspec.msgpack.encode({"v": 1, "vault": a.state.default_vault, "items": [{"k": "policy", "rec": discarded}]})
    ]
    for device in (a, b):
        rows = device.rows()
        with pytest.raises(MemoriesError) as caught:
            merge(device.service.vault, device.state, stale, peer_device=a.device_pub, actor=device.caller)
        assert caught.value.code == "sync_rejected" and "discarded" in caught.value.message
        assert device.rows() == rows


def test_a_forged_resolution_is_refused(trio: tuple[Device, Device, Device]) -> None:
    a, b, _ = trio
    a.do("vault_rotate")
    b.do("vault_member_add", user="ab" * 32, role="reader")
    with pytest.raises(MemoriesError):
        pull(a, b)
    forks = a.do("vault_forks")["forks"]
    a.do("sudo", password=PASSWORD)
    a.do("vault_fork_resolve", keep=forks[0]["ours"]["head"][:16])
    chunks = bundle_for(a, b)
    obj = msgspec.msgpack.decode(chunks[0][len(MAGIC) :])
    for item in obj["items"]:
        if item["k"] == "resolution":
            sig = item["rec"]["sig"]
            item["rec"]["sig"] = bytes([sig[0] ^ 1]) + sig[1:]
    forged = [MAGIC + msgspec.msgpack.encode(obj), *chunks[1:]]
    rows, head = b.rows(), b.state.vault.policy.head
    with pytest.raises(MemoriesError) as caught:
        merge(b.service.vault, b.state, forged, peer_device=a.device_pub, actor=b.caller)
    assert caught.value.code in ("sync_rejected", "policy_fork")
    assert b.state.vault.policy.head == head and b.rows() >= rows


def _titles(device: Device) -> set[str]:
    return {str(i["title"]) for i in device.do("list")["items"]}


def _found(device: Device, word: str) -> set[str]:
    return {str(r["title"]) for r in device.do("search", query=word, wait_ms=20000)["results"]}


def test_own_offline_writes_are_quarantined_when_an_incoming_policy_revokes_this_device(
    trio: tuple[Device, Device, Device],
) -> None:
    """SY-2 (second half): c edits a shared note and writes a new one while a revokes c; when the
    revoking policy reaches c, c's own writes that a lacks are quarantined locally — out of heads,
    listings and search, also after a lock and unlock — kept for review, and a reapply is refused
    because c may no longer write. The revision a already held stays."""
    a, _, c = trio
    shared = a.put("shared note", "shared zebrafirst body")
    pull(c, a)
    a.do("sudo", password=PASSWORD)
    a.do("device_revoke", device="c")
    c.edit(shared, "shared quokkaoffline edit")
    c.put("offline note", "quokkaoffline body")
    assert _titles(c) == {"shared note", "offline note"} and _found(c, "quokkaoffline")
    report = pull(c, a)
    assert report.policies_added == 1 and report.quarantined == 2
    assert _titles(c) == {"shared note"}
    assert c.do("get", id=shared)["body"] == "shared zebrafirst body"
    assert not _found(c, "quokkaoffline") and _found(c, "zebrafirst") == {"shared note"}
    entries = c.do("quarantine_list")["entries"]
    assert len(entries) == 2
    c.do("lock")
    c.do("unlock", password=PASSWORD)
    assert _titles(c) == {"shared note"} and c.do("get", id=shared)["body"] == "shared zebrafirst body"
    assert len(c.do("quarantine_list")["entries"]) == 2
    c.do("sudo", password=PASSWORD)
    with pytest.raises(MemoriesError) as refused:
        c.do("quarantine_reapply", id=str(entries[0]["id"]))
    assert refused.value.code == "read_only"
    assert _titles(c) == {"shared note"}
