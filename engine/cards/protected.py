"""Validated input of a protected card: account, env, token, TOTP/HOTP (CD-4).

It produces the three parts written in one commit: the credential's public fields,
its secret payload, and the card's non-secret metadata. Nothing here touches storage.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from engine.cards.otpauth import OtpParams, parse_otpauth
from engine.cards.schema import is_env_name
from engine.errors import MemoriesError

__all__ = ["ProtectedParts", "build_protected", "otp_from_secret"]

CREDENTIAL_TYPE = "protected"
MAX_TOKEN = 16 * 1024


@dataclass(frozen=True)
class ProtectedParts:
    public: dict[str, Any]
    secret: dict[str, Any]
    meta: dict[str, str]
    features: list[str]


def build_protected(
    *,
    account: str | None,
    env: str | None,
    token: str | None,
    totp: str | None,
    hotp: str | None,
) -> ProtectedParts:
    if totp is not None and hotp is not None:
        raise MemoriesError("invalid_input", "A protected card holds either a TOTP or an HOTP secret, not both.")
    if env is not None and not is_env_name(env):
        raise MemoriesError("invalid_input", "--env must be an environment variable name (letters, digits, '_').")
    if env is not None and token is None:
        raise MemoriesError("invalid_input", "--env names the variable a token is exported as; give a token too.")
    if token is not None and not 1 <= len(token) <= MAX_TOKEN:
        raise MemoriesError("invalid_input", f"A token is 1–{MAX_TOKEN} characters.")
    if account is not None and not 1 <= len(account) <= 320:
        raise MemoriesError("invalid_input", "An account is 1–320 characters.")
    otp: OtpParams | None = None
    if totp is not None:
        otp = parse_otpauth(totp, expect="totp")
    elif hotp is not None:
        otp = parse_otpauth(hotp, expect="hotp")
    if token is None and otp is None and account is None:
        raise MemoriesError("invalid_input", "A protected card needs an account, a token, a TOTP or an HOTP secret.")
    public: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    meta: dict[str, str] = {}
    features: list[str] = []
    account = account or (otp.account if otp is not None and otp.account else None)
    if account:
        public["account"] = account
        meta["account"] = account
        features.append("account")
    if token is not None:
        secret["token"] = token
        features.append("token")
        if env is not None:
            public["env"] = env
            meta["env"] = env
    if otp is not None:
        public["otp"] = otp.public()
        secret["otp_key"] = base64.b32encode(otp.key).decode("ascii")
        features.append(otp.kind)
        if otp.issuer:
            meta["issuer"] = otp.issuer
    return ProtectedParts(public=public, secret=secret, meta=meta, features=features)


def otp_from_secret(public: dict[str, Any], secret: dict[str, Any]) -> OtpParams | None:
    """The OTP parameters of a stored credential (public part) with its key (secret part)."""
    info = public.get("otp")
    key_text = secret.get("otp_key")
    if not isinstance(info, dict) or not isinstance(key_text, str):
        return None
    return OtpParams(
        kind=str(info["type"]),
        key=base64.b32decode(key_text),
        algorithm=str(info.get("algorithm", "SHA1")),
        digits=int(info.get("digits", 6)),
        period=int(info.get("period", 30)),
        counter=int(info.get("counter", 0)),
    )
