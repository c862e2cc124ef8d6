"""ID-3, ID-4, ID-5: join requests and approvals (engine/vault/joining.py; formats in docs/formats.md)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import b64d, b64e, canonical_bytes, domain_bytes
from engine.crypto.envelope import seal_envelope
from engine.crypto.keys import DeviceIdentity, new_identity
from engine.errors import MemoriesError
from engine.vault.joining import (
    APPROVAL_PREFIX,
    CLOCK_SKEW_MS,
    DEFAULT_LIFETIME_MS,
    MAX_LIFETIME_MS,
    REQUEST_PREFIX,
    JoinRequest,
    decode_request,
    make_approval,
    make_certificate,
    make_request,
    open_approval,
    parse_request,
    request_fingerprint,
    request_id,
    request_text,
)

NOW = 1_800_000_000_000
APPROVER = new_identity()
STRANGER = new_identity()  # a device of someone else: not the pinned approver
NEW_DEVICE = SigningKey.generate()
NEW_EXCHANGE = PrivateKey.generate()
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def _request(name: str = "laptop", **kwargs: Any) -> tuple[JoinRequest, str]:
    return make_request(NEW_DEVICE, NEW_EXCHANGE, name, APPROVER.device_pub, NOW, **kwargs)


def _grant(req: JoinRequest) -> dict[str, Any]:
    cert, sig = make_certificate(APPROVER.user_key, req.device_pub, req.exchange_pub, NOW)
    return {
        "user_sk": bytes(APPROVER.user_key),
        "certificate": cert,
        "certificate_sig": sig,
        "vaults": [{"vault_id": bytes(16), "name": "personal", "epoch_keys": [{"epoch": 1, "key": bytes(range(32))}]}],
    }


def _code(call: Any, *args: Any, **kwargs: Any) -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        call(*args, **kwargs)
    return caught.value


def _open(text: str, pending: JoinRequest, now: int = NOW) -> dict[str, Any]:
    return open_approval(text, device_key=NEW_DEVICE, exchange_key=NEW_EXCHANGE, pending=pending, now_ms=now)


def _forge_request(signer: SigningKey = NEW_DEVICE, **overrides: Any) -> str:
    """A request text with any body, validly signed by `signer` (to test the checks behind the signature)."""
    body: dict[str, Any] = {
        "v": 1,
        "device": bytes(NEW_DEVICE.verify_key),
        "exchange": bytes(NEW_EXCHANGE.public_key),
        "name": "laptop",
        "approver": APPROVER.device_pub,
        "created_ms": NOW,
        "expires_ms": NOW + DEFAULT_LIFETIME_MS,
        "nonce": bytes(16),
    }
    body.update(overrides)
    body = {k: v for k, v in body.items() if v is not ...}
    sig = signer.sign(domain_bytes("memories.join-request", 1, body)).signature
    return REQUEST_PREFIX + b64e(canonical_bytes({"body": body, "sig": sig}))


def _seal_approval(sender: SigningKey, payload: Any, purpose: str = "join-approval") -> str:
    raw = payload if isinstance(payload, bytes) else canonical_bytes(payload)
    return APPROVAL_PREFIX + b64e(seal_envelope(sender, bytes(NEW_EXCHANGE.public_key), raw, purpose=purpose))


def test_round_trip_request_approval_open() -> None:
    """ID-3, ID-5: request → parse on the approver → approval → open on the new device gives the grant,
    and the user key it carries certifies the new device."""
    req, text = _request()
    assert text.startswith(REQUEST_PREFIX) and "\n" not in text and text.isascii()
    assert req.expires_ms - req.created_ms == DEFAULT_LIFETIME_MS == 15 * 60 * 1000
    parsed = parse_request(text, approver_pub=APPROVER.device_pub, now_ms=NOW)
    assert parsed == req and request_text(parsed) == text
    assert parse_request("  " + text + "\n", approver_pub=APPROVER.device_pub, now_ms=NOW) == req  # pasted with spaces

    grant = _grant(parsed)
    approval = make_approval(APPROVER, parsed, grant, NOW + 1000)
    assert approval.startswith(APPROVAL_PREFIX) and "\n" not in approval and approval.isascii()
    assert _open(approval, req, NOW + 2000) == grant

    joined = DeviceIdentity(
        user_key=SigningKey(grant["user_sk"]),
        device_key=NEW_DEVICE,
        exchange_key=NEW_EXCHANGE,
        certificate=grant["certificate"],
        certificate_sig=grant["certificate_sig"],
    )
    joined.verify_certificate()
    assert joined.user_pub == APPROVER.user_pub and joined.certificate["exchange"] == req.exchange_pub


def test_user_key_travels_only_encrypted() -> None:
    """ID-5: the user's signing key is inside the recipient-encrypted envelope, never in clear in the approval."""
    req, _ = _request()
    user_sk = bytes(APPROVER.user_key)
    approval = make_approval(APPROVER, req, _grant(req), NOW)
    raw = b64d(approval[len(APPROVAL_PREFIX) :])
    assert user_sk not in raw and b64e(user_sk) not in approval and b64e(user_sk).encode() not in raw
    # Only the requesting device's exchange key opens it.
    other_exchange = PrivateKey.generate()
    error = _code(open_approval, approval, device_key=NEW_DEVICE, exchange_key=other_exchange, pending=req, now_ms=NOW)
    assert error.code == "join_approval_invalid"


