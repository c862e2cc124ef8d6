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
import zipfile
from typing import Any

from engine.moving.entry import MAX_FILE_BYTES, Entry, Loaded, fail, guarded, normalise_totp, opt_text, typed

__all__ = ["parse_1pux", "parse_1password_csv"]

_LOGIN, _PASSWORD, _SECURE_NOTE = "001", "005", "003"
_CATEGORIES = {"002": "credit card", "004": "identity", "006": "document"}


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
    if category not in (_LOGIN, _PASSWORD, _SECURE_NOTE):
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
    for section in typed(details.get("sections") or [], list, where, "its sections"):
        section = typed(section, dict, where, "a section")
        prefix = opt_text(section.get("title"), where, "a section title")
        for field in typed(section.get("fields") or [], list, where, "a section's fields"):
            _section_field(typed(field, dict, where, "a section field"), prefix, entry)
    document = details.get("documentAttributes")
    if isinstance(document, dict):
        entry.attachments.append(str(document.get("fileName") or "document"))
    return entry


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


_CSV_KEYS = {
    "title": ("title", "name"),
    "url": ("url", "website", "urls"),
    "username": ("username", "user name", "login"),
    "password": ("password",),
    "otp": ("otpauth", "one-time password", "otp", "totp"),
    "notes": ("notes", "notesplain"),
    "tags": ("tags",),
}


def parse_1password_csv(data: bytes) -> Loaded:
    """1Password 8's CSV export: Title, Url, Username, Password, OTPAuth, Favorite, Archived, Tags, Notes."""
    return parse_csv_logins(data, _CSV_KEYS, "1password", tag_separator=",")


def parse_csv_logins(
    data: bytes, keys: dict[str, tuple[str, ...]], source: str, *, tag_separator: str, group: str | None = None
) -> Loaded:
    """A CSV with a header row; ``keys`` maps our fields to accepted header names (lower case)."""
    if len(data) > MAX_FILE_BYTES:
        raise fail("the file", "is larger than 256 MiB.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise fail("the file", "is not UTF-8 text (a CSV export was expected).") from None
    if "\x00" in text:
        raise fail("the file", "is not a CSV text file.")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise fail("the file", "is empty.") from None
    except csv.Error:
        raise fail("line 1", "is not valid CSV.") from None
    column = {ours: next((header.index(n) for n in names if n in header), None) for ours, names in keys.items()}
    if column["title"] is None or (column["username"] is None and column["password"] is None):
        raise fail("line 1", "is not the header of a password export (it needs Title and Username or Password).")
    entries: list[Entry] = []
    line = 1
    try:
        for row in reader:
            line += 1
            if not any(cell.strip() for cell in row):
                continue

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
            if group is not None and cell(group):
                entry.tags.append(cell(group).strip("/"))
            if cell("otp"):
                normalise_totp(cell("otp"), entry)
            entries.append(entry)
    except csv.Error:
        raise fail(f"line {line}", "is not valid CSV.") from None
    return Loaded(entries=entries, skipped=[], source=source)
