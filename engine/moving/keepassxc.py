"""KeePassXC: KDBX databases (through pykeepass), KeePass 2 XML exports, and CSV exports.

A KDBX file is opened with pykeepass (imported only here, only for ``.kdbx``), which
decrypts it and un-protects its values; its inner XML then goes through the same reader as
an XML export, so both paths keep exactly the same fields: Title, UserName, Password, URL
(plus KeePassXC's ``KP2A_URL*`` extra URLs), Notes, Tags, the group path as a tag, the
``otp`` attribute (or the older ``TOTP Seed``) as the TOTP, other attributes as custom
fields (protected ones as hidden fields), and attachments listed as skipped. An entry with
notes but no username, password, URL or TOTP is a notes-only entry, which KeePass users keep
as secure notes: its notes become a protected note. The passwords of an entry's earlier
versions (its History) become the login's password history; the recycle bin is left out.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from engine.moving.aes_kdf import transformed_key
from engine.moving.entry import MAX_FILE_BYTES, Entry, Loaded, add_password_history, fail, guarded, normalise_totp, when_text
from engine.moving.onepassword import parse_csv_logins

__all__ = ["parse_kdbx", "parse_keepass_xml", "parse_keepassxc_csv"]

_STANDARD = {"Title", "UserName", "Password", "URL", "Notes"}
_TOTP_KEYS = ("otp", "TOTP Seed")
_IGNORED = {"TOTP Settings", "_etm_template_uuid"}
# Seconds from 0001-01-01 to 1970-01-01: KDBX 4 counts its times from year one.
_EPOCH_FROM_YEAR_ONE = 62_135_596_800


def parse_kdbx(path: Path, password: str | None, keyfile: Path | None) -> Loaded:
    try:
        from pykeepass import PyKeePass
        from pykeepass.exceptions import CredentialsError, HeaderChecksumError, PayloadChecksumError
    except ImportError:
        raise fail(
            "the file",
            "needs the optional pykeepass package (GPL-3.0, not installed by default) to read KDBX databases: "
            "`.venv/bin/pip install 'memories[keepass]'`, or export XML from KeePassXC and import that.",
        ) from None
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise fail("the file", "is larger than 256 MiB.")
        with path.open("rb") as handle:
            head = handle.read(12)
    except OSError:
        raise fail(str(path), "cannot be read.") from None
    _check_version(head)
    # No password (an empty answer or --kdbx-no-password) may mean either of KeePass's two
    # shapes: no password component at all (KeePassXC, key file only) or an empty one.
    candidates: list[str | None] = [password] if password else [None, ""]
    kp: Any = None
    for candidate in candidates:
        try:
            # AES-KDF (KDBX 3.1, what `keepassxc-cli import` writes) derived in native code;
            # pykeepass's own loop is one Python call per round (engine/moving/aes_kdf.py).
            derived = transformed_key(path, candidate, keyfile) if candidate is not None or keyfile else None
            kp = PyKeePass(str(path), password=candidate, keyfile=str(keyfile) if keyfile else None, transformed_key=derived)
            break
        except CredentialsError:
            continue
        except (HeaderChecksumError, PayloadChecksumError):
            raise fail("the database", "is damaged (a checksum failed).") from None
        except Exception as exc:  # the parser's own errors (construct, lxml) are many; any is "not readable"
            if not password and candidate is None and keyfile is None:
                continue  # pykeepass refuses "no password and no key file" before trying ""
            raise fail("the file", f"is not a readable KDBX database ({exc.__class__.__name__}).") from None
    if kp is None:
        if password:
            raise fail("the database", "could not be opened: wrong password or key file.")
        raise fail(
            "the database",
            "could not be opened without a password"
            + (" and with this key file" if keyfile else "")
            + ": give its password at the prompt or with --kdbx-password-stdin"
            + ("" if keyfile else ", or its key file with --keyfile")
            + ".",
        )
    try:
        # The tree pykeepass parsed is read as it is (no second serialise and parse, issue 32),
        # with the same refusal of a document type as an XML export gets.
        root = kp.tree.getroot()
        doctype = bool(kp.tree.docinfo.doctype)
    except Exception as exc:  # a database pykeepass half-read: typed, never a traceback
        raise fail("the file", f"is not a readable KDBX database ({exc.__class__.__name__}).") from None
    if doctype:
        raise fail("the file", _DOCTYPE_REFUSED)
    return _from_tree(root)


_KDBX_SIGNATURE = bytes.fromhex("03d9a29a67fb4bb5")
_KDB_SIGNATURE = bytes.fromhex("03d9a29a65fb4bb5")


def _check_version(head: bytes) -> None:
    """Refuse what pykeepass cannot read with the reason and the way out, before it half-reads it.

    The header is two signatures then minor and major version (little-endian 16-bit each):
    KDBX 3.x (KeePass 2.20+) and 4.x are read; KDBX 2.x (KeePass 2.00–2.19) and KeePass 1
    ``.kdb`` files are not (pykeepass has no reader for them).
    """
    if head[:8] == _KDB_SIGNATURE:
        raise fail(
            "the file",
            "is a KeePass 1 (.kdb) database, which cannot be read here: open it in KeePassXC "
            "(Database > Import > KeePass 1), save it as .kdbx, and import that.",
        )
    if len(head) < 12 or head[:8] != _KDBX_SIGNATURE:
        raise fail("the file", "is not a KDBX database (its signature is missing).")
    major = int.from_bytes(head[10:12], "little")
    if major < 3:
        raise fail(
            "the file",
            f"is a KDBX {major}.x database (KeePass before 2.20), which cannot be read here: open it in "
            "KeePassXC or KeePass and save it (it is written again as KDBX 4), or export it as KeePass XML, "
            "and import that.",
        )
    if major > 4:
        raise fail("the file", f"is a KDBX {major}.x database, newer than this version can read (3.x and 4.x).")


def parse_keepass_xml(data: bytes) -> Loaded:
    """A KeePass 2 XML export (values in clear: such a file must be handled as the secret it is)."""
    if len(data) > MAX_FILE_BYTES:
        raise fail("the file", "is larger than 256 MiB.")
    return _from_xml(data)


_DOCTYPE_REFUSED = "has a DOCTYPE (document type or entity declarations); a KeePass XML export has none."


class _DoctypeRefused(Exception):
    """Raised by the parser at the start of a DOCTYPE, before its internal subset is read."""


def _from_xml(data: bytes) -> Loaded:
    """Parse with the document type refused by the parser itself.

    Entity declarations (a billion-laughs bomb, an external entity) can only stand inside a
    DOCTYPE, and a KeePass export has none. Earlier a search of the raw bytes refused them,
    which a UTF-16 file or a DOCTYPE after the first 4 KiB slipped past (issue 27); the
    parser sees the declaration whatever the encoding or offset, and this target's
    ``doctype`` hook stops the parse as it starts, so nothing in it is expanded.
    """
    import xml.etree.ElementTree as ET

    class _NoDoctype(ET.TreeBuilder):
        def doctype(self, name: str, pubid: str | None, system: str | None) -> None:
            raise _DoctypeRefused

    parser = ET.XMLParser(target=_NoDoctype())  # noqa: S314 -- the DOCTYPE is refused by the target above
    try:
        parser.feed(data)
        root = parser.close()
    except _DoctypeRefused:
        raise fail("the file", _DOCTYPE_REFUSED) from None
    except (ET.ParseError, ValueError):
        raise fail("the file", "is not well-formed XML; it may be truncated.") from None
    return _from_tree(root)


def _from_tree(root: Any) -> Loaded:
    """Entries of a parsed KeePass document: an ElementTree element (an XML export) or an lxml
    one (the tree pykeepass decrypted), read through the API both share."""
    top = root.find("Root")
    if root.tag != "KeePassFile" or top is None:
        raise fail("the file", "is not a KeePass XML file (no KeePassFile/Root).")
    recycle = (root.findtext("Meta/RecycleBinUUID") or "").strip()
    entries: list[Entry] = []
    skipped: list[str] = []
    counter = [0]
    where = ["the file"]
    with guarded(lambda: where[0]):
        for group in list(top):
            if group.tag == "Group":
                _group(group, [], recycle, entries, skipped, counter, where, top=True)
    return Loaded(entries=entries, skipped=skipped, source="keepassxc")


def _group(
    group: Any,
    path: list[str],
    recycle: str,
    entries: list[Entry],
    skipped: list[str],
    counter: list[int],
    where: list[str],
    *,
    top: bool = False,
) -> None:
    if recycle and (group.findtext("UUID") or "").strip() == recycle:
        # Deleted in KeePassXC: listed as skipped, as the CSV path lists them (issue 33). Old
        # versions of an entry (inside its History) are not entries of their own.
        history = sum(len(h.findall("Entry")) for h in group.iter("History"))
        count = sum(1 for _ in group.iter("Entry")) - history
        if count:
            skipped.append(f"the recycle bin: {count} deleted entr{'y' if count == 1 else 'ies'} (not imported)")
        return
    name = group.findtext("Name") or ""
    # The root group's name ("Root", "Passwords") is the database's, not a folder.
    here = path if top else [*path, name]
    for child in group:
        if child.tag == "Entry":
            counter[0] += 1
            where[0] = f"entry {counter[0]}" + (f" ({'/'.join(here)})" if here else "")
            entries.append(_entry(child, where[0], here))
        elif child.tag == "Group":
            _group(child, here, recycle, entries, skipped, counter, where)


def _entry(node: Any, where: str, path: list[str]) -> Entry:
    strings: dict[str, tuple[str, bool]] = {}
    for item in node.findall("String"):
        key = item.findtext("Key") or ""
        value_node = item.find("Value")
        value = (value_node.text or "") if value_node is not None else ""
        protected = value_node is not None and (
            value_node.get("Protected") == "True" or value_node.get("ProtectInMemory") == "True"
        )
        strings[key] = (value, protected)
    title = strings.get("Title", ("", False))[0]
    entry = Entry(where=f"{where} ({title[:80]!r})" if title else where, title=title)
    entry.username = strings.get("UserName", ("", False))[0] or None
    entry.password = strings.get("Password", ("", False))[0] or None
    url = strings.get("URL", ("", False))[0]
    entry.urls = [url] if url else []
    entry.notes = strings.get("Notes", ("", False))[0]
    tags = node.findtext("Tags") or ""
    entry.tags = [t.strip() for t in tags.replace(",", ";").split(";") if t.strip()]
    if path:
        entry.tags.append("/".join(path))
    for key, (value, protected) in strings.items():
        if key in _STANDARD or key in _IGNORED or key in _TOTP_KEYS or not value:
            continue
        if key.startswith("KP2A_URL"):
            entry.urls.append(value)
        elif protected:
            entry.hidden[key] = value
        else:
            entry.fields[key] = value
    for key in _TOTP_KEYS:
        value = strings.get(key, ("", False))[0]
        if value:
            if key == "TOTP Seed":
                _legacy_totp(value, strings.get("TOTP Settings", ("", False))[0], entry)
            else:
                normalise_totp(value, entry)
            break
    for binary in node.findall("Binary"):
        entry.attachments.append(binary.findtext("Key") or "attachment")
    _history(node, entry)
    if entry.notes.strip() and not (entry.username or entry.password or entry.urls or entry.totp):
        entry.note, entry.notes = entry.notes, ""
    return entry


def _history(node: Any, entry: Entry) -> None:
    """The passwords of the entry's earlier versions (``<History>``, oldest first in the file), newest first."""
    history = node.find("History")
    if history is None:
        return
    for version in reversed(history.findall("Entry")):
        password = ""
        for item in version.findall("String"):
            if item.findtext("Key") == "Password":
                password = item.findtext("Value") or ""
        add_password_history(entry, password or None, _keepass_time(version.findtext("Times/LastModificationTime")))


