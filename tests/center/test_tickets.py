"""The Center ticket codec (CT-1): issue, verify, and refuse everything else with a typed error."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from engine.agents.grants import SCOPES
from engine.center.tickets import (
    TICKET_DOMAIN,
    TICKET_SCOPES,
    Ticket,
    issue_ticket,
    ticket_body,
    verify_ticket,
)
from engine.crypto.canonical import b64e, canonical_bytes
from engine.crypto.keys import sign
from engine.errors import MemoriesError

NOW = 1_800_000_000_000
KEY = SigningKey(bytes(range(32)))
PUB = bytes(KEY.verify_key)


def _body(**over: Any) -> dict[str, Any]:
    body = ticket_body(
        kind="grant",
        ticket_id="0123456789abcdef0123456789abcdef",
        center_public_key=PUB,
        generation=1,
        name="claude-laptop",
        scope="read_write",
        vaults=["team", "团队"],
        issued_ms=NOW - 1000,
        expires_ms=NOW + 60_000,
    )
    body.update(over)
    return body


def _forge(body: dict[str, Any], key: SigningKey = KEY, raw: bytes | None = None) -> str:
    """A ticket signed without issue_ticket's checks, to test what the verifier refuses."""
    data = canonical_bytes(body) if raw is None else raw
    return f"mct1.{b64e(data)}.{b64e(sign(key, TICKET_DOMAIN + data))}"


def _code(text: str, key: bytes = PUB, now: int = NOW) -> str:
    with pytest.raises(MemoriesError) as caught:
        verify_ticket(text, key, now)
    return caught.value.code


def test_ct1_round_trip_gives_typed_frozen_ticket() -> None:
    text = issue_ticket(KEY, _body())
    ticket = verify_ticket(text, PUB, NOW)
    assert isinstance(ticket, Ticket)
    assert ticket.scope == "read_write" and ticket.vaults == ("team", "团队")
    assert ticket.generation == 1 and ticket.kind == "grant" and ticket.device is None
    assert ticket.text == text
    assert ticket.body() == _body()
    with pytest.raises(AttributeError):
        ticket.scope = "allow_all"  # type: ignore[misc]


def test_device_ticket_carries_its_device() -> None:
    device = "ab" * 32
    ticket = verify_ticket(issue_ticket(KEY, _body(kind="device", device=device)), PUB, NOW)
    assert ticket.device == device and ticket.kind == "device"
    with pytest.raises(MemoriesError) as caught:
        issue_ticket(KEY, _body(kind="device"))
    assert caught.value.code == "ticket_invalid"


def test_scopes_match_the_grant_scopes() -> None:
    assert TICKET_SCOPES == SCOPES


@pytest.mark.parametrize("scope", SCOPES)
def test_ct1_every_scope_verifies(scope: str) -> None:
    assert verify_ticket(issue_ticket(KEY, _body(scope=scope)), PUB, NOW).scope == scope


def test_ct1_expired_ticket_refused() -> None:
    text = issue_ticket(KEY, _body())
    assert _code(text, now=NOW + 60_000) == "ticket_expired"
    assert verify_ticket(text, PUB, NOW + 59_999).expires_ms == NOW + 60_000


def test_ct1_forged_by_another_key_refused() -> None:
    other = SigningKey(bytes(range(1, 33)))
    # Signed by another key but naming the pinned Center: the signature check refuses it.
    assert _code(_forge(_body(), key=other)) == "ticket_invalid"
    # A genuine ticket of another Center, checked against our pinned key.
    other_body = ticket_body(
        kind="grant",
        ticket_id="ff" * 16,
        center_public_key=bytes(other.verify_key),
        generation=1,
        name="x",
        scope="read",
        vaults=["team"],
        issued_ms=NOW,
        expires_ms=NOW + 10,
    )
    assert _code(issue_ticket(other, other_body)) == "ticket_invalid"


