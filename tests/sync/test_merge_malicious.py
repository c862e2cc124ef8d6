"""A lying peer at the domain level (SY-1, SY-2, SY-3): each refused bundle is a typed error,
nothing is merged (store rows, DAG view and policy head compared before and after), and the
honest state still syncs afterwards. S2 runs the same attacks over the network.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.crypto.chunks import seal_chunks
from engine.errors import MemoriesError
from engine.sync.bundle import MAGIC
from engine.sync.forks import forks_for
from engine.sync.merge import MAX_CHUNK_BYTES, MAX_CHUNKS, MAX_TOTAL_BYTES, merge
from engine.sync.quarantine import quarantined
from engine.vault.revision import build_revision, build_streamed_revision
from tests.helpers import PASSWORD
from tests.sync.merge_support import Device, bundle_for, first_device, join, pull, sync, view

Items = list[dict[str, Any]]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Device, Device]:
    a = first_device(tmp_path / "a")
    return a, join(a, tmp_path / "b", "b")


def _items(chunks: list[bytes]) -> tuple[bytes, Items]:
    vault = b""
    items: Items = []
    for chunk in chunks:
        obj = msgspec.msgpack.decode(chunk[len(MAGIC) :])
        vault = obj["vault"]
        items.extend(obj["items"])
    return vault, items


def _chunk(vault: bytes, items: Items) -> list[bytes]:
    return [MAGIC + msgspec.msgpack.encode({"v": 1, "vault": vault, "items": items})]


def _snapshot(device: Device) -> tuple[int, dict[str, tuple[str, ...]], bytes, int]:
    state = device.state
    return device.rows(), view(device), state.vault.policy.head, len(state.extra_records.get("peer_audit", []))


def _refused(
    receiver: Device,
    sender: Device,
    chunks: list[bytes],
    code: str,
    *,
    max_chunk_bytes: int = MAX_CHUNK_BYTES,
    max_chunks: int = MAX_CHUNKS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> MemoriesError:
    before = _snapshot(receiver)
    with pytest.raises(MemoriesError) as caught:
        merge(
            receiver.service.vault,
            receiver.state,
            chunks,
            peer_device=sender.device_pub,
            actor=receiver.caller,
            max_chunk_bytes=max_chunk_bytes,
            max_chunks=max_chunks,
            max_total_bytes=max_total_bytes,
        )
    assert caught.value.code == code, caught.value.message
    assert _snapshot(receiver) == before
    return caught.value


def _honest_afterwards(receiver: Device, sender: Device) -> None:
    pull(receiver, sender)
    assert view(receiver) == view(sender)


def _tamper(chunks: list[bytes], change: Callable[[Items], Items]) -> list[bytes]:
    vault, items = _items(chunks)
    return _chunk(vault, change(items))


def test_tampered_ciphertext_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-1: a flipped bit in a content chunk (or in the signed summary) is refused, nothing merged."""
    a, b = pair
    a.put("secret note", "the body")
    chunks = bundle_for(a, b)

    def flip_part(items: Items) -> Items:
        part = next(i for i in items if i["k"] == "part")
        part["data"] = part["data"][:-1] + bytes([part["data"][-1] ^ 1])
        return items

    def flip_signed(items: Items) -> Items:
        rev = next(i for i in items if i["k"] == "rev")
        signed = rev["signed"]
        at = signed.index(b'"summary":[{"$b":"') + len(b'"summary":[{"$b":"') + 5
        swapped = b"B" if signed[at : at + 1] != b"B" else b"C"  # still valid base64 and JSON
        rev["signed"] = signed[:at] + swapped + signed[at + 1 :]
        for item in items:  # a careful liar also renames the content chunks' revision
            if item["k"] == "part" and item["rev"] == sha256(signed).digest():
                item["rev"] = sha256(rev["signed"]).digest()
        return items

    err = _refused(b, a, _tamper(chunks, flip_part), "sync_rejected")
    assert "tampered" in err.message
    _refused(b, a, _tamper(chunks, flip_signed), "sync_rejected")
    _honest_afterwards(b, a)


def test_a_forged_owner_signature_on_a_policy_is_refused(pair: tuple[Device, Device]) -> None:
    """SY-1/PO-1: a policy whose Owner signature does not verify is refused before anything else."""
    a, b = pair
    a.do("vault_rotate")
    chunks = bundle_for(a, b)

    def forge(items: Items) -> Items:
        policy = next(i for i in items if i["k"] == "policy")
        sig = policy["rec"]["sig"]
        policy["rec"]["sig"] = bytes([sig[0] ^ 1]) + sig[1:]
        return items

    err = _refused(b, a, _tamper(chunks, forge), "sync_rejected")
    assert "policy" in err.message
    _honest_afterwards(b, a)
    assert b.state.vault.policy.epoch == 2


