"""ST-12: the KDF an unlock starts while a re-executed engine loads (engine/crypto/kdf.py).

Its key is handed only to the same password with the same parameters, once, and a drop (a
lock) before or after the derivation leaves nothing to take."""

from __future__ import annotations

import dataclasses
import os

import nacl.pwhash.argon2id as argon2id

from engine.crypto.kdf import SALT_BYTES, DerivationAhead, KdfParams, derive_key

PARAMS = KdfParams(salt=os.urandom(SALT_BYTES), opslimit=argon2id.OPSLIMIT_MIN, memlimit=8 * 1024 * 1024)


def test_the_same_password_and_parameters_get_the_derived_key_once() -> None:
    ahead = DerivationAhead("pässword", PARAMS)
    assert ahead.take("pässword", PARAMS) == derive_key("pässword", PARAMS)
    assert ahead.take("pässword", PARAMS) is None  # used once


def test_another_password_or_other_parameters_get_nothing() -> None:
    assert DerivationAhead("password", PARAMS).take("Password", PARAMS) is None
    assert DerivationAhead("password", PARAMS).take("password ", PARAMS) is None
    other = dataclasses.replace(PARAMS, salt=os.urandom(SALT_BYTES))
    assert DerivationAhead("password", PARAMS).take("password", other) is None


def test_a_drop_leaves_nothing_to_take() -> None:
    ahead = DerivationAhead("password", PARAMS)
    ahead.drop()  # at once: the derivation may still run, its key is not kept
    assert ahead.take("password", PARAMS) is None
    assert ahead._key is None and ahead._password is None
