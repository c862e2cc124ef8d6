"""OTP primitives and otpauth:// parsing (CD-4, CD-5): RFC vectors, strict validation, fuzzing."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cards.otp import hotp, totp
from engine.cards.otpauth import decode_base32, parse_otpauth
from engine.errors import MemoriesError

RFC4226_KEY = b"12345678901234567890"
RFC4226_CODES = ["755224", "287082", "359152", "969429", "338314", "254676", "287922", "162583", "399871", "520489"]
SEED = {
    "SHA1": b"12345678901234567890",
    "SHA256": b"12345678901234567890123456789012",
    "SHA512": b"1234567890123456789012345678901234567890123456789012345678901234",
}
RFC6238 = [
    (59, "94287082", "46119246", "90693936"),
    (1111111109, "07081804", "68084774", "25091201"),
    (1111111111, "14050471", "67062674", "99943326"),
    (1234567890, "89005924", "91819424", "93441116"),
    (2000000000, "69279037", "90698825", "38618901"),
    (20000000000, "65353130", "77737706", "47863826"),
]
GOOD_SECRET = base64.b32encode(RFC4226_KEY).decode().rstrip("=")


def test_rfc4226_appendix_d_vectors() -> None:
    """CD-5: RFC 4226 Appendix D."""
    assert [hotp(RFC4226_KEY, c) for c in range(10)] == RFC4226_CODES


@pytest.mark.parametrize("row", RFC6238)
def test_rfc6238_appendix_b_vectors(row: tuple[int, str, str, str]) -> None:
    """CD-5: RFC 6238 Appendix B, SHA-1/256/512, 8 digits."""
    at, *codes = row
    for algorithm, code in zip(("SHA1", "SHA256", "SHA512"), codes, strict=True):
        assert totp(SEED[algorithm], at, digits=8, algorithm=algorithm) == code


def test_parse_full_totp_uri() -> None:
    uri = f"otpauth://totp/ACME%20Co:ana@example.com?secret={GOOD_SECRET}&issuer=ACME%20Co&algorithm=SHA256&digits=8&period=60"
    params = parse_otpauth(uri)
    assert (params.kind, params.key, params.algorithm, params.digits, params.period) == ("totp", RFC4226_KEY, "SHA256", 8, 60)
    assert (params.issuer, params.account) == ("ACME Co", "ana@example.com")


def test_parse_hotp_uri_with_counter_and_lowercase_padded_secret() -> None:
    secret = base64.b32encode(RFC4226_KEY).decode().lower()
    params = parse_otpauth(f"otpauth://hotp/Bank:me?secret={secret}&counter=5")
    assert (params.kind, params.counter, params.key) == ("hotp", 5, RFC4226_KEY)


@pytest.mark.parametrize(
    "uri",
    [
        "otpauth://totp/x?secret=ABC!DEFGHIJKLMNOP",  # bad base32 character
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJ1",  # '1' is not base32
        "otpauth://totp/x?secret=GEZDGNBVG",  # impossible length
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&algorithm=MD5",
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&digits=5",
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&digits=9",
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&period=-30",
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&period=0",
        "otpauth://totp/x?issuer=x",  # missing secret
        "https://totp/x?secret=GEZDGNBVGY3TQOJQ",  # wrong scheme
        "otpauth://motp/x?secret=GEZDGNBVGY3TQOJQ",  # unknown type
        "otpauth://hotp/x?secret=GEZDGNBVGY3TQOJQ",  # hotp without counter
        "otpauth://hotp/x?secret=GEZDGNBVGY3TQOJQ&counter=-1",
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&secret=GEZDGNBVGY3TQOJQ",  # duplicate
        "otpauth://totp/A:x?secret=GEZDGNBVGY3TQOJQ&issuer=B",  # issuer mismatch
        "otpauth://totp/x?secret=GEZDGNBV",  # too short a key (5 bytes)
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&evil=1",  # unknown parameter
        "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQGEZDGNBVGB",  # non-zero trailing bits
    ],
)
def test_malformed_uris_get_a_typed_error(uri: str) -> None:
    """CD-4: each malformed otpauth URI is an invalid_otpauth error that never echoes the secret."""
    with pytest.raises(MemoriesError) as caught:
        parse_otpauth(uri)
    assert caught.value.code == "invalid_otpauth"
    assert "GEZDGNBV" not in caught.value.message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_any_text_is_parsed_or_refused_with_invalid_otpauth(text: str) -> None:
    for candidate in (text, "otpauth://totp/" + text, f"otpauth://totp/a?secret={text}"):
        try:
            parse_otpauth(candidate)
        except MemoriesError as exc:
            assert exc.code == "invalid_otpauth"


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=10, max_size=128), st.booleans(), st.booleans())
def test_base32_round_trip(key: bytes, lower: bool, padded: bool) -> None:
    text = base64.b32encode(key).decode()
    text = text if padded else text.rstrip("=")
    assert decode_base32(text.lower() if lower else text) == key


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567=abc 01!", max_size=80))
def test_fuzz_base32_never_crashes(text: str) -> None:
    try:
        key = decode_base32(text)
    except MemoriesError as exc:
        assert exc.code == "invalid_otpauth"
    else:
        assert 10 <= len(key) <= 128
