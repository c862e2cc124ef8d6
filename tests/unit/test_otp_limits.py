"""OTP parameters beyond the RFC vectors: a 60-second period, 7 digits, and every range limit (CD-4, CD-5).

The RFC vectors pin 6 and 8 digits with a 30-second period; these tests pin what they leave
open, using RFC 4226 Appendix D's own truncated values (the 7-digit code is the last seven
digits of the "Decimal" column).
"""

from __future__ import annotations

import base64

import pytest

from engine.cards.otp import MAX_COUNTER, hotp, totp, totp_counter
from engine.cards.otpauth import MAX_PERIOD, parse_otpauth
from engine.errors import MemoriesError
from tests.helpers import Cli

KEY = b"12345678901234567890"
SECRET = base64.b32encode(KEY).decode().rstrip("=")
# RFC 4226 Appendix D, "Decimal" column (the 31-bit truncated value) for counters 0..9.
TRUNCATED = [1284755224, 1094287082, 137359152, 1726969429, 1640338314, 868254676, 1918287922, 82162583, 673399871, 645520489]
SEVEN = [str(v % 10**7).zfill(7) for v in TRUNCATED]
# The documented limit (docs/cards.md: imports up to 2^63-2, the code for 2^63-1 is the last),
# pinned by value: a test that imported it from engine.cards.otp would follow a changed limit.
LAST_COUNTER = 2**63 - 1


def test_seven_digit_codes_match_rfc4226_truncation() -> None:
    """CD-5: 7 digits is the truncated value mod 10^7, zero-padded (counter 4 starts with 0)."""
    assert SEVEN[4] == "0338314"
    assert [hotp(KEY, c, digits=7) for c in range(10)] == SEVEN


def test_sixty_second_period_uses_floor_of_time_over_sixty() -> None:
    """CD-5: RFC 6238 T = floor(t / X) with X = 60: the code changes at 60 s, not at 30 s."""
    assert totp_counter(59, 60) == 0 and totp_counter(60, 60) == 1 and totp_counter(119, 60) == 1
    assert totp(KEY, 0, period=60) == totp(KEY, 59, period=60) == hotp(KEY, 0)
    assert totp(KEY, 60, period=60) == totp(KEY, 119, period=60) == hotp(KEY, 1)
    assert totp(KEY, 120, period=60, digits=7) == SEVEN[2]
    assert totp(KEY, 59, period=60) != totp(KEY, 59, period=30)


@pytest.mark.parametrize("digits", [0, 5, 9, 10])
def test_hotp_refuses_digits_outside_six_to_eight(digits: int) -> None:
    """CD-5: 6–8 digits only."""
    with pytest.raises(ValueError, match="digits"):
        hotp(KEY, 0, digits=digits)


def test_hotp_counter_range_is_zero_to_max_counter() -> None:
    """CD-5: the 8-byte counter is kept within 0..2^63-1; both ends work, one past either is refused."""
    assert hotp(KEY, 0) == "755224"
    assert MAX_COUNTER == LAST_COUNTER
    assert len(hotp(KEY, LAST_COUNTER)) == 6
    for counter in (-1, LAST_COUNTER + 1, 2**64):
        with pytest.raises(ValueError, match="counter"):
            hotp(KEY, counter)


@pytest.mark.parametrize("period", [0, -30])
def test_totp_counter_refuses_a_non_positive_period(period: int) -> None:
    with pytest.raises(ValueError, match="period"):
        totp_counter(100, period)


def _uri(kind: str, **params: str | int) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"secret": SECRET, **params}.items())
    return f"otpauth://{kind}/Issuer:me?{query}"


def _refused(uri: str) -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        parse_otpauth(uri)
    assert caught.value.code == "invalid_otpauth" and SECRET not in caught.value.message
    return caught.value


def test_otpauth_digits_bounds() -> None:
    """CD-4: digits 6, 7 and 8 parse; 5 and 9 are refused."""
    assert [parse_otpauth(_uri("totp", digits=d)).digits for d in (6, 7, 8)] == [6, 7, 8]
    for digits in (5, 9):
        _refused(_uri("totp", digits=digits))


def test_otpauth_period_bounds() -> None:
    """CD-4: the period is 1..3600 seconds; 60 is kept as given."""
    assert [parse_otpauth(_uri("totp", period=p)).period for p in (1, 60, MAX_PERIOD)] == [1, 60, 3600]
    for period in (0, MAX_PERIOD + 1):
        _refused(_uri("totp", period=period))


def test_otpauth_counter_bounds() -> None:
    """CD-4: an HOTP counter is 0..2^63-2 (one use must still fit the 8-byte counter)."""
    assert parse_otpauth(_uri("hotp", counter=0)).counter == 0
    assert parse_otpauth(_uri("hotp", counter=LAST_COUNTER - 1)).counter == LAST_COUNTER - 1
    for counter in (LAST_COUNTER, 2**64):
        _refused(_uri("hotp", counter=counter))


def test_sixty_seconds_and_seven_digits_through_the_engine(vault: Cli) -> None:
    """CD-4/CD-5: a TOTP card imported with period=60 and digits=7 gives the RFC-derived codes
    through `memories otp --at`; a 3601 s period is refused and creates nothing."""
    card = vault.ok("protected", "new", "--title", "Sixty", "--otp-stdin", input=_uri("totp", period=60, digits=7) + "\n")
    codes = {at: vault.ok("otp", card["short_id"], "--at", str(at)) for at in (59, 60, 119, 120)}
    assert {at: c["code"] for at, c in codes.items()} == {59: SEVEN[0], 60: SEVEN[1], 119: SEVEN[1], 120: SEVEN[2]}
    assert codes[59]["valid_for"] == 1 and codes[60]["valid_for"] == 60
    assets = vault.ok("status")["assets"]
    error = vault.err("protected", "new", "--title", "Too slow", "--otp-stdin", input=_uri("totp", period=3601) + "\n")
    assert error["code"] == "invalid_otpauth" and SECRET not in error["message"]
    assert vault.ok("status")["assets"] == assets


def test_seven_digit_hotp_through_the_engine(vault: Cli) -> None:
    """CD-5: a 7-digit HOTP card counts from its imported counter."""
    card = vault.ok("protected", "new", "--title", "Seven", "--otp-stdin", input=_uri("hotp", digits=7, counter=3) + "\n")
    assert [vault.ok("otp", card["short_id"])["code"] for _ in range(2)] == SEVEN[3:5]


def test_hotp_counter_at_its_limit_is_refused_typed_and_burns_nothing(vault: Cli) -> None:
    """CD-5/API-8: the highest importable counter gives its code and the last one (2^63-1); the
    next request is a typed error that commits no counter advance (it used to commit 2^63 and
    then fail as `internal`)."""
    card = vault.ok("protected", "new", "--title", "Edge", "--otp-stdin", input=_uri("hotp", counter=LAST_COUNTER - 1) + "\n")
    codes = [vault.ok("otp", card["short_id"]) for _ in range(2)]
    assert [c["counter"] for c in codes] == [LAST_COUNTER - 1, LAST_COUNTER]
    assert [c["code"] for c in codes] == [hotp(KEY, LAST_COUNTER - 1), hotp(KEY, LAST_COUNTER)]
    cred = vault.ok("card", "show", card["id"])["protected"]["credential"].removeprefix("cred:")
    revisions = len(vault.ok("history", cred)["revisions"])
    error = vault.err("otp", card["short_id"])
    assert error["code"] == "invalid_input" and "counter" in error["message"], error
    assert len(vault.ok("history", cred)["revisions"]) == revisions