def test_fingerprint_is_full_sha256() -> None:
    """ID-4: the fingerprint shown before approval is the full SHA-256 (64 hex digits) of the new device key."""
    req, _ = _request()
    fp = request_fingerprint(req)
    assert len(fp) == 64 and int(fp, 16) >= 0
    assert fp == hashlib.sha256(bytes(NEW_DEVICE.verify_key)).hexdigest()


def test_expired_request_is_refused() -> None:
    """ID-3: a request is refused after its expiry (and accepted up to it)."""
    req, text = _request(lifetime_ms=60_000)
    assert parse_request(text, approver_pub=APPROVER.device_pub, now_ms=req.expires_ms) == req
    assert _code(parse_request, text, approver_pub=APPROVER.device_pub, now_ms=req.expires_ms + 1).code == "join_request_expired"
    assert _code(make_approval, APPROVER, req, {}, req.expires_ms + 1).code == "join_request_expired"


def test_request_from_the_future_is_refused_beyond_skew() -> None:
    """ID-3: a request created more than 5 minutes ahead of the approver's clock is refused."""
    req, text = _request()
    assert parse_request(text, approver_pub=APPROVER.device_pub, now_ms=NOW - CLOCK_SKEW_MS) == req
    error = _code(parse_request, text, approver_pub=APPROVER.device_pub, now_ms=NOW - CLOCK_SKEW_MS - 1)
    assert error.code == "join_request_invalid"


def test_lifetime_limits() -> None:
    """ID-3: a request lives at most 24 hours; longer is refused when made and when parsed (even if signed)."""
    req, _ = _request(lifetime_ms=MAX_LIFETIME_MS)
    assert req.expires_ms - req.created_ms == MAX_LIFETIME_MS
    for lifetime in (0, -1, MAX_LIFETIME_MS + 1):
        assert _code(_request, lifetime_ms=lifetime).code == "invalid_input"
    long_lived = _forge_request(expires_ms=NOW + MAX_LIFETIME_MS + 1)
    assert _code(parse_request, long_lived, approver_pub=APPROVER.device_pub, now_ms=NOW).code == "join_request_invalid"


