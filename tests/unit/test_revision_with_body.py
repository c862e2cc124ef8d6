"""A revision decoded once with its signed body (issue 32: a restore reads the body's fields
from one decode instead of decoding the signed bytes again on every read, HI-2)."""

from __future__ import annotations

import pytest

from engine.crypto.aead import AeadError
from engine.crypto.canonical import domain_bytes
from engine.crypto.chunks import ChunkError
from engine.crypto.keys import new_identity
from engine.vault.revision import REVISION_TAG, Revision, build_revision

EPOCH_KEY = b"\x22" * 32


def _made() -> Revision:
    return build_revision(
        identity=new_identity(),
        vault_id=b"\x11" * 16,
        policy_head=b"\x44" * 32,
        epoch=1,
        epoch_key=EPOCH_KEY,
        asset_id=b"\x33" * 16,
        kind="memory",
        parents=[],
        tombstone=False,
        summary={"title": "a title", "tags": ["x"]},
        body=b"the body",
        content_seqs=[1],
    ).revision


def test_with_body_is_the_revision_and_the_body_it_decodes_on_each_read() -> None:
    made = _made()
    rev, body = Revision.with_body(made.signed, made.signature, [7])
    assert body == made.body == rev.body
    assert (rev.rev_id, rev.asset_id, rev.vault_id, rev.kind, rev.body_seqs) == (
        made.rev_id,
        made.asset_id,
        made.vault_id,
        made.kind,
        [7],
    )
    dek = rev.data_key(EPOCH_KEY, body)
    assert dek == rev.data_key(EPOCH_KEY)
    assert rev.open_summary_with(dek, body, keep=False) == {"title": "a title", "tags": ["x"]}
    assert not rev.summary_kept  # keep=False: a restore's original is opened to check it, not kept
    assert rev.open_summary_with(dek, body) == {"title": "a title", "tags": ["x"]}
    assert rev.summary_kept


def test_with_body_refuses_what_the_constructor_refuses() -> None:
    made = _made()
    with pytest.raises(ValueError):
        Revision.with_body(b"memories.policy\x00\x01" + made.signed[len(REVISION_TAG) + 2 :], made.signature, [])
    with pytest.raises(TypeError):
        Revision.with_body(domain_bytes(REVISION_TAG, 1, ["not", "an", "object"]), made.signature, [])


def test_the_data_key_of_a_body_is_authenticated_under_the_revision_s_epoch_key() -> None:
    rev, body = Revision.with_body(_made().signed, b"", [])
    with pytest.raises(ChunkError):
        rev.open_summary_with(b"\x00" * 32, body)
    with pytest.raises(AeadError):
        rev.data_key(b"\x00" * 32, body)
