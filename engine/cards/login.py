"""The ``login`` card kind: title, username, URLs, password, optional TOTP, notes (CD-10).

A login card is a protected card: its password, TOTP seed and hidden custom fields live
in ONE credential (a secret-bodied asset) referenced from the card's summary as
``protected`` — exactly like a ``protected`` card (CD-4) — so every existing guard
applies: no generic op resolves it, ``card show`` prints ``cred:…``, and the TOTP is
that credential's OTP secret (``otp_code``/``login copy-otp``). The card's metadata holds
only what may be shown: ``username``, ``urls`` (one per line) and ``x_*`` custom fields.

Nothing here touches storage; :func:`build_login` validates and splits the input.
Error messages name fields, never values.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.cards.otpauth import OtpParams, parse_otpauth
from engine.crypto.canonical import canonical_bytes
from engine.errors import MemoriesError

__all__ = [
    "LOGIN_KIND",
    "LOGIN_CREDENTIAL_TYPE",
    "LOGIN_FIELDS",
    "MAX_URLS",
    "MAX_PASSWORD",
    "MAX_NOTE",
    "MAX_PASSWORD_HISTORY",
    "LoginInput",
    "LoginParts",
    "build_login",
    "login_content_key",
    "custom_field_key",
    "check_url",
]

LOGIN_KIND = "login"
LOGIN_CREDENTIAL_TYPE = "login"
MAX_URLS = 32
MAX_URL = 2000
MAX_PASSWORD = 16 * 1024
MAX_USERNAME = 320
MAX_HIDDEN_FIELDS = 32
MAX_NOTE = 64 * 1024
# 1Password keeps a login's last passwords, Bitwarden its last five, KeePass a configurable
# number of whole entry versions (10 by default): 100 is more than any of them keeps.
MAX_PASSWORD_HISTORY = 100
_FIELD_KEY = re.compile(r"\W+")  # Unicode-aware: "工号" stays "工号"


# A control character other than tab; one regex search instead of a Python loop per character
# (issue 32: every field of every imported login is checked, in the CLI and again in the engine).
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f]")


def _printable(value: str, limit: int) -> bool:
    return 0 < len(value) <= limit and _CONTROL.search(value) is None


def check_url(value: str) -> bool:
    """A URL (or an app identifier such as ``androidapp://…``), never a script scheme."""
    return _printable(value, MAX_URL) and not value.strip().lower().startswith(("javascript:", "data:", "vbscript:"))


def _check_urls(value: str) -> bool:
    urls = value.split("\n")
    return 0 < len(urls) <= MAX_URLS and all(check_url(u) for u in urls)


# key -> (check, description); engine/cards/schema.py turns these into the login schema.
LOGIN_FIELDS: dict[str, tuple[Callable[[str], bool], str]] = {
    "username": (lambda v: _printable(v, MAX_USERNAME), f"a user name (≤{MAX_USERNAME} characters)"),
    "urls": (_check_urls, f"1–{MAX_URLS} URLs, one per line (≤{MAX_URL} characters each, no javascript:/data:)"),
}


def custom_field_key(name: str) -> str:
    """``x_`` + a lower-case slug of an outside field name (letters of any script, digits, ``_``)."""
    slug = _FIELD_KEY.sub("_", name.strip().lower()).strip("_")[:60]
    if not slug:
        slug = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    return "x_" + slug


@dataclass(frozen=True)
class LoginInput:
    """One login as a caller gives it (the CLI, or one entry of an import batch)."""

    title: str
    username: str | None = None
    urls: list[str] = field(default_factory=list)
    password: str | None = None
    totp: str | None = None  # an otpauth://totp URI
    notes: str = ""
    tags: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)  # visible custom fields: name -> value
    hidden: dict[str, str] = field(default_factory=dict)  # protected custom fields: name -> value
    note: str | None = None  # a moved-in secure note's text: protected, copied like a token, never body
    # Earlier passwords from the source app, newest first: (password, when it was set or
    # replaced, as the source says it, or None). Kept as earlier revisions of the login's
    # credential, so they are history, not fields (issue 33).
    password_history: list[tuple[str, str | None]] = field(default_factory=list)
    # Ask for the vault password before every read of its secrets (Bitwarden's re-prompt).
    reprompt: bool = False


@dataclass(frozen=True)
class LoginParts:
    public: dict[str, Any]  # the credential's public part (no secret)
    secret: dict[str, Any]  # the credential's body
    meta: dict[str, str]  # the card's metadata (no secret)
    features: list[str]


def _fail(message: str) -> MemoriesError:
    return MemoriesError("invalid_input", message)


