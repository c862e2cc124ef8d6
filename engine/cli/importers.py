"""Reading and parsing for `memories import`: Markdown with front matter, and JSONL (outside bytes).

Import reads only what it was given:

- A folder is walked with an explicit stack (no recursion). On POSIX each directory is
  opened relative to its parent's descriptor (``O_NOFOLLOW``) and checked by device and
  inode against what the parent listed, so neither the recursion limit nor PATH_MAX bounds
  the depth, and a directory swapped for a link mid-walk is noticed instead of followed.
- Inside a folder, symbolic links (to files or folders, inside or outside it) are never
  followed, and FIFOs, sockets and devices are never opened: each is skipped with a
  warning naming it. Folders whose name starts with "." are skipped silently.
- Files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be regular after
  opening (``fstat``), so a file swapped for a link or a FIFO after the listing is neither
  followed nor waited on. The path named on the command line may itself be a link.
- A Markdown file, and one JSONL line, may hold at most ``MAX_NOTE_BYTES``.
- Every note is checked against the request type the engine applies (``ImportItem``:
  the same title, tag and meta limits as ``put``) before anything is sent, so an invalid
  file imports nothing. Nothing is ever truncated.

Every problem is an ``ImportFormatError`` whose message names the file (and line).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.ipc.framing import MAX_FRAME_BYTES
from engine.service.requests import ImportItem

__all__ = [
    "ImportFormatError",
    "Loaded",
    "MARKDOWN_SUFFIXES",
    "MAX_NOTE_BYTES",
    "Note",
    "PATH_META",
    "check_item",
    "file_name_for",
    "load_source",
    "parse_jsonl_line",
    "parse_markdown",
    "read_markdown_note",
]

MARKDOWN_SUFFIXES = (".md", ".markdown")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
_BOM = b"\xef\xbb\xbf"
_JSONL_KEYS = {"title", "body", "tags", "meta"}

# Per Markdown file and per JSONL line (one note each).
MAX_NOTE_BYTES = 4 * 1024 * 1024
# One note, JSON-encoded, must fit in a batch frame by itself (room left for the envelope).
MAX_NOTE_WIRE_BYTES = MAX_FRAME_BYTES - 4096

_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
# Directory descriptors (openat, fdopendir) where the platform has them; else paths.
_FD_WALK = os.open in os.supports_dir_fd and os.scandir in os.supports_fd and hasattr(os, "O_DIRECTORY")


class ImportFormatError(ValueError):
    """The input is malformed; the message names where (never echoes content)."""


@dataclass(frozen=True)
class Note:
    """One validated note: where it came from, the item to send, and its encoded size."""

    where: str
    item: dict[str, Any]
    wire_bytes: int


@dataclass
class Loaded:
    notes: list[Note] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one sentence per file left out, naming it


class _Skipped(Exception):
    """Not a regular file (found only once opened): skip it with this warning."""


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"


def shown(text: str) -> str:
    """A file name as printable text: undecodable bytes appear as \\xNN, never as lone surrogates."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


# -- parsing ---------------------------------------------------------------------------
# Front matter is the YAML subset Obsidian, basic-memory and our own export write: `key: value`,
# `key: [a, "b, c"]` and `key:` followed by `- item` lines; quoted values as YAML quotes them
# ("…" with JSON escapes, '…' with '' for a quote). Anything else (nested maps, block scalars,
# anchors) is refused with the line named: a well-kept YAML library is not a dependency of
# this app, and a subset parser that refuses what it does not know loses nothing silently.
_BLOCK_SCALAR = ("|", ">", "&", "*", "!", "{")


def _scalar(text: str, where: str, number: int) -> str:
    text = text.strip()
    if text[:1] == '"':
        if len(text) < 2 or text[-1] != '"':
            raise ImportFormatError(f"{where}: line {number}: a quoted value is not closed.")
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise ImportFormatError(
                f"{where}: line {number}: a double-quoted value has an escape YAML and JSON disagree on."
            ) from None
        if not isinstance(value, str):
            raise ImportFormatError(f"{where}: line {number}: a quoted value is not closed.")
        return value
    if text[:1] == "'":
        inner = text[1:-1] if len(text) >= 2 and text[-1] == "'" else None
        if inner is None or "'" in inner.replace("''", ""):
            raise ImportFormatError(f"{where}: line {number}: a quoted value is not closed.")
        return inner.replace("''", "'")
    if text.startswith(_BLOCK_SCALAR):
        raise ImportFormatError(
            f"{where}: line {number}: front matter here takes plain values, quoted values and lists, "
            "not YAML blocks, anchors or maps."
        )
    return text