def test_a_replayed_old_policy_changes_nothing(pair: tuple[Device, Device]) -> None:
    """Rollback: a peer replaying an older prefix of the history cannot move the head back."""
    a, b = pair
    a.do("vault_rotate")
    pull(b, a)
    head = b.state.vault.policy.head
    replay = _chunk(b.state.default_vault, [{"k": "policy", "rec": p.to_record()} for p in a.state.vault.history[:-1]])
    before = _snapshot(b)
    report = merge(b.service.vault, b.state, replay, peer_device=a.device_pub, actor=b.caller)
    assert report.policies_added == 0 and b.state.vault.policy.head == head and _snapshot(b) == before


def test_a_forked_policy_without_resolution_is_refused_and_recorded(pair: tuple[Device, Device]) -> None:
    """SY-3: two signed branches from one point: policy_fork, nothing merged, the fork kept for review."""
    a, b = pair
    a.do("vault_rotate")
    b.do("vault_member_add", user="ab" * 32, role="reader")
    a.put("after the fork")
    chunks = bundle_for(a, b)
    before = _snapshot(b)
    with pytest.raises(MemoriesError) as caught:
        merge(b.service.vault, b.state, chunks, peer_device=a.device_pub, actor=b.caller)
    assert caught.value.code == "policy_fork", caught.value.message
    assert view(b) == before[1] and b.state.vault.policy.head == before[2]
    assert len(forks_for(b.state, b.state.default_vault)) == 1


def test_a_dropped_revision_in_the_middle_of_a_chain_is_refused(pair: tuple[Device, Device]) -> None:
    a, b = pair
    note = a.put("chain", "1")
    a.edit(note, "2")
    a.edit(note, "3")
    chunks = bundle_for(a, b)

    def drop_middle(items: Items) -> Items:
        revs = [i for i in items if i["k"] == "rev"]
        assert len(revs) == 3
        middle = sha256(revs[1]["signed"]).digest()
        return [i for i in items if i is not revs[1] and not (i["k"] == "part" and i["rev"] == middle)]

    err = _refused(b, a, _tamper(chunks, drop_middle), "sync_rejected")
    assert "parent is missing" in err.message
    _honest_afterwards(b, a)


def test_a_reordered_audit_chain_is_refused(pair: tuple[Device, Device]) -> None:
    a, b = pair
    for i in range(3):
        a.put(f"note {i}")
    chunks = bundle_for(a, b)

    def swap(items: Items) -> Items:
        audits = [n for n, i in enumerate(items) if i["k"] == "audit"]
        assert len(audits) >= 3
        first, second = audits[-2], audits[-1]
        items[first], items[second] = items[second], items[first]
        return items

    def drop(items: Items) -> Items:
        audits = [n for n, i in enumerate(items) if i["k"] == "audit"]
        return [i for n, i in enumerate(items) if n != audits[-2]]

    err = _refused(b, a, _tamper(chunks, swap), "sync_rejected")
    assert "audit chain" in err.message
    _refused(b, a, _tamper(chunks, drop), "sync_rejected")
    _honest_afterwards(b, a)


def test_oversize_and_too_many_chunks_are_refused(pair: tuple[Device, Device]) -> None:
    a, b = pair
    a.put("x")
    chunks = bundle_for(a, b)
    _refused(b, a, chunks, "sync_invalid", max_chunk_bytes=len(chunks[0]) - 1)
    _refused(b, a, chunks + chunks, "sync_invalid", max_chunks=1)
    _refused(b, a, chunks * 3, "sync_invalid", max_total_bytes=len(chunks[0]) * 2)


def test_the_same_revision_twice(pair: tuple[Device, Device]) -> None:
    """Twice in one bundle is malformed; delivered again later it is skipped (idempotent)."""
    a, b = pair
    a.put("once")
    chunks = bundle_for(a, b)
    _refused(b, a, chunks + chunks, "sync_invalid")
    first = merge(b.service.vault, b.state, chunks, peer_device=a.device_pub, actor=b.caller)
    rows = b.rows()
    again = merge(b.service.vault, b.state, chunks, peer_device=a.device_pub, actor=b.caller)
    assert first.revisions_added == 1 and again.revisions_added == 0 and again.audits_added == 0 and b.rows() == rows