def build_login(login: LoginInput) -> LoginParts:
    """Validate every field and split it into card metadata and credential parts."""
    if not 1 <= len(login.title) <= 1000:
        raise _fail("A login's title is 1–1000 characters.")
    meta: dict[str, str] = {}
    public: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    features: list[str] = []
    if login.username:
        if not _printable(login.username, MAX_USERNAME):
            raise _fail(f"A login's username is 1–{MAX_USERNAME} printable characters.")
        meta["username"] = login.username
        public["account"] = login.username
    urls = [u.strip() for u in login.urls if u.strip()]
    if urls:
        if len(urls) > MAX_URLS:
            raise _fail(f"A login has at most {MAX_URLS} URLs.")
        if not all(check_url(u) for u in urls):
            raise _fail(f"A login's URL is 1–{MAX_URL} printable characters and never javascript: or data:.")
        meta["urls"] = "\n".join(dict.fromkeys(urls))
    if login.password is not None:
        if not 1 <= len(login.password) <= MAX_PASSWORD:
            raise _fail(f"A password is 1–{MAX_PASSWORD} characters.")
        secret["password"] = login.password
        features.append("password")
    otp: OtpParams | None = parse_otpauth(login.totp, expect="totp") if login.totp is not None else None
    if otp is not None:
        public["otp"] = otp.public()
        secret["otp_key"] = base64.b32encode(otp.key).decode("ascii")
        features.append("totp")
    for name, value in login.fields.items():
        key = custom_field_key(name)
        if len(value) > 10_000:
            raise _fail("A custom field's value is at most 10000 characters.")
        if key in meta:
            raise _fail("Two custom fields have the same name.")
        meta[key] = value
    if login.hidden:
        if len(login.hidden) > MAX_HIDDEN_FIELDS:
            raise _fail(f"A login has at most {MAX_HIDDEN_FIELDS} protected custom fields.")
        if any(not name or len(name) > 200 or len(value) > MAX_PASSWORD for name, value in login.hidden.items()):
            raise _fail("A protected custom field has a 1–200 character name and a value of at most 16 KiB.")
        secret["fields"] = dict(sorted(login.hidden.items()))
        public["fields"] = sorted(login.hidden)
        features.append("fields")
    if login.note is not None:
        if not 1 <= len(login.note) <= MAX_NOTE:
            raise _fail(f"A secure note's text is 1–{MAX_NOTE} characters.")
        secret["token"] = login.note  # "token": what `memories copy CARD` copies
        features.append("note")
    if login.reprompt:
        public["reprompt"] = True
        features.append("reprompt")
    if len(login.password_history) > MAX_PASSWORD_HISTORY:
        raise _fail(f"A login keeps at most {MAX_PASSWORD_HISTORY} earlier passwords.")
    if any(not 1 <= len(old) <= MAX_PASSWORD for old, _ in login.password_history):
        raise _fail(f"An earlier password is 1–{MAX_PASSWORD} characters.")
    if len(meta) > 64:
        raise _fail("A login has at most 64 metadata fields (username, URLs and custom fields).")
    if not features and "username" not in meta:
        raise _fail("A login needs a username, a password or a TOTP secret.")
    return LoginParts(public=public, secret=secret, meta=meta, features=features)


def login_content_key(login: LoginInput) -> str:
    """Same non-secret fields and same secrets → same key: re-importing adds nothing (IM-1).

    The secrets enter only as a SHA-256 digest, and the key itself is a digest again, so
    it is safe to keep in the card's (encrypted) summary.
    """
    secrets: dict[str, Any] = {"password": login.password, "totp": login.totp, "hidden": dict(sorted(login.hidden.items()))}
    if login.note is not None:
        secrets["note"] = login.note  # only when present: the keys of earlier imports stay the same
    material = {
        "kind": LOGIN_KIND,
        "title": login.title,
        "username": login.username,
        "urls": list(login.urls),
        "notes": login.notes,
        "tags": sorted(set(login.tags)),
        "fields": dict(sorted(login.fields.items())),
        "secret": hashlib.sha256(canonical_bytes(secrets)).hexdigest(),
    }
    return "login:" + hashlib.sha256(canonical_bytes(material)).hexdigest()


def login_field(secret: dict[str, Any], name: str) -> str | None:
    """A login's protected custom field by name (IM-2): the exact name, else the one name equal ignoring case.

    Two names that differ only in case are both stored (an import keeps them apart with a
    suffix), so ignoring case never has to choose between them.
    """
    fields = secret.get("fields")
    if not isinstance(fields, dict):
        return None
    value = fields.get(name)
    if value is None:
        folded = [v for k, v in fields.items() if isinstance(k, str) and k.casefold() == name.casefold()]
        value = folded[0] if len(folded) == 1 else None
    return value if isinstance(value, str) and value else None