def _inline_list(text: str, where: str, number: int) -> list[str]:
    """``[a, "b, c", 'd']``: commas inside quotes belong to the value."""
    inner = text.strip()[1:-1]
    parts: list[str] = []
    start = 0
    quote = ""
    at = 0
    while at < len(inner):
        char = inner[at]
        if quote:
            if char == "\\" and quote == '"':
                at += 1
            elif char == quote:
                if quote == "'" and inner[at + 1 : at + 2] == "'":
                    at += 1
                else:
                    quote = ""
        elif char in "\"'" and not inner[start:at].strip():
            quote = char
        elif char == ",":
            parts.append(inner[start:at])
            start = at + 1
        elif char in "[]{}":
            raise ImportFormatError(f"{where}: line {number}: a list inside a list is not supported in front matter.")
        at += 1
    if quote:
        raise ImportFormatError(f"{where}: line {number}: a quoted value is not closed.")
    parts.append(inner[start:])
    values = [_scalar(part, where, number) for part in parts if part.strip()]
    return [v for v in values if v]


def _front_matter(lines: list[str], where: str) -> tuple[dict[str, Any], int]:
    """Parse the subset: `key: value`, `key: [a, b]`, and `key:` + `- item` lists; returns the closing line."""
    data: dict[str, Any] = {}
    current_list: list[str] | None = None
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.rstrip("\r\n")
        if line.strip() == "---":
            return data, number
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        stripped = line.strip()
        if (stripped.startswith("- ") or stripped == "-") and current_list is not None:
            item = stripped[2:].strip()
            if item.startswith("["):
                raise ImportFormatError(f"{where}: line {number}: a list inside a list is not supported in front matter.")
            if item:
                current_list.append(_scalar(item, where, number))
            continue
        key, sep, value = line.partition(":")
        key = _scalar(key, where, number) if key.strip()[:1] in "\"'" else key.strip()
        if not sep or not key or line[0].isspace():
            raise ImportFormatError(f"{where}: line {number}: front matter expects `key: value`.")
        if key in data:
            raise ImportFormatError(f"{where}: line {number}: the key appears twice in the front matter.")
        value = value.strip()
        if not value:
            current_list = []
            data[key] = current_list
        elif value.startswith("[") and value.endswith("]"):
            data[key] = _inline_list(value, where, number)
            current_list = None
        else:
            data[key] = _scalar(value, where, number)
            current_list = None
    raise ImportFormatError(f"{where}: the front matter is not closed with `---`.")


def list_text(values: list[str]) -> str:
    """A front-matter list as one meta value: "a, b", or a JSON array when an item holds a comma
    (so `export --format markdown` writes the same list back)."""
    if any("," in v for v in values):
        return json.dumps(values, ensure_ascii=False)
    return ", ".join(values)


# Characters a file name may not hold on Windows, macOS or Linux, and those Obsidian refuses in a
# note's name (#, ^, [, ], |): `export --format markdown` replaces them in a title.
_UNSAFE_NAME = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|#^\[\]]')
MAX_NAME_CHARS = 120
MAX_PATH_CHARS = 1000


def file_name_for(title: str) -> str:
    """The file a note without a recorded path is exported to: its title, made safe, + ".md"."""
    name = _UNSAFE_NAME.sub("-", title).strip().strip(".")
    return (name[:MAX_NAME_CHARS].strip() or "untitled") + ".md"


def _path_says_more(path: str, title: str) -> bool:
    """Keep a file's path unless it is just what export would write for the title (a top-level
    `Title.md`): so a note made here, exported and imported again, is the same note."""
    if len(path) > MAX_PATH_CHARS:
        return False  # too long to write back anywhere; the note imports without it
    return "/" in path or path != file_name_for(title)


# The meta key that keeps where a note came from inside an imported folder (DT-8): its path
# relative to the folder, with "/" between parts. `export --format markdown` writes it back there.
PATH_META = "path"