def _keepass_time(text: str | None) -> str | None:
    """KeePass XML writes ISO times; KDBX 4 writes base64 of little-endian seconds since 0001-01-01."""
    if not text or not text.strip():
        return None
    value = text.strip()
    if "-" in value:
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        return None
    if len(raw) != 8:
        return None
    seconds = int.from_bytes(raw, "little") - _EPOCH_FROM_YEAR_ONE
    return when_text(seconds) if seconds > 0 else None


def _legacy_totp(seed: str, settings: str, entry: Entry) -> None:
    """KeePassXC's older ``TOTP Seed`` with ``TOTP Settings`` = ``period;digits`` or ``period;S`` (Steam).

    The settings decide the codes, so they are honoured; settings we cannot read are said,
    never silently replaced by 30 s / 6 digits.
    """
    settings = settings.strip()
    if not settings:
        normalise_totp(seed, entry)
        return
    parts = [p.strip() for p in settings.split(";")]
    try:
        period = int(parts[0])
        steam = len(parts) > 1 and parts[1].upper() == "S"
        digits = None if steam or len(parts) < 2 or not parts[1] else int(parts[1])
    except ValueError:
        period, digits, steam = 0, None, False
    if steam:
        normalise_totp(f"otpauth://totp/?secret={''.join(seed.split())}&period={period}&encoder=steam", entry)
        entry.warnings.append(
            f"{entry.where}: its TOTP is a Steam Guard code, which is not generated here; the seed is kept "
            "as the protected field 'TOTP (Steam)'"
        )
        return
    if not 1 <= period <= 3600 or (digits is not None and not 6 <= digits <= 10):
        entry.hidden["TOTP Seed"] = seed
        entry.warnings.append(
            f"{entry.where}: its TOTP Settings ({settings[:40]!r}) are not a period;digits pair; "
            "the seed is kept as the protected field 'TOTP Seed', no codes are generated"
        )
        return
    normalise_totp(seed, entry, period=period, digits=digits)


