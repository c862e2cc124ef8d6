"""The readers that decode only part of a record (issue 32: an unlock decodes every revision, a
listing opens a summary per row) give exactly what the whole decoders give, and send anything
else to them: the same values, or the same errors, as before."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.crypto.canonical import canonical_bytes, decode_canonical, decode_canonical_flat, domain_bytes
from engine.crypto.keys import new_identity
from engine.vault.index import AssetIndex
from engine.vault.revision import REVISION_TAG, NewContent, Revision, build_revision, keep_list_fields

EPOCH_KEY = b"\x22" * 32


def _made(body: bytes = b"the body", *, compress: bool = False) -> NewContent:
    return build_revision(
        identity=new_identity(),
        vault_id=b"\x11" * 16,
        policy_head=b"\x44" * 32,
        epoch=3,
        epoch_key=EPOCH_KEY,
        asset_id=b"\x33" * 16,
        kind="memory",
        parents=[b"\x55" * 32, b"\x66" * 32],
        tombstone=False,
        summary={"title": "a title", "tags": ["x"], "meta": {"k": "v"}},
        body=body,
        content_seqs=[1],
        compress=compress,
    )


def _outcome(read: Callable[[], Any]) -> Any:
    try:
        return ("value", read())
    except Exception as exc:  # the same error as before, whatever it is
        return ("error", type(exc))


def _reads(rev: Revision) -> list[Any]:
    names = ("asset_id", "vault_id", "policy_head", "author", "cert", "epoch", "kind", "parents", "tombstone")
    return [_outcome(functools.partial(getattr, rev, name)) for name in names] + [
        _outcome(lambda: rev.created_ms),
        _outcome(lambda: rev.changed_ms),
        _outcome(lambda: rev.item_created_ms),
    ]


def _whole(signed: bytes) -> Revision:
    """The revision as it was made before issue 32's partial reader: from its whole decoded body."""
    return Revision(signed, b"", [1], body=decode_canonical_flat(signed[len(REVISION_TAG) + 2 :]))


def test_a_stored_revision_reads_the_same_fields_as_from_its_whole_body() -> None:
    made = _made()
    rev = Revision(made.revision.signed, made.revision.signature, [1])
    assert _reads(rev) == _reads(_whole(made.revision.signed))
    assert rev.open_summary(EPOCH_KEY) == {"title": "a title", "tags": ["x"], "meta": {"k": "v"}}
    assert rev.open_body(EPOCH_KEY, [chunk for _, chunk in made.content_rows]) == b"the body"


def test_a_compressed_body_revision_reads_its_inflated_length_through_the_partial_reader() -> None:
    """Format 2 (compressed note bodies) beside the partial reader: a stored revision keeps its
    signed body_z, and its body opens inflated, as from its whole decoded body."""
    body = b"a body that deflates well, " * 200
    made = _made(body, compress=True)
    assert made.revision.body_z == len(body)  # this body is stored compressed
    rev = Revision(made.revision.signed, made.revision.signature, [1])
    assert rev.body_z == _whole(made.revision.signed).body_z == len(body)
    assert _reads(rev) == _reads(_whole(made.revision.signed))
    assert rev.open_body(EPOCH_KEY, [chunk for _, chunk in made.content_rows]) == body


def _signed(body: dict[str, Any]) -> bytes:
    return domain_bytes(REVISION_TAG, 1, body)


def _body() -> dict[str, Any]:
    return dict(_made().revision.body)


@pytest.mark.parametrize(
    "change",
    [
        {"epoch": True},  # a bool where an int belongs
        {"epoch": "3"},
        {"kind": 7},
        {"parents": ["not bytes"]},
        {"tombstone": 0},
        {"created_ms": None},
        {"restored_created_ms": "yesterday"},
        {"restored_created_ms": 5, "restored_changed_ms": 6},
        {"extra": {"nested": [1, 2]}},  # what the flat decoder leaves to the general one
        {"vault": "AAAA"},  # a string where tagged bytes belong
    ],
)
def test_an_odd_body_reads_as_the_whole_decode_reads_it(change: dict[str, Any]) -> None:
    signed = _signed({**_body(), **change})
    assert _reads(Revision(signed, b"", [1])) == _reads(_whole(signed))