def test_request_for_a_different_approver_is_refused() -> None:
    """ID-3: the request pins the approving device key; any other device refuses it without echoing keys."""
    req, text = _request()
    error = _code(parse_request, text, approver_pub=STRANGER.device_pub, now_ms=NOW)
    assert error.code == "join_wrong_approver"
    for key in (APPROVER.device_pub, STRANGER.device_pub):
        assert key.hex() not in error.message and b64e(key) not in error.message
    assert _code(make_approval, STRANGER, req, {}, NOW).code == "join_wrong_approver"


def test_every_changed_character_of_a_request_is_refused() -> None:
    """ID-3: changing any one character of the request text (prefix, payload, signature) is refused."""
    _, text = _request(name="a")
    for index, char in enumerate(text):
        for replacement in {chr(ord(char) ^ 1), "A", "g", "-", "_"} - {char}:
            changed = text[:index] + replacement + text[index + 1 :]
            error = _code(parse_request, changed, approver_pub=APPROVER.device_pub, now_ms=NOW)
            assert error.code == "join_request_invalid", (index, replacement)
    for length in range(len(text)):
        assert _code(parse_request, text[:length], approver_pub=APPROVER.device_pub, now_ms=NOW).code == "join_request_invalid"


def test_request_signed_by_another_key_is_refused() -> None:
    """ID-3: the request must be signed by the device key it names."""
    forged = _forge_request(signer=SigningKey.generate())
    assert _code(decode_request, forged).code == "join_request_invalid"
    assert decode_request(_forge_request()).device_pub == bytes(NEW_DEVICE.verify_key)


@pytest.mark.parametrize(
    "overrides",
    [
        {"v": 2},
        {"v": True},
        {"extra": 1},
        {"nonce": ...},
        {"name": ""},
        {"name": " "},
        {"name": "x" * 65},
        {"name": "two\nlines"},
        {"name": "rtl\u202eoverride"},
        {"name": 7},
        {"exchange": bytes(32)},  # a low-order X25519 point
        {"exchange": bytes(31)},
        {"approver": bytes(NEW_DEVICE.verify_key)},  # approving itself
        {"created_ms": -1},
        {"created_ms": True},
        {"expires_ms": NOW},
        {"nonce": bytes(15)},
    ],
)
def test_signed_but_malformed_requests_are_refused(overrides: dict[str, Any]) -> None:
    """ID-3: a correctly signed request with a malformed field is still refused with join_request_invalid."""
    assert _code(decode_request, _forge_request(**overrides)).code == "join_request_invalid"


def test_bad_names_are_refused_when_making() -> None:
    """ID-3: the device name is 1-64 printable characters."""
    assert _request(name="x" * 64)[0].device_name == "x" * 64
    assert _request(name="Jo's 笔记本")[0].device_name == "Jo's 笔记本"
    for name in ("", "   ", "x" * 65, "tab\there", "\x1b[31m", "a\u202eb"):
        assert _code(_request, name=name).code == "invalid_input"
    assert _code(make_request, NEW_DEVICE, NEW_EXCHANGE, "self", bytes(NEW_DEVICE.verify_key), NOW).code == "invalid_input"


def test_replay_is_refused_by_request_id() -> None:
    """ID-3: request_id is stable for a request, differs between requests, and a consumed ID is refused."""
    req, text = _request()
    rid = request_id(req)
    assert rid == request_id(decode_request(text)) == hashlib.sha256(req.signed_bytes()).digest()
    assert len(rid) == 32
    again, _ = _request()
    assert request_id(again) != rid  # the nonce makes every request distinct
    assert parse_request(text, approver_pub=APPROVER.device_pub, now_ms=NOW, consumed={request_id(again)}) == req
    error = _code(parse_request, text, approver_pub=APPROVER.device_pub, now_ms=NOW, consumed={rid})
    assert error.code == "join_request_used"


def test_approval_for_a_different_request_is_refused() -> None:
    """ID-3: an approval is bound to one request ID; it does not open against another pending request."""
    first, _ = _request()
    second, _ = _request()
    approval = make_approval(APPROVER, first, {"ok": 1}, NOW)
    assert _open(approval, first) == {"ok": 1}
    error = _code(_open, approval, second)
    assert error.code == "join_approval_invalid" and "different join request" in error.message


