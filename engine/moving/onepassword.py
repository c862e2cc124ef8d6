"""1Password exports: 1PUX (a zip with ``export.data`` JSON) and CSV.

1PUX shape (1Password's published format): ``{"accounts": [{"vaults": [{"attrs": {"name"},
"items": [{"categoryUuid", "state", "overview": {"title", "url", "urls": [{"url"}],
"tags"}, "details": {"loginFields": [{"designation", "value", "fieldType"}], "password",
"notesPlain", "sections": [{"title", "fields": [{"title", "value": {"totp"|"string"|
"concealed"|…: …}}]}], "documentAttributes"}}]}]}]}``. Logins (category ``001``) and
passwords (``005``) become logins, with the vault name as a tag; secure notes (``003``)
become protected notes, their text a protected secret; other categories are listed as
skipped, and so are files (``files/`` in the zip, documentAttributes).
CSV: a header row naming at least ``title`` and one of ``username``/``password``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from typing import Any

from engine.moving.entry import (
    MAX_FILE_BYTES,
    Entry,
    Loaded,
    add_password_history,
    fail,
    guarded,
    normalise_totp,
    opt_text,
    typed,
)

__all__ = ["parse_1pux", "parse_1password_csv"]

_LOGIN, _PASSWORD, _SECURE_NOTE = "001", "005", "003"
_CATEGORIES = {
    "004": "identity",
    "006": "document",
    "103": "driver licence",
    "104": "outdoor licence",
    "106": "passport",
    "108": "social security number",
    "113": "medical record",
}
# 1Password's categories that hold credentials (issue 33): software licence, bank account,
# database, membership, reward program, wireless router, server, email account, API
# credential, crypto wallet, credit card, SSH key. Each becomes a login: its username and
# password fields as the login's, every concealed field (a PIN, a key, a second password, a
# card's number and CVV, an SSH private key) a protected field.
_CREDENTIALS = {
    "002": "credit card",
    "114": "SSH key",
    "100": "software licence",
    "101": "bank account",
    "102": "database",
    "105": "membership",
    "107": "reward program",
    "109": "wireless router",
    "110": "server",
    "111": "email account",
    "112": "API credential",
    "115": "crypto wallet",
}
_USERNAME_IDS = {"username", "user name", "pop_username", "smtp_username", "reg_name"}
_PASSWORD_IDS = {"password", "pop_password", "wireless_password", "credential", "reg_code"}
_URL_IDS = {"url", "hostname", "server", "pop_server", "website"}


def _export_data(data: bytes) -> Any:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        info = archive.getinfo("export.data")
        if info.file_size > MAX_FILE_BYTES:
            raise fail("the file", "has an export.data larger than 256 MiB.")
        with archive.open(info) as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except KeyError:
        raise fail("the file", "is a zip without export.data (a 1PUX export was expected).") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError):
        raise fail("the file", "is not a readable 1PUX (zip) file; it may be truncated.") from None
    if len(raw) > MAX_FILE_BYTES:
        raise fail("the file", "has an export.data larger than 256 MiB.")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fail("export.data", "is not JSON; the 1PUX file may be damaged.") from None


def parse_1pux(data: bytes) -> Loaded:
    if len(data) > MAX_FILE_BYTES:
        raise fail("the file", "is larger than 256 MiB.")
    doc = _export_data(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("accounts"), list):
        raise fail("export.data", 'has no "accounts" list (a 1PUX export was expected).')
    entries: list[Entry] = []
    skipped: list[str] = []
    number = 0
    where = "export.data"
    with guarded(lambda: where):
        for account in doc["accounts"]:
            for vault in typed(typed(account, dict, where, "an account").get("vaults") or [], list, where, "vaults"):
                vault = typed(vault, dict, where, "a vault")
                vault_name = opt_text(
                    typed(vault.get("attrs") or {}, dict, where, "vault attrs").get("name"), where, "a vault name"
                )
                for item in typed(vault.get("items") or [], list, where, "items"):
                    number += 1
                    where = f"item {number}"
                    entry = _item(item, where, vault_name, skipped)
                    if entry is not None:
                        entries.append(entry)
    return Loaded(entries=entries, skipped=skipped, source="1password")


def _item(item: Any, where: str, vault_name: str | None, skipped: list[str]) -> Entry | None:
    item = typed(item, dict, where, "the item")
    overview = typed(item.get("overview") or {}, dict, where, "its overview")
    details = typed(item.get("details") or {}, dict, where, "its details")
    title = opt_text(overview.get("title"), where, "its title") or ""
    label = f"{where} ({title[:80]!r})" if title else where
    if item.get("state") == "archived":
        skipped.append(f"{label}: archived in 1Password")
        return None
    category = item.get("categoryUuid")
    if category not in (_LOGIN, _PASSWORD, _SECURE_NOTE) and category not in _CREDENTIALS:
        name = _CATEGORIES.get(category, "item") if isinstance(category, str) else "item"
        skipped.append(f"{label}: a {name}, not a login")
        return None
    entry = Entry(where=label, title=title)
    if vault_name:
        entry.tags.append(vault_name)
    for tag in typed(overview.get("tags") or [], list, where, "its tags"):
        entry.tags.append(typed(tag, str, where, "a tag"))
    url = opt_text(overview.get("url"), where, "its url")
    if url:
        entry.urls.append(url)
    for u in typed(overview.get("urls") or [], list, where, "its urls"):
        text = opt_text(typed(u, dict, where, "a url").get("url"), where, "a url")
        if text and text not in entry.urls:
            entry.urls.append(text)
    for field in typed(details.get("loginFields") or [], list, where, "its loginFields"):
        field = typed(field, dict, where, "a login field")
        value = opt_text(field.get("value"), where, "a login field's value")
        designation = field.get("designation")
        if value is None:
            continue
        if designation == "username":
            entry.username = value
        elif designation == "password":
            entry.password = value
        elif field.get("fieldType") == "P":
            entry.hidden[opt_text(field.get("name"), where, "a field name") or "password field"] = value
        else:
            entry.fields[opt_text(field.get("name"), where, "a field name") or "field"] = value
    if entry.password is None:
        entry.password = opt_text(details.get("password"), where, "its password")
    notes = opt_text(details.get("notesPlain"), where, "its notes") or ""
    if category == _SECURE_NOTE:
        entry.note = notes or None
    else:
        entry.notes = notes
    credential = category in _CREDENTIALS
    if credential:
        entry.tags.append(f"1Password {_CREDENTIALS[str(category)]}")
    for section in typed(details.get("sections") or [], list, where, "its sections"):
        section = typed(section, dict, where, "a section")
        prefix = opt_text(section.get("title"), where, "a section title")
        for field in typed(section.get("fields") or [], list, where, "a section's fields"):
            field = typed(field, dict, where, "a section field")
            if not (credential and _credential_field(field, entry)):
                _section_field(field, prefix, entry)
    _password_history(details.get("passwordHistory"), entry)
    document = details.get("documentAttributes")
    if isinstance(document, dict):
        entry.attachments.append(str(document.get("fileName") or "document"))
    return entry


def _credential_field(field: dict[str, Any], entry: Entry) -> bool:
    """A credential item's own username, password or address (by the field's id or title); True if taken."""
    where = entry.where
    value = typed(field.get("value") or {}, dict, where, "a field value")
    names = {
        (opt_text(field.get("id"), where, "a field id") or "").lower(),
        (opt_text(field.get("title"), where, "a field title") or "").lower(),
    }
    for kind, raw in value.items():
        text = raw if isinstance(raw, str) and raw else None
        if text is None:
            continue
        if kind in ("string", "email") and entry.username is None and names & _USERNAME_IDS:
            entry.username = text
            return True
        if kind == "concealed" and entry.password is None and names & _PASSWORD_IDS:
            entry.password = text
            return True
        if kind in ("string", "url") and not entry.urls and names & _URL_IDS:
            entry.urls.append(text)
            return True
    return False


def _password_history(history: Any, entry: Entry) -> None:
    """1Password's earlier passwords (``details.passwordHistory``, Unix seconds): the login's history, newest first."""
    where = entry.where
    rows = [typed(h, dict, where, "a password history entry") for h in typed(history or [], list, where, "its passwordHistory")]
    rows.sort(key=lambda h: int(h["time"]) if isinstance(h.get("time"), int) else 0, reverse=True)
    for row in rows:
        add_password_history(entry, opt_text(row.get("value"), where, "a previous password"), row.get("time"))


def _section_field(field: dict[str, Any], prefix: str | None, entry: Entry) -> None:
    where = entry.where
    title = opt_text(field.get("title"), where, "a field title") or opt_text(field.get("id"), where, "a field id") or "field"
    name = f"{prefix}: {title}" if prefix else title
    value = typed(field.get("value") or {}, dict, where, "a field value")
    for kind, raw in value.items():
        if kind == "totp":
            text = opt_text(raw, where, "a TOTP")
            if text and entry.totp is None:
                normalise_totp(text, entry)
            elif text:
                entry.hidden[name] = text
        elif kind == "concealed":
            text = opt_text(raw, where, "a concealed field")
            if text:
                entry.hidden[name] = text
        elif kind == "creditCardNumber":
            text = opt_text(raw, where, "a card number")
            if text:
                entry.hidden[name] = text  # a card number is a secret: never a visible, searchable field
        elif kind == "sshKey":
            _ssh_key(raw, name, entry)
        elif kind == "monthYear" and isinstance(raw, int) and not isinstance(raw, bool) and 100000 <= raw <= 999912:
            entry.fields[name] = f"{raw // 100:04d}-{raw % 100:02d}"  # 1Password's YYYYMM (a card's expiry)
        elif kind == "file":
            info = raw if isinstance(raw, dict) else {}
            entry.attachments.append(str(info.get("fileName") or name))
        elif isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
            text = str(raw)
            if text:
                entry.fields[name] = text
        elif isinstance(raw, dict) and kind in ("email", "url"):
            text = opt_text(raw.get("email_address") or raw.get("url") or raw.get("value"), where, f"a {kind}")
            if text:
                entry.fields[name] = text
        # other structured values (address, date, menu) carry no secret; they are left out.


def _ssh_key(raw: Any, name: str, entry: Entry) -> None:
    """1Password's SSH key value: the private key protected; its public key and fingerprint visible."""
    where = entry.where
    info = typed(raw, dict, where, "an SSH key")
    private = opt_text(info.get("privateKey"), where, "an SSH private key")
    if private:
        entry.hidden[name] = private
    metadata = info.get("metadata")
    if isinstance(metadata, dict):
        for key, label in (("publicKey", "public key"), ("fingerprint", "fingerprint"), ("keyType", "key type")):
            text = opt_text(metadata.get(key), where, f"an SSH key's {label}")
            if text:
                entry.fields[label] = text