def test_a_missing_field_fails_when_read_as_before() -> None:
    body = _body()
    del body["kind"]
    rev = Revision(_signed(body), b"", [1])
    assert rev.asset_id == body["asset"]
    with pytest.raises(KeyError):
        _ = rev.kind


def test_a_body_that_is_not_json_fails_as_before() -> None:
    with pytest.raises(ValueError):
        Revision(REVISION_TAG.encode() + b"\x00\x01{not json", b"", [1])


def test_list_fields_are_kept_packed_and_not_for_a_summary_with_secrets() -> None:
    revs = [_made().revision for _ in range(300)]  # more than one blob of them
    assert revs[0].list_fields is None and not revs[0].list_fields_kept
    summaries: list[dict[str, Any]] = [
        {"title": f"标题 {i}", "tags": ["a", str(i)] if i % 3 else [], "meta": {}} for i in range(300)
    ]
    summaries[5] = {"title": "t", "tags": [], "secrets": {"pw": b"\x01" * 16}}
    keep_list_fields(zip(revs, summaries, strict=True))
    for i, rev in enumerate(revs):
        if i == 5:
            assert rev.list_fields is None and not rev.list_fields_kept
        else:
            assert rev.list_fields == (summaries[i]["title"], summaries[i]["tags"]) and rev.list_fields_kept
    keep_list_fields([(revs[0], {"title": "another", "tags": []})])  # kept once: the head's own
    assert revs[0].list_fields == ("标题 0", [])


_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30)
_scalar = st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | _text | st.binary(max_size=40)
_values = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4), max_leaves=20
)


def _former(data: bytes) -> Any:
    """decode_canonical as it was: json with the tagged-bytes hook, floats refused."""
    from engine.crypto.canonical import _decoder

    return _decoder.decode(data.decode("utf-8"))


@given(_values)
@settings(max_examples=300, deadline=None)
def test_decode_canonical_gives_what_the_former_decoder_gave(value: Any) -> None:
    data = canonical_bytes(value)
    assert decode_canonical(data) == _former(data)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',
        b'{"a":"\\u0024b"}',
        b'{"\\u0024b":"AAE"}',  # a tagged value written with an escape
        b'{"a":123456789012345678901234567890}',
        b'{"a":"\\ud800"}',
        b'{"a":NaN}',
        b' {"a":[1,{"b":null}]} ',
    ],
)
def test_decode_canonical_on_odd_text_is_the_former_decoder(data: bytes) -> None:
    assert repr(decode_canonical(data)) == repr(_former(data))


@pytest.mark.parametrize("data", [b'{"a":1.5}', b'{"a":1e5}', b"{not json", b'{"a":"\xff"}'])
def test_decode_canonical_refuses_what_the_former_decoder_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        _former(data)
    with pytest.raises(ValueError):
        decode_canonical(data)


def test_short_ids_are_the_shortest_unique_prefixes() -> None:
    index = AssetIndex()
    ids = [bytes.fromhex(h) for h in ("aaaaaaaaaaaa" + "0" * 20, "aaaaaaaaaaab" + "0" * 20, "b" * 32, "b" * 31 + "c")]
    index._sorted_ids_list = sorted(ids)
    expected = {ids[0]: "aaaaaaaaaaaa", ids[1]: "aaaaaaaaaaab", ids[2]: "b" * 32, ids[3]: "b" * 31 + "c"}
    for asset_id, short in expected.items():
        assert index.short_id(asset_id) == short
    assert json.dumps(index.short_id(b"\x01" * 16)) == json.dumps("01010101")