def test_body_naming_another_center_refused_even_if_signed_by_pinned_key() -> None:
    assert _code(_forge(_body(center="00" * 32))) == "ticket_invalid"
    with pytest.raises(MemoriesError):
        issue_ticket(KEY, _body(center="00" * 32))


def test_tampered_body_refused() -> None:
    text = issue_ticket(KEY, _body(scope="read"))
    prefix, body, sig = text.split(".")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).replace(b'"read"', b'"allow_all"')
    assert _code(f"{prefix}.{b64e(raw)}.{sig}") == "ticket_invalid"


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"v": True},
        {"kind": "admin"},
        {"scope": "everything"},
        {"id": "XYZ"},
        {"id": "0123456789ABCDEF0123456789ABCDEF"},
        {"generation": 0},
        {"generation": "1"},
        {"generation": True},
        {"vaults": []},
        {"vaults": ["a", "a"]},
        {"vaults": "team"},
        {"vaults": [""]},
        {"vaults": ["bad\nname"]},
        {"name": ""},
        {"issued_ms": NOW + 60_000},
        {"expires_ms": -1},
        {"device": "zz"},
        {"extra": 1},
    ],
)
def test_ct1_malformed_signed_bodies_refused(change: dict[str, Any]) -> None:
    assert _code(_forge(_body(**change))) == "ticket_invalid"


def test_missing_field_refused() -> None:
    body = _body()
    del body["expires_ms"]
    assert _code(_forge(body)) == "ticket_invalid"


def test_non_canonical_body_refused() -> None:
    # Same content, other spacing: signed by the right key but not the one byte form.
    raw = canonical_bytes(_body()).replace(b",", b", ")
    assert _code(_forge(_body(), raw=raw)) == "ticket_invalid"
    tagged = canonical_bytes(_body()).replace(b'"claude-laptop"', b'{"$b":"AA"}')
    assert _code(_forge(_body(), raw=tagged)) == "ticket_invalid"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "mct1",
        "mct1..",
        "mct2.e30.AA",
        "mct1.e30",
        "mct1.e30=.AA",
        "mct1.e30.AA.AA",
        "mct1.!!!.AA",
        "x" * 9000,
    ],
)
def test_syntax_errors_refused(text: str) -> None:
    assert _code(text) == "ticket_invalid"


def test_wrong_pinned_key_length_refused() -> None:
    assert _code(issue_ticket(KEY, _body()), key=b"short") == "ticket_invalid"


def test_error_never_echoes_the_ticket() -> None:
    text = issue_ticket(KEY, _body(name="secret-name-xyz"))
    with pytest.raises(MemoriesError) as caught:
        verify_ticket(text, bytes(SigningKey(bytes(32)).verify_key), NOW)
    assert "secret-name-xyz" not in caught.value.message and text[5:25] not in caught.value.message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_gives_typed_error(text: str) -> None:
    assert _code(text) == "ticket_invalid"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_signed_bytes_give_typed_error(raw: bytes) -> None:
    """Any body the pinned key signs but that is not a valid ticket body is ticket_invalid."""
    assert _code(_forge({}, raw=raw)) == "ticket_invalid"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*sorted(_body()), "device", "other"]), _json, max_size=12))
def test_arbitrary_signed_objects_give_typed_error_or_valid_ticket(fields: dict[str, Any]) -> None:
    body = _body() | fields
    try:
        ticket = verify_ticket(_forge(body), PUB, NOW)
    except MemoriesError as exc:
        assert exc.code in ("ticket_invalid", "ticket_expired")
    else:
        assert ticket.body() == body


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=200), st.sampled_from("AZaz09-_.=+/ "))
def test_one_character_change_refused(position: int, char: str) -> None:
    text = issue_ticket(KEY, _body())
    position %= len(text)
    mutated = text[:position] + char + text[position + 1 :]
    if mutated == text:
        return
    assert _code(mutated) == "ticket_invalid"
