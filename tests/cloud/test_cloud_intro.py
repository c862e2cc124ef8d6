"""The cloud introduction parser (engine/cloud/intro.py; PO-3): outside bytes from a bucket anyone
with write access may fill. Every malformed, mis-addressed or mis-signed introduction is a typed
``sync_rejected``; only one whose sender signed it and whose certificate its user signed passes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cloud.intro import INTRO_MAGIC, make_intro, parse_intro
from engine.cloud.objects import device_dir
from engine.crypto.keys import new_identity
from engine.errors import MemoriesError

SENDER = new_identity()
RECEIVER = new_identity()
STRANGER = new_identity()
TO = RECEIVER.device_pub
DIR = device_dir(SENDER.device_pub)


def _good() -> bytes:
    return make_intro(SENDER.device_key, TO, SENDER.certificate, SENDER.certificate_sig)


def test_a_good_introduction_names_its_device_and_user() -> None:
    got = parse_intro(_good(), to=TO, dirname=DIR)
    assert got.device == SENDER.device_pub and got.user == SENDER.user_pub


@pytest.mark.parametrize(
    "data, to, dirname",
    [
        (_good(), STRANGER.device_pub, DIR),  # meant for another device
        (_good(), TO, device_dir(STRANGER.device_pub)),  # moved under another sender's path
        # Signed by another device, claiming the sender's certificate.
        (make_intro(STRANGER.device_key, TO, SENDER.certificate, SENDER.certificate_sig), TO, device_dir(STRANGER.device_pub)),
        # The sender's device, with a certificate its user did not sign.
        (make_intro(SENDER.device_key, TO, SENDER.certificate, STRANGER.certificate_sig), TO, DIR),
        (_good()[:-1] + bytes([_good()[-1] ^ 1]), TO, DIR),  # one bit of the signature flipped
        (INTRO_MAGIC + b"\x00" * 5000, TO, DIR),  # over the size bound
    ],
    # Named, not derived from the (random) keys: pytest-xdist workers must collect the same IDs.
    ids=["another-device", "another-path", "forged-sender", "unsigned-certificate", "flipped-signature", "oversized"],
)
def test_a_wrong_introduction_is_refused(data: bytes, to: bytes, dirname: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_intro(data, to=to, dirname=dirname)
    assert caught.value.code == "sync_rejected"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.booleans())
def test_arbitrary_bytes_are_a_typed_refusal(junk: bytes, magic: bool) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_intro((INTRO_MAGIC if magic else b"") + junk, to=TO, dirname=DIR)
    assert caught.value.code == "sync_rejected"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=len(INTRO_MAGIC), max_value=400), st.integers(min_value=1, max_value=255))
def test_any_one_byte_changed_is_refused(at: int, xor: int) -> None:
    good = bytearray(_good())
    at = at % len(good)
    if at < len(INTRO_MAGIC):
        at = len(INTRO_MAGIC)
    good[at] ^= xor
    with pytest.raises(MemoriesError) as caught:
        parse_intro(bytes(good), to=TO, dirname=DIR)
    assert caught.value.code == "sync_rejected"