def test_approval_from_a_device_other_than_the_pinned_one_is_refused() -> None:
    """ID-3, ID-5: only the pinned approving device's signature is accepted, even with a correct payload."""
    req, _ = _request()
    payload = {
        "v": 1,
        "request_id": request_id(req),
        "grant": {"user_sk": bytes(32)},
        "issued_ms": NOW,
        "expires_ms": NOW + 60_000,
    }
    assert _open(_seal_approval(APPROVER.device_key, payload), req) == {"user_sk": bytes(32)}
    error = _code(_open, _seal_approval(STRANGER.device_key, payload), req)
    assert error.code == "join_approval_invalid" and "pinned" in error.message


def test_approval_sealed_for_another_purpose_is_refused() -> None:
    """ID-2, ID-3: an envelope from the pinned approver for another purpose is not an approval."""
    req, _ = _request()
    payload = {"v": 1, "request_id": request_id(req), "grant": {}, "issued_ms": NOW, "expires_ms": NOW + 60_000}
    for purpose in ("sync", "epoch-key", "join-approval2"):
        assert _code(_open, _seal_approval(APPROVER.device_key, payload, purpose), req).code == "join_approval_invalid"


def test_expired_approval_is_refused() -> None:
    """ID-3: an approval is refused after its expiry and accepted up to it."""
    req, _ = _request()
    approval = make_approval(APPROVER, req, {}, NOW, lifetime_ms=10_000)
    assert _open(approval, req, NOW + 10_000) == {}
    assert _code(_open, approval, req, NOW + 10_001).code == "join_approval_expired"
    future = make_approval(APPROVER, req, {}, NOW + CLOCK_SKEW_MS + 1)
    assert _code(_open, future, req, NOW).code == "join_approval_invalid"


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"v":1}',
        b'{"expires_ms":2,"grant":{},"issued_ms":1,"request_id":{"$b":"AA"},"v":1} ',
        {"v": 2, "grant": {}, "issued_ms": NOW, "expires_ms": NOW + 1},
        {"v": 1, "request_id": "text", "grant": {}, "issued_ms": NOW, "expires_ms": NOW + 1},
        {"v": 1, "grant": [], "issued_ms": NOW, "expires_ms": NOW + 1},
        {"v": 1, "grant": {}, "issued_ms": NOW, "expires_ms": NOW},
        {"v": 1, "grant": {}, "issued_ms": NOW, "expires_ms": NOW + MAX_LIFETIME_MS + 1},
        {"v": 1, "grant": {}, "issued_ms": NOW, "expires_ms": NOW + 1, "extra": 0},
    ],
)
def test_malformed_approval_payloads_are_refused(payload: Any) -> None:
    """ID-3: an authentic envelope from the pinned approver with a malformed payload is still refused."""
    req, _ = _request()
    if isinstance(payload, dict) and "request_id" not in payload and payload.get("v") != 2:
        payload = {**payload, "request_id": request_id(req)}
    assert _code(_open, _seal_approval(APPROVER.device_key, payload), req).code == "join_approval_invalid"


def test_every_changed_character_of_an_approval_is_refused() -> None:
    """ID-3: changing any one character of the approval text, or cutting it short, is refused."""
    req, _ = _request()
    approval = make_approval(APPROVER, req, {"k": 1}, NOW)
    for index, char in enumerate(approval):
        replacement = "A" if char != "A" else "B"
        for changed_char in {replacement, chr(ord(char) ^ 1)}:
            changed = approval[:index] + changed_char + approval[index + 1 :]
            assert _code(_open, changed, req).code == "join_approval_invalid", index
    for length in range(len(approval)):
        assert _code(_open, approval[:length], req).code == "join_approval_invalid"