_CSV_KEYS = {
    "title": ("title", "name"),
    "url": ("url", "website", "urls", "login_url"),
    "username": ("username", "user name", "login", "login_username"),
    "password": ("password", "login_password"),
    "otp": ("otpauth", "one-time password", "otp", "totp"),
    "notes": ("notes", "notesplain"),
    "tags": ("tags",),
    "archived": ("archived",),
}
# Columns of 1Password's CSV that carry nothing to keep (the others, such as 1Password 7 for
# Windows' "member name" and "secret key", are kept as fields: protected when the name says
# secret).
_CSV_NOISE = {"favorite", "type", "uuid", "vault", "created", "modified", "last modified", "icon"}
_SECRETISH = re.compile(r"password|secret|key|pin|token|cvv|code|otp|passphrase|credential", re.IGNORECASE)


def parse_1password_csv(data: bytes) -> Loaded:
    """1Password's CSV exports.

    1Password 8: Title, Url, Username, Password, OTPAuth, Favorite, Archived, Tags, Notes.
    1Password 7 for Mac escapes a quote inside a quoted cell as ``\\"`` instead of ``""``:
    both readings are tried and the one that fits the header is used (a file that fits
    both differently is refused, never guessed). 1Password 7 for Windows adds columns
    (member name, secret key, …): every column we do not map is kept as a field,
    protected when its name says it holds a secret. Archived rows are listed as skipped.
    """
    loaded = parse_csv_logins(data, _CSV_KEYS, "1password", tag_separator=",", extra=True, backslash_quotes=True)
    live: list[Entry] = []
    for entry in loaded.entries:
        if entry.fields.pop("\x00archived", "").strip().lower() in ("true", "1", "yes"):
            loaded.skipped.append(f"{entry.where}: archived in 1Password")
        else:
            live.append(entry)
    loaded.entries = live
    return loaded


