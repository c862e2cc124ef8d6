"""Bitwarden's unencrypted JSON export (``bw export --format json``).

Shape: ``{"encrypted": false, "folders": [{"id", "name"}], "items": [{"type": 1, "name",
"notes", "folderId", "fields": [{"name", "value", "type"}], "login": {"username",
"password", "totp", "uris": [{"uri"}]}}]}``. Items of type 1 (login) become logins; secure
notes (type 2) become protected notes, their text a protected secret (never a card body);
cards, identities and SSH keys are listed as skipped. Custom fields of type 1 (hidden) are
protected, text and boolean fields are kept as card metadata, linked fields (type 3) only
point at other fields and are dropped. Folders and an organisation's collections become
tags; password history becomes the login's history (earlier revisions of its credential); passkeys
(``fido2Credentials``) are listed as skipped; ``reprompt`` becomes the login's re-prompt flag (a fresh `sudo` before every read).
"""

from __future__ import annotations

import json
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

__all__ = ["parse_bitwarden"]

_ITEM_TYPES = {3: "card", 4: "identity", 5: "SSH key"}


def parse_bitwarden(data: bytes) -> Loaded:
    if len(data) > MAX_FILE_BYTES:
        raise fail("the file", "is larger than 256 MiB.")
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise fail("the file", "is not a JSON document (a Bitwarden JSON export was expected).") from None
    if not isinstance(doc, dict):
        raise fail("the file", "is not a Bitwarden JSON export (no top-level object).")
    if doc.get("encrypted") is True:
        raise fail("the file", "is an encrypted Bitwarden export; export again as unencrypted JSON.")
    items = doc.get("items")
    if not isinstance(items, list):
        raise fail("the file", 'is not a Bitwarden JSON export (no "items" list).')
    folders: dict[str, str] = {}
    for i, folder in enumerate(typed(doc.get("folders") or [], list, "the file", '"folders"')):
        where = f"folder {i + 1}"
        folder = typed(folder, dict, where, "the folder")
        fid, name = opt_text(folder.get("id"), where, "its id"), opt_text(folder.get("name"), where, "its name")
        if fid and name:
            folders[fid] = name
    # An organisation's export has collections instead of folders: their names become tags too.
    for i, collection in enumerate(typed(doc.get("collections") or [], list, "the file", '"collections"')):
        where = f"collection {i + 1}"
        collection = typed(collection, dict, where, "the collection")
        cid, name = opt_text(collection.get("id"), where, "its id"), opt_text(collection.get("name"), where, "its name")
        if cid and name:
            folders[cid] = name
    entries: list[Entry] = []
    skipped: list[str] = []
    for i, item in enumerate(items):
        where = f"item {i + 1}"
        with guarded(where):
            entry = _item(item, where, folders, skipped)
        if entry is not None:
            entries.append(entry)
    return Loaded(entries=entries, skipped=skipped, source="bitwarden")


def _item(item: Any, where: str, folders: dict[str, str], skipped: list[str]) -> Entry | None:
    item = typed(item, dict, where, "the item")
    title = opt_text(item.get("name"), where, "its name") or ""
    kind = item.get("type")
    if kind not in (1, 2):
        label = _ITEM_TYPES.get(kind, "item") if isinstance(kind, int) else "item"
        skipped.append(f"{where} ({title[:80]!r}): a {label}, not a login")
        return None
    entry = Entry(where=f"{where} ({title[:80]!r})" if title else where, title=title)
    login = typed(item.get("login") or {}, dict, where, "its login")
    entry.username = opt_text(login.get("username"), where, "its username")
    entry.password = opt_text(login.get("password"), where, "its password")
    for j, uri in enumerate(typed(login.get("uris") or [], list, where, "its uris")):
        uri = typed(uri, dict, where, f"uri {j + 1}")
        text = opt_text(uri.get("uri"), where, f"uri {j + 1}")
        if text:
            entry.urls.append(text)
    notes = opt_text(item.get("notes"), where, "its notes") or ""
    if kind == 2:
        entry.note = notes or None  # a note without text still keeps its title, fields and folder
    else:
        entry.notes = notes
    folder = opt_text(item.get("folderId"), where, "its folderId")
    if folder and folder in folders:
        entry.tags.append(folders[folder])
    for collection in typed(item.get("collectionIds") or [], list, where, "its collectionIds"):
        if isinstance(collection, str) and collection in folders:
            entry.tags.append(folders[collection])
    if item.get("reprompt") == 1:
        # "Master password re-prompt": each read of this login's secrets then needs a fresh
        # `memories sudo` (engine/service/handlers/reprompt.py), not just any elevation.
        entry.reprompt = True
    for j, passkey in enumerate(typed(login.get("fido2Credentials") or [], list, where, "its fido2Credentials")):
        site = passkey.get("rpId") if isinstance(passkey, dict) else None
        named = f" for {site[:80]!r}" if isinstance(site, str) and site else ""
        skipped.append(f"{entry.where}: passkey {j + 1}{named} (passkeys are not imported yet; the login itself is)")
    history = typed(item.get("passwordHistory") or [], list, where, "its passwordHistory")
    rows = [typed(h, dict, where, "a password history entry") for h in history]
    rows.sort(key=lambda h: str(h.get("lastUsedDate") or ""), reverse=True)
    for row in rows:
        add_password_history(entry, opt_text(row.get("password"), where, "a previous password"), row.get("lastUsedDate"))
    if item.get("favorite") is True:
        entry.tags.append("favorite")
    for j, custom in enumerate(typed(item.get("fields") or [], list, where, "its fields")):
        custom = typed(custom, dict, where, f"field {j + 1}")
        name = opt_text(custom.get("name"), where, f"field {j + 1}'s name") or f"field {j + 1}"
        ftype = custom.get("type", 0)
        value = custom.get("value")
        if ftype == 3 or value is None:
            continue
        text = "true" if value is True else "false" if value is False else opt_text(value, where, f"field {name!r}") or ""
        (entry.hidden if ftype == 1 else entry.fields)[name] = text
    totp = opt_text(login.get("totp"), where, "its totp")
    if totp:
        normalise_totp(totp, entry)
    for j, attachment in enumerate(typed(item.get("attachments") or [], list, where, "its attachments")):
        file_name = attachment.get("fileName") if isinstance(attachment, dict) else None
        entry.attachments.append(file_name if isinstance(file_name, str) else f"attachment {j + 1}")
    return entry
