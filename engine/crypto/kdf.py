"""Argon2id password-derived keys with parameters stored in the store header (ST-3)."""

from __future__ import annotations

import hmac
import os
import threading
import time
from dataclasses import dataclass

import nacl.pwhash.argon2id as argon2id

__all__ = ["KdfParams", "derive_key", "calibrate", "DerivationAhead"]

SALT_BYTES = argon2id.SALTBYTES
# 256 MiB makes GPU/ASIC guessing expensive while fitting any desktop.
DEFAULT_MEMLIMIT = 256 * 1024 * 1024
DEFAULT_TARGET_SECONDS = 0.7
MIN_OPSLIMIT = 3


@dataclass(frozen=True)
class KdfParams:
    salt: bytes
    opslimit: int
    memlimit: int
    algorithm: str = "argon2id13"

    def to_dict(self) -> dict[str, object]:
        return {
            "algorithm": self.algorithm,
            "salt": self.salt,
            "opslimit": self.opslimit,
            "memlimit": self.memlimit,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> KdfParams:
        salt, ops, mem, alg = data["salt"], data["opslimit"], data["memlimit"], data["algorithm"]
        if not (isinstance(salt, bytes) and isinstance(ops, int) and isinstance(mem, int)):
            raise ValueError("malformed KDF parameters")
        if alg != "argon2id13" or len(salt) != SALT_BYTES:
            raise ValueError("unsupported KDF parameters")
        return cls(salt=salt, opslimit=ops, memlimit=mem)


def derive_key(password: str, params: KdfParams) -> bytes:
    return bytes(argon2id.kdf(32, password.encode("utf-8"), params.salt, params.opslimit, params.memlimit))


class DerivationAhead:
    """One derivation started before the code that checks it is ready (ST-12).

    An engine that re-executed after a lock loads its modules (seconds of one core on a
    busy machine) while an unlock that arrived meanwhile waits; Argon2id releases the GIL,
    so that unlock's KDF runs on the other core during the load instead of after it. The
    result only says something through :meth:`take`, called by the unlock handler after it
    has taken a password-attempt slot: the attempt budget is spent as for any unlock.
    """

    def __init__(self, password: str, params: KdfParams) -> None:
        self.params = params
        self._password: str | None = password
        self._key: bytes | None = None
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="memories-kdf-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        password = self._password
        if password is None:
            return
        key = derive_key(password, self.params)
        with self._guard:  # a drop meanwhile (a lock) keeps the key from being stored
            if self._password is not None:
                self._key = key

    def take(self, password: str, params: KdfParams) -> bytes | None:
        """The key if it was derived from this password with these parameters; once only."""
        self._thread.join()
        with self._guard:
            started, key = self._password, self._key
        self.drop()
        if started is None or key is None or params != self.params:
            return None
        if not hmac.compare_digest(started.encode("utf-8"), password.encode("utf-8")):
            return None
        return key

    def drop(self) -> None:
        """Forget the password and the key (a lock, or the unlock that used them)."""
        with self._guard:
            self._password = None
            self._key = None


def calibrate(target_seconds: float | None = None) -> KdfParams:
    """Pick Argon2id parameters so one derivation takes about ``target_seconds``.

    ``MEMORIES_KDF_TARGET_MS`` overrides the target (the test suite uses a tiny
    one to stay fast; the chosen parameters are stored in the header, so a weak
    choice is visible and never silent).
    """
    env = os.environ.get("MEMORIES_KDF_TARGET_MS")
    if target_seconds is None:
        target_seconds = int(env) / 1000 if env and env.isdigit() else DEFAULT_TARGET_SECONDS
    salt = os.urandom(SALT_BYTES)
    if target_seconds < 0.1:
        return KdfParams(salt=salt, opslimit=argon2id.OPSLIMIT_MIN, memlimit=8 * 1024 * 1024)
    probe = KdfParams(salt=salt, opslimit=1, memlimit=DEFAULT_MEMLIMIT)
    # The fastest of two probes: a busy machine only ever makes a probe slower, and a
    # slow probe would pick a weaker KDF for the life of the vault.
    per_pass = 1.0
    for _ in range(2):
        started = time.perf_counter()
        derive_key("calibration", probe)
        per_pass = min(per_pass, max(time.perf_counter() - started, 1e-3))
    # Never below 3 passes of 256 MiB (about 0.6 s on the reference 2-core machine).
    opslimit = max(MIN_OPSLIMIT, min(10, round(target_seconds / per_pass)))
    return KdfParams(salt=salt, opslimit=opslimit, memlimit=DEFAULT_MEMLIMIT)