def _rows(text: str, *, backslash: bool) -> list[list[str]]:
    if backslash:
        return list(csv.reader(io.StringIO(text, newline=""), escapechar="\\", doublequote=False, strict=True))
    return list(csv.reader(io.StringIO(text, newline=""), strict=True))


def _fits(rows: list[list[str]]) -> bool:
    """Every row has at most the header's cells (a mis-read quote shifts cells into extra columns)."""
    return bool(rows) and all(len(row) <= len(rows[0]) for row in rows[1:] if any(c.strip() for c in row))


def _read_rows(text: str, backslash_quotes: bool) -> list[list[str]]:
    """Strict readings: a quote that closes a cell must be followed by a comma or a line end,
    so a backslash-escaped quote read as a doubled-quote file fails instead of reading wrong."""
    if not backslash_quotes:
        try:
            return list(csv.reader(io.StringIO(text, newline="")))
        except csv.Error:
            raise fail("the file", "is not valid CSV.") from None
    try:
        plain: list[list[str]] | None = _rows(text, backslash=False)
    except csv.Error:
        plain = None
    if not backslash_quotes or '\\"' not in text:
        if plain is None:
            raise fail("the file", "is not valid CSV.")
        return plain
    try:
        escaped: list[list[str]] | None = _rows(text, backslash=True)
    except csv.Error:
        escaped = None
    plain_fits = plain is not None and _fits(plain)
    escaped_fits = escaped is not None and _fits(escaped)
    if escaped is not None and escaped_fits and (not plain_fits or plain == escaped):
        return escaped
    if plain is not None and plain_fits and not escaped_fits:
        return plain
    if plain_fits and escaped_fits:
        raise fail(
            "the file",
            'reads two ways: its quotes may be escaped as \\" (1Password 7 for Mac) or doubled (""), and both fit '
            "the header. Export it again from 1Password 8 (or as 1PUX) and import that.",
        )
    raise fail("the file", "is not valid CSV: its rows do not fit the header with either kind of quote escaping.")