def parse_markdown(text: str, where: str, fallback_title: str, *, path: str | None = None) -> dict[str, Any]:
    """Front matter (title, tags; other keys → meta) and body; a leading BOM is ignored. No limits here.

    ``path`` (a file inside an imported folder) is kept in meta under ``path``, and a note
    without a front-matter title is called by its file name, as Obsidian and basic-memory
    name notes (what their ``[[wikilinks]]`` say). A single file falls back to its first
    ``# heading`` instead."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    meta: dict[str, str] = {}
    tags: list[str] = []
    title = ""
    body_start = 0
    if lines and lines[0].strip() == "---":
        data, end = _front_matter(lines, where)
        body_start = end
        for key, value in data.items():
            if key == "title":
                title = value if isinstance(value, str) else ", ".join(value)
            elif key in ("tags", "tag"):
                tags = [value] if isinstance(value, str) else list(value)
                tags = [t for tag in tags for t in (tag.split(",") if "," in tag else [tag])]
                tags = [t.strip().removeprefix("#") for t in tags if t.strip().removeprefix("#").strip()]
            else:
                meta[key] = value if isinstance(value, str) else list_text(value)
    body = "".join(lines[body_start:]).strip("\n")
    if path is not None:
        title = title or fallback_title
        if _path_says_more(path, title):
            meta.setdefault(PATH_META, path)
    elif not title:
        for line in body.splitlines():
            if line.startswith("# "):
                title = line[2:].strip()
                break
    return {"title": title or fallback_title, "body": body, "tags": tags, "meta": meta}


def parse_jsonl_line(line: str, where: str, number: int) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        raise ImportFormatError(f"{where}: line {number}: not valid JSON.") from None
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{where}: line {number}: expected a JSON object.")
    unknown = sorted(set(obj) - _JSONL_KEYS)
    if unknown:
        names = ", ".join(repr(k[:40]) for k in unknown[:5])
        raise ImportFormatError(f"{where}: line {number}: unknown key(s) {names}; allowed: title, body, tags, meta.")
    title, body = obj.get("title"), obj.get("body")
    tags, meta = obj.get("tags", []), obj.get("meta", {})
    if not isinstance(title, str) or not title:
        raise ImportFormatError(f"{where}: line {number}: `title` must be a non-empty string.")
    if not isinstance(body, str):
        raise ImportFormatError(f"{where}: line {number}: `body` must be a string.")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ImportFormatError(f"{where}: line {number}: `tags` must be a list of strings.")
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ImportFormatError(f"{where}: line {number}: `meta` must map strings to strings.")
    return {"title": title, "body": body, "tags": tags, "meta": meta}


# A JSONL line is decoded straight into the engine's request type, in C: the JSON syntax, the
# keys and every limit checked in one pass, and the note encoded once for its size (issue 32: the
# per-line json.loads, checks, msgspec.convert and json.dumps were most of the CLI's second of a
# 10k-note import). Any line this refuses goes through the checks above instead, which say what
# is wrong with it exactly as before; so a line is accepted here only if they would accept it.
_fast_item = msgspec.json.Decoder(ImportItem).decode
_fast_encode = msgspec.json.Encoder().encode


def _fast_jsonl_note(raw: bytes, where: str) -> Note | None:
    """The checked note of one JSONL line, or None when the line needs the full checks."""
    try:
        parsed = _fast_item(raw)
    except msgspec.DecodeError:  # also ValidationError, invalid UTF-8 and lone surrogate escapes
        return None
    item = {"title": parsed.title, "body": parsed.body, "tags": parsed.tags, "meta": parsed.meta}
    size = len(_fast_encode(parsed))
    if size > MAX_NOTE_WIRE_BYTES:
        return None
    return Note(where, item, size)


def check_item(item: dict[str, Any], where: str) -> Note:
    """The engine's own constraints (``ImportItem``, the limits of `put`), and that it fits one frame."""
    try:
        msgspec.convert(item, type=ImportItem)
    except msgspec.ValidationError as exc:
        # msgspec names the field and the limit, never the value.
        raise ImportFormatError(f"{where}: {exc} (the limits of `memories put`).") from None
    try:
        wire = json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ImportFormatError(f"{where}: contains a lone UTF-16 surrogate escape, which is not text.") from None
    if len(wire) > MAX_NOTE_WIRE_BYTES:
        raise ImportFormatError(
            f"{where}: too large once encoded for the engine (over the {_mib(MAX_FRAME_BYTES)} message limit)."
        )
    return Note(where, item, len(wire))