_CSV_KEYS = {
    "title": ("title",),
    "url": ("url",),
    "username": ("username", "user name"),
    "password": ("password",),
    "otp": ("totp", "otp"),
    "notes": ("notes",),
    "tags": ("tags",),
    "group": ("group",),
}


def parse_keepassxc_csv(data: bytes) -> Loaded:
    """KeePassXC's CSV export: "Group","Title","Username","Password","URL","Notes","TOTP",…

    The Group column is the full path from the root group ("Passwords/Internet"): its first
    part is the database's root, never a folder, and a path through the recycle bin is a
    deleted entry. Both are read as the XML and KDBX paths read them: the root's name is no
    tag, and recycle-bin entries are listed as skipped, not imported as live logins.
    """
    loaded = parse_csv_logins(data, _CSV_KEYS, "keepassxc", tag_separator=",", group="group")
    live: list[Entry] = []
    for entry in loaded.entries:
        parts = [p for p in (entry.group or "").split("/") if p]
        below = parts[1:]  # the first part is always the root group
        if below and below[0] in _RECYCLE_NAMES:
            loaded.skipped.append(f"{entry.where}: in the recycle bin (deleted in KeePassXC)")
            continue
        if below:
            entry.tags.append("/".join(below))
        live.append(entry)
    loaded.entries = live
    return loaded


# KeePassXC's recycle bin group as it names it (its CSV carries no UUID to compare): English
# and the translations KeePassXC ships for the languages its users most often run.
_RECYCLE_NAMES = {"Recycle Bin", "回收站", "資源回收筒", "Papierkorb", "Corbeille", "Papelera", "Cestino", "ごみ箱", "Корзина"}