def test_approval_for_a_pending_request_of_another_device_is_refused() -> None:
    """ID-3: open_approval refuses a pending request that is not this device's own."""
    req, _ = _request()
    approval = make_approval(APPROVER, req, {}, NOW)
    other = SigningKey.generate()
    error = _code(open_approval, approval, device_key=other, exchange_key=NEW_EXCHANGE, pending=req, now_ms=NOW)
    assert error.code == "join_approval_invalid"


def test_make_certificate_verifies_under_the_user_key() -> None:
    """ID-1, ID-5: the certificate helper signs the documented certificate body with the user key."""
    device, exchange = SigningKey.generate(), PrivateKey.generate()
    cert, sig = make_certificate(APPROVER.user_key, bytes(device.verify_key), bytes(exchange.public_key), NOW)
    assert cert == {
        "v": 1,
        "user": APPROVER.user_pub,
        "device": bytes(device.verify_key),
        "exchange": bytes(exchange.public_key),
        "created_ms": NOW,
    }
    APPROVER.user_key.verify_key.verify(domain_bytes("memories.device-cert", 1, cert), sig)
    assert _code(make_certificate, APPROVER.user_key, b"short", bytes(32), NOW).code == "invalid_input"


JOIN_CODES = {"join_request_invalid", "join_request_expired", "join_wrong_approver", "join_request_used"}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_request_text_gives_a_typed_error(text: str) -> None:
    """ID-3: any string is refused with a join_* code; nothing else escapes."""
    assert _code(parse_request, text, approver_pub=APPROVER.device_pub, now_ms=NOW).code in JOIN_CODES
    assert _code(parse_request, REQUEST_PREFIX + text, approver_pub=APPROVER.device_pub, now_ms=NOW).code in JOIN_CODES


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_request_bytes_give_a_typed_error(raw: bytes) -> None:
    """ID-3: a well-formed prefix over any bytes is refused with join_request_invalid."""
    error = _code(parse_request, REQUEST_PREFIX + b64e(raw), approver_pub=APPROVER.device_pub, now_ms=NOW)
    assert error.code == "join_request_invalid"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.binary(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["v", "device", "exchange", "name", "approver", "created_ms", "expires_ms", "nonce"]), _json_values
    )
)
def test_signed_request_bodies_with_arbitrary_fields_give_a_typed_error(fields: dict[str, Any]) -> None:
    """ID-3: even a validly signed body with arbitrary field values never raises anything but a join_* error."""
    text = _forge_request(**fields)
    try:
        req = parse_request(text, approver_pub=APPROVER.device_pub, now_ms=NOW)
    except MemoriesError as error:
        assert error.code in JOIN_CODES
    else:  # only a body that is still a valid request parses
        assert request_text(req) == text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.binary(max_size=300))
def test_arbitrary_approval_text_gives_a_typed_error(text: str, raw: bytes) -> None:
    """ID-3: any approval string, or any bytes behind the prefix, is refused with join_approval_invalid."""
    req, _ = _request()
    assert _code(_open, text, req).code == "join_approval_invalid"
    assert _code(_open, APPROVAL_PREFIX + b64e(raw), req).code == "join_approval_invalid"
    assert _code(_open, APPROVAL_PREFIX + b64e(b"MEMENV\x01" + raw), req).code == "join_approval_invalid"


@settings(max_examples=100, deadline=None)
@given(_json_values)
def test_arbitrary_authentic_approval_payloads_give_a_typed_error_or_a_grant(value: Any) -> None:
    """ID-3: whatever the pinned approver seals, open_approval returns a dict grant or a join_approval_* error."""
    req, _ = _request()
    try:
        grant = _open(_seal_approval(APPROVER.device_key, value), req)
    except MemoriesError as error:
        assert error.code in {"join_approval_invalid", "join_approval_expired"}
    else:
        assert isinstance(grant, dict)
