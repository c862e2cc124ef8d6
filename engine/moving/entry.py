"""The neutral entry every moving-in parser produces, and the checks all entries pass first."""

from __future__ import annotations

import datetime
import hmac
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from engine.cards.login import MAX_NOTE, MAX_PASSWORD, MAX_PASSWORD_HISTORY, LoginInput, build_login, custom_field_key
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
    "add_password_history",
    "when_text",
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
    # One sentence each for what was kept in a different shape than the source had it (a
    # TOTP seed we cannot use kept as a protected field, a renamed field): imported, but said.
    warnings: list[str] = field(default_factory=list)
    group: str | None = None  # a CSV's raw folder path ("Root/Internet"), for its parser to map
    # Earlier passwords, newest first, with when the source says each was last used or
    # replaced: imported as the credential's earlier revisions (history, not fields).
    password_history: list[tuple[str, str | None]] = field(default_factory=list)
    reprompt: bool = False  # the source asks for the master password before showing it (Bitwarden)


@dataclass
class Loaded:
    entries: list[Entry]
    skipped: list[str]  # one sentence each: attachments, non-login items, …
    source: str  # "keepassxc", "bitwarden", "1password"
    warnings: list[str] = field(default_factory=list)  # per entry, naming it (IM-2); check_all adds the entries'


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


def normalise_totp(value: str, entry: Entry, *, period: int | None = None, digits: int | None = None) -> None:
    """Put a TOTP given as an otpauth URI or a bare base32 seed on the entry.

    ``period``/``digits`` are the source's own settings for a bare seed (KeePass's legacy
    ``TOTP Settings``). A value we cannot use as a TOTP (too short, not base32, stray
    trailing bits, a HOTP or Steam code) never refuses the file (IM-2): it is kept as a
    protected field, and unless it is a known other kind, a warning names the entry and why.
    """
    text = value.strip()
    if not text:
        return
    lower = text.lower()
    if lower.startswith("otpauth://totp/") or lower.startswith("otpauth://totp?"):
        if "encoder=steam" in lower:
            _keep_seed(entry, "TOTP (Steam)", text, None)
            return
        try:
            parse_otpauth(text, expect="totp")
        except MemoriesError as exc:
            _keep_seed(entry, "TOTP", text, f"its TOTP is not usable ({exc.message.rstrip('.')})")
            return
        _set_totp(entry, text)
        return
    if lower.startswith(("otpauth://hotp", "steam://")):
        _keep_seed(entry, "HOTP" if lower.startswith("otpauth://hotp") else "TOTP (Steam)", text, None)
        return
    if _B32ISH.match(text):
        uri = "otpauth://totp/?secret=" + "".join(text.split()).upper().rstrip("=")
        if period is not None and period != 30:
            uri += f"&period={period}"
        if digits is not None and digits != 6:
            uri += f"&digits={digits}"
        try:
            parse_otpauth(uri, expect="totp")
        except MemoriesError as exc:
            _keep_seed(entry, "TOTP", text, f"its TOTP seed is not usable ({exc.message.rstrip('.')})")
            return
        _set_totp(entry, uri)
        return
    _keep_seed(entry, "TOTP", text, "its TOTP is neither an otpauth:// URI nor a base32 seed of at least 16 characters")


def _set_totp(entry: Entry, uri: str) -> None:
    if entry.totp is None:
        entry.totp = uri
    else:  # a second TOTP (1Password allows several): kept, readable by name
        _keep_seed(entry, "TOTP", uri, None)


def _keep_seed(entry: Entry, name: str, text: str, why: str | None) -> None:
    key = _free_name(name, entry.hidden)
    entry.hidden[key] = text
    if why:
        entry.warnings.append(f"{entry.where}: {why}; kept as the protected field {key!r}, no codes are generated")