def test_a_revoked_device_cannot_push_or_be_relayed(pair: tuple[Device, Device], tmp_path: Path) -> None:
    """SY-2: a revoked device is refused as a peer; its write naming the current policy is refused
    when relayed; its write under the superseded policy relayed by an honest device that had not
    heard of the revocation is quarantined, not applied."""
    a, b = pair
    c = join(a, tmp_path / "c", "c")
    sync(a, b)
    a.do("sudo", password=PASSWORD)
    a.do("device_revoke", device="c")
    late = c.put("written after the revocation")  # c has not heard of it
    _refused(a, c, bundle_for(c, a), "sync_rejected")
    # b has not heard either and accepts c's write from c; a then hears of it through b.
    pull(b, c)
    report = pull(a, b)
    assert report.quarantined == 1 and report.revisions_added == 0
    assert all(not k.startswith(late) for k in view(a))
    assert [q["reason"] for q in quarantined(a.state)] == [
        "written under a superseded policy by a device the current policy no longer authorizes"
    ]
    # c forges a revision naming a's current head policy: refused outright.
    head = a.state.vault
    forged = build_revision(
        identity=c.state.identity,
        vault_id=head.vault_id,
        policy_head=head.policy.head,
        epoch=head.policy.epoch,
        epoch_key=os.urandom(32),
        asset_id=os.urandom(16),
        kind="memory",
        parents=[],
        tombstone=False,
        summary={"title": "forged"},
        body=b"forged",
        content_seqs=[1],
    )
    rev = forged.revision
    bundle = _chunk(
        head.vault_id,
        [
            {"k": "rev", "signed": rev.signed, "sig": rev.signature, "parts": 1},
            {"k": "part", "rev": rev.rev_id, "i": 0, "data": forged.content_rows[0][1]},
        ],
    )
    err = _refused(a, b, bundle, "sync_rejected")
    assert "policy check" in err.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.binary(max_size=300), min_size=1, max_size=3), magic=st.booleans())
def test_arbitrary_bytes_are_sync_invalid(pair: tuple[Device, Device], data: list[bytes], magic: bool) -> None:
    a, b = pair
    chunks = [MAGIC + d if magic else d for d in data]
    before = b.rows()
    with pytest.raises(MemoriesError) as caught:
        merge(b.service.vault, b.state, chunks, peer_device=a.device_pub, actor=b.caller)
    assert caught.value.code == "sync_invalid"
    assert b.rows() == before


# -- revision format 2: compressed bodies (issue 32) -------------------------------------------------


def _format_2_revision(sender: Device, stream: bytes, body_z: int) -> tuple[Any, bytes]:
    """A revision of format 2 by ``sender``, an authorized device, validly signed and sealed under the
    vault's epoch key, whose body chunk holds ``stream`` and which signs ``body_z``."""
    vault = sender.state.vault
    dek, asset = os.urandom(32), os.urandom(16)
    (chunk,) = seal_chunks(dek, stream, asset + b"body")
    rev = build_streamed_revision(
        identity=sender.state.identity,
        vault_id=vault.vault_id,
        policy_head=vault.policy.head,
        epoch=vault.policy.epoch,
        epoch_key=vault.current_key,
        asset_id=asset,
        kind="memory",
        parents=[],
        summary={"title": "compressed"},
        dek=dek,
        body_digests=[sha256(chunk).digest()],
        body_len=len(stream),
        content_seqs=[1],
        body_z=body_z,
    )
    return rev, chunk


@pytest.mark.parametrize(
    ("stream", "body_z", "sentence"),
    [
        # a bomb: 64 KiB of zeros in ~100 bytes, signed as 100 bytes of body
        (zlib.compress(bytes(64 * 1024), 9), 100, "does not authenticate"),
        (zlib.compress(b"the harbor lantern " * 40, 9)[:-4], 19 * 40, "does not authenticate"),
        (zlib.compress(b"the harbor lantern " * 40, 9) + b"more", 19 * 40, "does not authenticate"),
        # a signed length no stream of this size can hold: malformed before anything is opened
        (zlib.compress(b"short", 9), 10**6, "malformed"),
    ],
)
def test_a_compressed_body_that_is_not_its_signed_length_is_refused(
    pair: tuple[Device, Device], stream: bytes, body_z: int, sentence: str
) -> None:
    """SY-1, HI-2 (issue 32): an authorized device's revision of format 2 whose body stream inflates
    past its signed length (a bomb), is cut short, has bytes after it, or signs a length its stream
    cannot hold is refused whole; nothing is merged, and an honest compressed note syncs after."""
    a, b = pair
    rev, chunk = _format_2_revision(b, stream, body_z)
    items = [
        {"k": "rev", "signed": rev.signed, "sig": rev.signature, "parts": 1},
        {"k": "part", "rev": rev.rev_id, "i": 0, "data": chunk},
    ]
    err = _refused(a, b, _chunk(b.state.vault.vault_id, items), "sync_rejected" if sentence != "malformed" else "sync_invalid")
    assert sentence in err.message
    note = b.put("long note", "the harbor lantern at the Kyoto passport office " * 20)
    pull(a, b)
    assert a.do("get", id=note)["body"] == "the harbor lantern at the Kyoto passport office " * 20
