"""A device whose user was made a Reader, at the domain level (SY-1, SY-2): real Services in
temp homes joined by the real device handlers, bundles made and merged by the real functions.
tests/sync/test_sync_quarantine_agree.py runs the honest case over real daemons; here are the
two things that need hands on a device's keys or on a bundle: a demoted device that lies about
the policy it wrote under, and what a device offers after it quarantined its own writes.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from engine.errors import MemoriesError
from engine.sync.bundle import MAGIC, inventory
from engine.sync.marks import delta_inventory
from engine.sync.merge import merge
from engine.sync.quarantine import quarantined
from engine.vault.revision import build_revision
from tests.helpers import PASSWORD
from tests.sync.merge_support import Device, bundle_for, first_device, join, pull, sync, view

OTHER = "ab" * 32  # another user's ID: the vault is handed to them


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Device, Device]:
    a = first_device(tmp_path / "a")
    return a, join(a, tmp_path / "b", "b")


def _demote(a: Device) -> None:
    """The user hands the vault to another user and steps down to Reader (on A)."""
    a.do("sudo", password=PASSWORD)
    me = a.state.identity.user_pub.hex()
    a.do("vault_member_add", user=OTHER, role="editor")
    a.do("vault_transfer", user=OTHER)
    a.do("vault_member_role", user=me, role="reader")


def _items(chunks: list[bytes]) -> list[dict[str, object]]:
    return [item for chunk in chunks for item in msgspec.msgpack.decode(chunk[len(MAGIC) :])["items"]]


def test_a_readers_write_naming_the_newest_policy_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-2, SY-1: B's device stays authorized when its user becomes a Reader, so B could sign a
    write naming the newest policy (under which no quarantine applies) with the epoch key it
    holds. The receiver refuses it as a write the named policy does not allow; nothing changes."""
    a, b = pair
    sync(a, b)
    _demote(a)
    sync(a, b)
    vault = b.state.vault
    assert vault.policy.head == a.state.vault.policy.head
    forged = build_revision(
        identity=b.state.identity,
        vault_id=vault.vault_id,
        policy_head=vault.policy.head,
        epoch=vault.policy.epoch,
        epoch_key=vault.current_key,
        asset_id=b"\x07" * 16,
        kind="memory",
        parents=[],
        tombstone=False,
        summary={"title": "written as a Reader"},
        body=b"quokka",
        content_seqs=[1],
    )
    rev = forged.revision
    chunk = MAGIC + msgspec.msgpack.encode(
        {
            "v": 1,
            "vault": vault.vault_id,
            "items": [
                {"k": "rev", "signed": rev.signed, "sig": rev.signature, "parts": 1},
                {"k": "part", "rev": rev.rev_id, "i": 0, "data": forged.content_rows[0][1]},
            ],
        }
    )
    rows, before = a.rows(), view(a)
    with pytest.raises(MemoriesError) as caught:
        merge(a.service.vault, a.state, [chunk], peer_device=b.device_pub, actor=a.caller)
    assert caught.value.code == "sync_rejected"
    assert "not allowed to write" in caught.value.message
    assert a.rows() == rows and view(a) == before and quarantined(a.state) == []


def test_a_device_does_not_offer_the_writes_it_quarantined(pair: tuple[Device, Device]) -> None:
    """SY-2: once B has quarantined its offline writes (the newer policy made its user a Reader),
    B neither lists them in its inventory nor puts them in a bundle: A, which knows the same
    policy, would only quarantine them again, and a device that does not know it yet would apply
    what B itself holds back."""
    a, b = pair
    sync(a, b)
    b.put("offline note", "quokkaoffline")
    _demote(a)
    report = pull(b, a)
    assert report.quarantined == 1 and len(b.state.index.hidden) == 1
    [hidden] = b.state.index.hidden
    vault_id = b.state.default_vault
    assert hidden not in inventory(b.service.vault, b.state, vault_id).revision_ids
    assert hidden not in delta_inventory(b.state, vault_id, a.device_pub)[0].revision_ids  # what `/v1/channel` sends
    assert [item for item in _items(bundle_for(b, a)) if item["k"] in ("rev", "part")] == []
