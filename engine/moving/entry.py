"""The neutral entry every moving-in parser produces, and the checks all entries pass first."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.cards.login import MAX_NOTE, MAX_PASSWORD, LoginInput, build_login
from engine.cards.otpauth import parse_otpauth
from engine.cards.schema import validate_meta
from engine.errors import MemoriesError

__all__ = [
    "Entry",
    "Loaded",
    "MAX_FILE_BYTES",
    "check_all",
    "fail",
    "guarded",
    "normalise_totp",
    "wire",
]

MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_TITLE = 1000
MAX_TAG = 100
MAX_TAGS = 64
_B32ISH = re.compile(r"^[A-Za-z2-7=\s]{16,}$")


@dataclass
class Entry:
    """One login from an outside export, before any check."""

    where: str  # "entry 3" or "entry 3 (Internet/邮箱)": its place in the file, for errors
    title: str
    username: str | None = None
    urls: list[str] = field(default_factory=list)
    password: str | None = None
    totp: str | None = None  # an otpauth://totp URI (normalise_totp makes one)
    notes: str = ""
    tags: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    hidden: dict[str, str] = field(default_factory=dict)
    attachments: list[str] = field(default_factory=list)  # names only: listed as skipped
    # A secure note (Bitwarden type 2, 1Password "003", a notes-only KeePass entry): its text
    # goes here, never in ``notes``, so it is kept as a protected secret and not as a body.
    note: str | None = None


@dataclass
class Loaded:
    entries: list[Entry]
    skipped: list[str]  # one sentence each: attachments, non-login items, …
    source: str  # "keepassxc", "bitwarden", "1password"


def fail(where: str, message: str) -> MemoriesError:
    return MemoriesError("invalid_input", f"{where}: {message} Nothing was imported.")


@contextmanager
def guarded(where: str | Callable[[], str]) -> Iterator[None]:
    """Any structural surprise inside becomes a typed error naming the current entry.

    ``where`` is the entry's name, or a callable giving it when the parser moves on while
    inside (a streaming parse names the entry it reached, not the one it started at).
    """
    try:
        yield
    except MemoriesError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError, UnicodeError) as exc:
        name = where if isinstance(where, str) else where()
        raise fail(name, f"the export is malformed here ({exc.__class__.__name__}).") from None


T = TypeVar("T")


def typed(value: Any, kind: type[T], where: str, what: str) -> T:
    if not isinstance(value, kind):
        raise fail(where, f"{what} is not a {kind.__name__}.")
    return value


def opt_text(value: Any, where: str, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    text = typed(value, str, where, what)
    return text if text != "" else None


def normalise_totp(value: str, entry: Entry) -> None:
    """Put a TOTP given as an otpauth URI or a bare base32 seed on the entry; others become hidden fields."""
    text = value.strip()
    if not text:
        return
    lower = text.lower()
    if lower.startswith("otpauth://totp/") or lower.startswith("otpauth://totp?"):
        if "encoder=steam" in lower:
            entry.hidden["TOTP (Steam)"] = text
            return
        try:
            parse_otpauth(text, expect="totp")
        except MemoriesError as exc:
            raise fail(entry.where, f"its TOTP is not usable: {exc.message}") from None
        entry.totp = text
        return
    if lower.startswith(("otpauth://hotp", "steam://")):
        entry.hidden["HOTP" if lower.startswith("otpauth://hotp") else "TOTP (Steam)"] = text
        return
    if _B32ISH.match(text):
        uri = "otpauth://totp/?secret=" + "".join(text.split()).upper().rstrip("=")
        try:
            parse_otpauth(uri, expect="totp")
        except MemoriesError as exc:
            raise fail(entry.where, f"its TOTP seed is not usable: {exc.message}") from None
        entry.totp = uri
        return
    raise fail(entry.where, "its TOTP is neither an otpauth:// URI nor a base32 seed.")


def _tidy(entry: Entry) -> LoginInput:
    """Bring outside values into our limits where that loses nothing secret; refuse the rest."""
    title = " ".join(entry.title.split()) or entry.username or (entry.urls[0] if entry.urls else "") or "Untitled"
    tags = list(dict.fromkeys(t.strip()[:MAX_TAG] for t in entry.tags if t.strip()))[:MAX_TAGS]
    if entry.password is not None and len(entry.password) > MAX_PASSWORD:
        raise fail(entry.where, f"its password is longer than {MAX_PASSWORD} characters.")
    if entry.note is not None and len(entry.note) > MAX_NOTE:
        raise fail(entry.where, f"its secure note is longer than {MAX_NOTE} characters.")
    fields = {name.strip()[:200] or "field": value for name, value in entry.fields.items() if value != ""}
    hidden = {name.strip()[:200] or "field": value for name, value in entry.hidden.items() if value != ""}
    return LoginInput(
        title=title[:MAX_TITLE],
        username=(entry.username or None) and entry.username[:320],
        urls=[u.strip() for u in entry.urls if u.strip()],
        password=entry.password or None,
        totp=entry.totp,
        notes=entry.notes,
        tags=tags,
        fields=fields,
        hidden=hidden,
        note=entry.note or None,
    )


def check_all(loaded: Loaded) -> tuple[list[tuple[LoginInput, str]], list[str]]:
    """Every entry as a checked login with its place (in order), and the sentences of what is skipped.

    An entry with nothing to keep (no username, password or TOTP) is listed as skipped; an
    entry that breaks a limit is an error naming it, and then nothing is imported.
    """
    logins: list[tuple[LoginInput, str]] = []
    skipped = list(loaded.skipped)
    for entry in loaded.entries:
        login = _tidy(entry)
        for name in entry.attachments:
            skipped.append(f"{entry.where}: attachment {name[:80]!r} (files are not imported yet)")
        if not (login.username or login.password or login.totp or login.hidden or login.note):
            skipped.append(f"{entry.where}: no username, password or TOTP (not a login)")
            continue
        try:
            parts = build_login(login)
            validate_meta("login", parts.meta)
        except MemoriesError as exc:
            raise fail(f"{entry.where} ({login.title[:80]!r})", exc.message) from None
        if len(json.dumps(wire(login, entry.where), ensure_ascii=False).encode("utf-8")) > 8 * 1024 * 1024:
            raise fail(entry.where, "it is larger than 8 MiB.")
        logins.append((login, entry.where))
    return logins, skipped


def wire(login: LoginInput, where: str) -> dict[str, Any]:
    """One entry of a ``login_import_batch`` request."""
    item: dict[str, Any] = {
        "title": login.title,
        "urls": login.urls,
        "notes": login.notes,
        "tags": login.tags,
        "where": where[:300],
    }
    for key in ("username", "password", "totp"):
        value = getattr(login, key)
        if value is not None:
            item[key] = value
    if login.fields:
        item["fields"] = login.fields
    if login.hidden:
        item["hidden"] = login.hidden
    if login.note is not None:
        item["note"] = login.note
    return item
