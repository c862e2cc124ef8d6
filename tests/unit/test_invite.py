"""PO-3, ID-6: invitations for another person's vault (engine/vault/invite.py).

The format is versioned (``memories-invite-v1.``), typed and length-checked; every refusal is a
typed ``invite_*`` error that names no key bytes. Property tests feed arbitrary text and
arbitrary byte flips of a valid invitation: the only outcome besides the valid original is
``invite_invalid``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import b64d, b64e, canonical_bytes, domain_bytes
from engine.crypto.keys import new_identity, sign
from engine.errors import MemoriesError
from engine.vault.invite import (
    INVITE_PREFIX,
    INVITE_TAG,
    MAX_DEVICES,
    MAX_LIFETIME_MS,
    PIN_RECORD,
    decode_invite,
    invite_id,
    make_invite,
    parse_fingerprint,
    parse_invite,
    pinned_user,
)
from engine.vault.joining import make_certificate

NOW = 1_800_000_000_000
OWNER = new_identity()
INVITEE = new_identity()
STRANGER = new_identity()
OWNER_FP = hashlib.sha256(OWNER.user_pub).digest()
SECOND = make_certificate(INVITEE.user_key, bytes(SigningKey.generate().verify_key), bytes(PrivateKey.generate().public_key), NOW)


def _devices() -> list[tuple[dict[str, Any], bytes]]:
    return [(INVITEE.certificate, INVITEE.certificate_sig), SECOND]


def _text(**kwargs: Any) -> str:
    return make_invite(INVITEE.user_key, _devices(), "Ben", OWNER_FP, NOW, **kwargs)[1]


def _code(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(MemoriesError) as caught:
        call(*args, **kwargs)
    return caught.value.code


def _resign(body: dict[str, Any], key: SigningKey) -> str:
    sig = sign(key, domain_bytes(INVITE_TAG, 1, body))
    return INVITE_PREFIX + b64e(canonical_bytes({"body": body, "sig": sig}))


def _body(text: str) -> dict[str, Any]:
    from engine.crypto.canonical import decode_canonical

    outer = decode_canonical(b64d(text[len(INVITE_PREFIX) :]))
    assert isinstance(outer, dict)
    return dict(outer["body"])


def test_round_trip_names_the_user_and_every_device() -> None:
    """PO-3: the Owner's device reads back the user, both device certificates and the pin."""
    invite, text = make_invite(INVITEE.user_key, _devices(), "Ben", OWNER_FP, NOW)
    assert text.startswith(INVITE_PREFIX) and "\n" not in text
    parsed = parse_invite(text, owner_pub=OWNER.user_pub, now_ms=NOW + 1)
    assert parsed == invite
    assert parsed.user_pub == INVITEE.user_pub
    assert parsed.device_keys() == [INVITEE.device_pub, bytes(SECOND[0]["device"])]
    assert invite_id(parsed) == hashlib.sha256(parsed.signed_bytes()).digest()


def test_pin_expiry_and_clock_are_checked() -> None:
    """ID-6: an invitation is meant for one Owner; it expires; one from the future is refused."""
    text = _text()
    assert _code(parse_invite, text, owner_pub=STRANGER.user_pub, now_ms=NOW) == "invite_wrong_owner"
    expires = decode_invite(text).expires_ms
    assert _code(parse_invite, text, owner_pub=OWNER.user_pub, now_ms=expires + 1) == "invite_expired"
    assert _code(parse_invite, text, owner_pub=OWNER.user_pub, now_ms=NOW - 10 * 60 * 1000) == "invite_invalid"


def test_forged_and_mismatched_signatures_are_refused() -> None:
    """A body re-signed by another user key, a device certificate of another user, or a swapped
    device key: each is invite_invalid, and the message names no key bytes."""
    text = _text()
    body = _body(text)
    assert _code(decode_invite, _resign(body, STRANGER.user_key)) == "invite_invalid"
    foreign = dict(body, devices=[{"cert": STRANGER.certificate, "sig": STRANGER.certificate_sig}])
    assert _code(decode_invite, _resign(foreign, INVITEE.user_key)) == "invite_invalid"
    swapped = dict(INVITEE.certificate, device=STRANGER.device_pub)
    forged = dict(body, devices=[{"cert": swapped, "sig": INVITEE.certificate_sig}])
    with pytest.raises(MemoriesError) as caught:
        decode_invite(_resign(forged, INVITEE.user_key))
    assert caught.value.code == "invite_invalid"
    assert INVITEE.user_pub.hex() not in caught.value.message and STRANGER.device_pub.hex() not in caught.value.message


def test_malformed_fields_are_refused() -> None:
    """Types and lengths: a wrong version, short keys, a bad nonce, no devices, too many,
    a duplicated device, an over-long lifetime, an oversized text."""
    body = _body(_text())
    cases = [
        dict(body, v=2),
        dict(body, user=body["user"][:31]),
        dict(body, owner=b"x"),
        dict(body, nonce=b"short"),
        dict(body, devices=[]),
        dict(body, devices=[body["devices"][0]] * 2),
        dict(body, devices=[body["devices"][0]] * (MAX_DEVICES + 1)),
        dict(body, expires_ms=body["created_ms"] + MAX_LIFETIME_MS + 1),
        dict(body, name=""),
        dict(body, extra=1),
    ]
    for case in cases:
        assert _code(decode_invite, _resign(case, INVITEE.user_key)) == "invite_invalid", case
    assert _code(decode_invite, INVITE_PREFIX + "A" * 20_000) == "invite_invalid"
    assert _code(decode_invite, "memories-invite-v2." + _text()[len(INVITE_PREFIX) :]) == "invite_invalid"
    assert _code(decode_invite, _text() + "=") == "invite_invalid"


def test_making_refuses_your_own_fingerprint_and_bad_lifetimes() -> None:
    own = hashlib.sha256(INVITEE.user_pub).digest()
    assert _code(make_invite, INVITEE.user_key, _devices(), "Ben", own, NOW) == "invalid_input"
    assert _code(make_invite, INVITEE.user_key, _devices(), "Ben", OWNER_FP, NOW, MAX_LIFETIME_MS + 1) == "invalid_input"
    assert _code(make_invite, INVITEE.user_key, [], "Ben", OWNER_FP, NOW) == "invalid_input"


def test_fingerprints_are_full_only() -> None:
    """ID-4/ID-6: a shortened fingerprint is never accepted; grouped spelling is."""
    full = OWNER_FP.hex()
    assert parse_fingerprint(" ".join(full[i : i + 4] for i in range(0, 64, 4))) == OWNER_FP
    assert _code(parse_fingerprint, full[:12]) == "invalid_input"
    assert _code(parse_fingerprint, full[:-1] + "g") == "invalid_input"


def test_pins_expire() -> None:
    records = {PIN_RECORD: [(1, {"t": PIN_RECORD, "owner": OWNER_FP, "expires_ms": NOW})]}
    assert pinned_user(records, OWNER.user_pub, NOW)
    assert not pinned_user(records, OWNER.user_pub, NOW + 1)
    assert not pinned_user(records, STRANGER.user_pub, NOW)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_is_invite_invalid(text: str) -> None:
    assert _code(decode_invite, INVITE_PREFIX + text) == "invite_invalid"
    assert _code(decode_invite, text) == "invite_invalid"


VALID = _text()


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_any_byte_flip_is_invite_invalid(position: int, flip: int) -> None:
    raw = bytearray(b64d(VALID[len(INVITE_PREFIX) :]))
    raw[position % len(raw)] ^= flip
    assert _code(decode_invite, INVITE_PREFIX + b64e(bytes(raw))) == "invite_invalid"