def read_markdown_note(data: bytes, where: str, fallback_title: str, *, path: str | None = None) -> Note:
    """Bytes of one Markdown file → a checked note; any malformation is an ImportFormatError naming ``where``."""
    if len(data) > MAX_NOTE_BYTES:
        raise ImportFormatError(_too_large(where))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ImportFormatError(f"{where}: not UTF-8 text.") from None
    return check_item(parse_markdown(text, where, fallback_title, path=path), where)


def _too_large(where: str) -> str:
    return f"{where}: larger than the {_mib(MAX_NOTE_BYTES)} limit for one note."


# -- reading files -----------------------------------------------------------------------
def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def _skip_message(where: str, what: str) -> str:
    if what == "a symbolic link":
        return f"{where}: a symbolic link; import never follows links inside a folder."
    return f"{where}: {what}; import reads only regular files."


def _read_file(name: str, dir_fd: int | None, where: str, *, follow: bool) -> bytes:
    """Open without blocking (and without following a final link unless ``follow``), check it is regular, read ≤ the limit."""
    try:
        fd = os.open(name, _FILE_FLAGS | (0 if follow else _NOFOLLOW), dir_fd=dir_fd)
    except OSError as exc:
        if not follow and exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _Skipped(_skip_message(where, "a symbolic link")) from None
        raise ImportFormatError(f"{where}: cannot be read ({exc.__class__.__name__}).") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Skipped(_skip_message(where, _kind(info.st_mode)))
        if info.st_size > MAX_NOTE_BYTES:
            raise ImportFormatError(_too_large(where))
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_NOTE_BYTES:  # the file may grow after fstat
            chunk = os.read(fd, MAX_NOTE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_NOTE_BYTES:
            raise ImportFormatError(_too_large(where))
        return b"".join(chunks)
    except OSError as exc:
        raise ImportFormatError(f"{where}: cannot be read ({exc.__class__.__name__}).") from None
    finally:
        os.close(fd)


def _stem(name: str) -> str:
    lower = name.lower()
    for suffix in MARKDOWN_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return shown(name[: -len(suffix)])
    return shown(name)


# -- walking a folder ----------------------------------------------------------------------
Ident = tuple[int, int]


@dataclass
class _Frame:
    rel: str  # relative to the root, "" for the root
    ident: Ident
    path: str  # used only without directory descriptors
    subdirs: list[tuple[str, Ident]]  # still to visit, last first


def _ident(info: os.stat_result) -> Ident:
    return (info.st_dev, info.st_ino)


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _scan(handle: int | str, rel: str, display: str, warnings: list[str]) -> tuple[list[str], list[tuple[str, Ident]]]:
    """One directory: Markdown files to read and sub-folders to visit; everything else skipped."""
    files: list[str] = []
    subdirs: list[tuple[str, Ident]] = []
    try:
        with os.scandir(handle) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        raise ImportFormatError(f"{_where(display, rel)}: cannot be listed ({exc.__class__.__name__}).") from None
    for entry in entries:
        where = _where(display, _join(rel, entry.name))
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            warnings.append(f"{where}: vanished or cannot be examined.")
            continue
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            if not entry.name.startswith("."):
                subdirs.append((entry.name, _ident(info)))
        elif stat.S_ISREG(mode):
            if entry.name.lower().endswith(MARKDOWN_SUFFIXES):
                files.append(entry.name)
        else:
            warnings.append(_skip_message(where, _kind(mode)))
    return files, subdirs


def _where(display: str, rel: str) -> str:
    return shown(os.path.join(display, rel) if rel else display)


def _changed(display: str, rel: str) -> ImportFormatError:
    return ImportFormatError(f"{_where(display, rel)}: the folder changed while it was being read.")


def _open_dir(name: str, dir_fd: int | None, expect: Ident, display: str, rel: str) -> int:
    try:
        fd = os.open(name, _DIR_FLAGS | (_NOFOLLOW if name != ".." else 0), dir_fd=dir_fd)
    except OSError:
        raise _changed(display, rel) from None
    if _ident(os.fstat(fd)) != expect:
        os.close(fd)
        raise _changed(display, rel)
    return fd


def _walk(root: Path, display: str, warnings: list[str]) -> Iterator[tuple[str, str, str, bytes]]:
    """Depth-first, in name order (a folder's files, then its sub-folders): (where, relative path, file name, bytes)."""
    try:
        info = os.stat(root)
        current: int | None = os.open(root, _DIR_FLAGS) if _FD_WALK else None
    except OSError as exc:
        raise ImportFormatError(f"{shown(display)}: cannot be read ({exc.__class__.__name__}).") from None
    try:
        if current is not None and _ident(os.fstat(current)) != _ident(info):
            raise _changed(display, "")
        frame = _Frame("", _ident(info), str(root), [])
        stack: list[_Frame] = []
        while True:
            handle: int | str = current if current is not None else frame.path
            files, subdirs = _scan(handle, frame.rel, display, warnings)
            for name in files:
                where = _where(display, _join(frame.rel, name))
                try:
                    if current is not None:
                        data = _read_file(name, current, where, follow=False)
                    else:
                        data = _read_file(os.path.join(frame.path, name), None, where, follow=False)
                except _Skipped as skipped:
                    warnings.append(str(skipped))
                    continue
                yield where, _join(frame.rel, name), name, data
            frame.subdirs = subdirs[::-1]
            stack.append(frame)
            while stack and not stack[-1].subdirs:
                done = stack.pop()
                if stack and current is not None:
                    parent = _open_dir("..", current, stack[-1].ident, display, done.rel)
                    os.close(current)
                    current = parent
            if not stack:
                return
            parent_frame = stack[-1]
            name, ident = parent_frame.subdirs.pop()
            rel = _join(parent_frame.rel, name)
            child_path = os.path.join(parent_frame.path, name)
            if current is not None:
                child = _open_dir(name, current, ident, display, rel)
                os.close(current)
                current = child
            elif os.path.islink(child_path):
                raise _changed(display, rel)
            frame = _Frame(rel, ident, child_path, [])
    finally:
        if current is not None:
            os.close(current)


# -- the entry point -------------------------------------------------------------------------
def load_source(path: Path) -> Loaded:
    """Read and check everything before anything is sent: a Markdown file, a folder of them, or a JSONL file."""
    loaded = Loaded()
    display = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ImportFormatError(f"{shown(display)}: no such file or folder.") from None
    except OSError as exc:
        raise ImportFormatError(f"{shown(display)}: cannot be read ({exc.__class__.__name__}).") from None
    if stat.S_ISDIR(info.st_mode):
        for where, rel, name, data in _walk(path, display, loaded.warnings):
            loaded.notes.append(read_markdown_note(data, where, _stem(name), path=shown(rel)))
        return loaded
    where = shown(path.name)
    lower = path.name.lower()
    if not lower.endswith(JSONL_SUFFIXES + MARKDOWN_SUFFIXES):
        raise ImportFormatError(f"{where}: import takes .md/.markdown files, folders of them, or .jsonl.")
    if not stat.S_ISREG(info.st_mode):
        raise ImportFormatError(f"{where}: {_kind(info.st_mode)}, not a regular file; import reads regular files and folders.")
    if lower.endswith(MARKDOWN_SUFFIXES):
        try:
            data = _read_file(str(path), None, where, follow=True)
        except _Skipped:
            raise ImportFormatError(f"{where}: not a regular file; import reads regular files and folders.") from None
        loaded.notes.append(read_markdown_note(data, where, _stem(path.name)))
        return loaded
    loaded.notes.extend(_read_jsonl(path, where))
    return loaded


def _read_jsonl(path: Path, where: str) -> Iterator[Note]:
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError as exc:
        raise ImportFormatError(f"{where}: cannot be read ({exc.__class__.__name__}).") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ImportFormatError(f"{where}: not a regular file; import reads regular files and folders.")
        with os.fdopen(os.dup(fd), "rb") as handle:
            number = 0
            while True:
                raw = handle.readline(MAX_NOTE_BYTES + 2)
                if not raw:
                    return
                number += 1
                line_where = f"{where}: line {number}"
                if len(raw.rstrip(b"\r\n")) > MAX_NOTE_BYTES:
                    raise ImportFormatError(_too_large(line_where))
                fast = _fast_jsonl_note(raw[3:] if number == 1 and raw.startswith(_BOM) else raw, line_where)
                if fast is not None:
                    yield fast
                    continue
                try:
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise ImportFormatError(f"{line_where}: not UTF-8 text.") from None
                item = parse_jsonl_line(text, where, number)
                if item is not None:
                    yield check_item(item, line_where)
    except OSError as exc:
        raise ImportFormatError(f"{where}: cannot be read ({exc.__class__.__name__}).") from None
    finally:
        os.close(fd)