def parse_csv_logins(
    data: bytes,
    keys: dict[str, tuple[str, ...]],
    source: str,
    *,
    tag_separator: str,
    group: str | None = None,
    extra: bool = False,
    backslash_quotes: bool = False,
) -> Loaded:
    """A CSV with a header row; ``keys`` maps our fields to accepted header names (lower case).

    ``group`` names a folder-path column, kept raw in ``Entry.group`` for the caller;
    ``extra`` keeps every other non-empty column as a field. A row with more cells than
    the header means the quoting was misread: the file is refused, never imported mangled.
    """
    if len(data) > MAX_FILE_BYTES:
        raise fail("the file", "is larger than 256 MiB.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise fail("the file", "is not UTF-8 text (a CSV export was expected).") from None
    if "\x00" in text:
        raise fail("the file", "is not a CSV text file.")
    rows = _read_rows(text, backslash_quotes)
    if not rows:
        raise fail("the file", "is empty.")
    raw_header = [h.strip() for h in rows[0]]
    header = [h.lower() for h in raw_header]
    column = {ours: next((header.index(n) for n in names if n in header), None) for ours, names in keys.items()}
    if group is not None:
        column["group"] = header.index(group) if group in header else None
    if column["title"] is None or (column["username"] is None and column["password"] is None):
        raise fail("line 1", "is not the header of a password export (it needs Title and Username or Password).")
    mapped = {i for i in column.values() if i is not None}
    others = [i for i, h in enumerate(header) if extra and i not in mapped and h and h not in _CSV_NOISE]
    entries: list[Entry] = []
    line = 1
    for row in rows[1:]:
        line += 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise fail(
                f"line {line}",
                f"has {len(row)} cells where the header has {len(header)}; the file's quoting is not what this "
                "exporter writes, so it is not imported rather than imported wrong.",
            )

        def cell(name: str, row: list[str] = row) -> str:
            index = column.get(name)
            return row[index] if index is not None and index < len(row) else ""

        title = cell("title")
        entry = Entry(where=f"line {line}" + (f" ({title[:80]!r})" if title else ""), title=title)
        entry.username = cell("username") or None
        entry.password = cell("password") or None
        entry.urls = [cell("url")] if cell("url") else []
        entry.notes = cell("notes")
        entry.tags = [t.strip() for t in cell("tags").split(tag_separator) if t.strip()]
        if group is not None:
            entry.group = cell("group")
        if "archived" in column:
            entry.fields["\x00archived"] = cell("archived")
        for index in others:
            value = row[index] if index < len(row) else ""
            if value:
                name = raw_header[index]
                (entry.hidden if _SECRETISH.search(name) else entry.fields)[name] = value
        if cell("otp"):
            normalise_totp(cell("otp"), entry)
        entries.append(entry)
    return Loaded(entries=entries, skipped=[], source=source)