def _free_name(name: str, taken: dict[str, str] | set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"


def _distinct(entry: Entry, values: dict[str, str], key: Callable[[str], str], what: str) -> dict[str, str]:
    """Names the store would fold together (``Token`` and ``token``) stay apart, with a stable suffix."""
    out: dict[str, str] = {}
    folded: set[str] = set()
    for raw, value in values.items():
        if value == "":
            continue
        name = raw.strip()[:200] or "field"
        candidate, n = name, 2
        while key(candidate) in folded:
            candidate = f"{name[:190]} ({n})"
            n += 1
        if candidate != name:
            entry.warnings.append(
                f"{entry.where}: two {what} fields are named {name[:80]!r} apart from case or spacing; "
                f"the second is kept as {candidate!r}"
            )
        folded.add(key(candidate))
        out[candidate] = value
    return out


def same_secret(one: str, other: str) -> bool:
    """Two passwords are the same, compared in constant time like every secret here (issue 27)."""
    return hmac.compare_digest(one.encode("utf-8"), other.encode("utf-8"))


def add_password_history(entry: Entry, value: str | None, when: Any) -> None:
    """One earlier password of the entry, oldest last; ``when`` as the source gives it.

    The same password twice in a row (KeePass keeps whole entry versions, most of them
    with an unchanged password) is kept once, and the current password is not history.
    """
    if not value or (entry.password is not None and same_secret(value, entry.password)):
        return
    if entry.password_history and same_secret(entry.password_history[-1][0], value):
        return
    entry.password_history.append((value, when_text(when)))


def when_text(when: Any) -> str | None:
    """A source's time stamp as an ISO date-time (UTC) or date: Unix seconds, or ISO text kept as it is."""
    if isinstance(when, (int, float)) and not isinstance(when, bool) and 0 < when < 1e11:
        return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if isinstance(when, str) and when.strip():
        return when.strip()[:40]
    return None


def _tidy(entry: Entry) -> LoginInput:
    """Bring outside values into our limits where that loses nothing secret; refuse the rest."""
    title = " ".join(entry.title.split()) or entry.username or (entry.urls[0] if entry.urls else "") or "Untitled"
    tags = list(dict.fromkeys(t.strip()[:MAX_TAG] for t in entry.tags if t.strip()))[:MAX_TAGS]
    if entry.password is not None and len(entry.password) > MAX_PASSWORD:
        raise fail(entry.where, f"its password is longer than {MAX_PASSWORD} characters.")
    if entry.note is not None and len(entry.note) > MAX_NOTE:
        raise fail(entry.where, f"its secure note is longer than {MAX_NOTE} characters.")
    fields = _distinct(entry, entry.fields, custom_field_key, "custom")
    hidden = _distinct(entry, entry.hidden, lambda name: name.casefold(), "protected")
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
        password_history=_history(entry),
        reprompt=entry.reprompt,
    )


def _history(entry: Entry) -> list[tuple[str, str | None]]:
    """The earlier passwords we keep: never the current one, none over the limits, each drop said."""
    current = entry.password
    kept = [(old, when) for old, when in entry.password_history if current is None or not same_secret(old, current)]
    long = [old for old, _ in kept if len(old) > MAX_PASSWORD]
    if long:
        entry.warnings.append(
            f"{entry.where}: {len(long)} earlier password(s) longer than {MAX_PASSWORD} characters were left out of its history"
        )
        kept = [(old, when) for old, when in kept if len(old) <= MAX_PASSWORD]
    if len(kept) > MAX_PASSWORD_HISTORY:
        entry.warnings.append(
            f"{entry.where}: it has {len(kept)} earlier passwords; the newest {MAX_PASSWORD_HISTORY} are kept as its history"
        )
        kept = kept[:MAX_PASSWORD_HISTORY]
    return kept


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
        if wire_size(wire(login, entry.where)) > 8 * 1024 * 1024:
            raise fail(entry.where, "it is larger than 8 MiB.")
        logins.append((login, entry.where))
        loaded.warnings.extend(entry.warnings)
    return logins, skipped


_encode = msgspec.json.Encoder().encode


def wire_size(item: dict[str, Any]) -> int:
    """The bytes of one request entry as the frame carries it (compact UTF-8 JSON), encoded in C
    (issue 32: json.dumps twice per entry was a tenth of the CLI's part of a 10k-entry import)."""
    return len(_encode(item))


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
    if login.reprompt:
        item["reprompt"] = True
    if login.password_history:
        item["password_history"] = [{"password": old, "when": when} for old, when in login.password_history]
    return item
