"""``[[wikilinks]]`` in a note's body: which notes it names, and which attachments (DT-8).

The forms Obsidian and basic-memory write:

* ``[[Title]]``, ``[[Title|shown text]]``, ``[[Title#Heading]]``, ``[[Title#^block|text]]``:
  a link to the note called ``Title`` (heading, block and shown text are not part of the name);
* ``[[Folder/Title]]`` and ``[[Title.md]]``: the same note named by its file;
* ``![[Title]]`` embeds a note (still a link); ``![[diagram.png]]`` or ``[[paper.pdf]]``
  name an attachment, a file that is not a note: listed apart, never a graph link.

Links inside code (fenced blocks and inline ``code``) are text, not links. Pure functions:
the service resolves names to items (engine/service/handlers/wikilinks.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["WikiLinks", "parse", "name_variants", "NOTE_SUFFIXES"]

NOTE_SUFFIXES = (".md", ".markdown")
MAX_NAME = 200

_LINK = re.compile(r"(!?)\[\[([^\[\]\n]{1,400})\]\]")
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,}).*?^(?P=fence)[`~]*[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"(`+)[^`\n].*?\1", re.DOTALL)
# Attachment suffixes (Obsidian's "accepted file formats" and common documents): a closed list,
# so a note called "Version 2.0" or "Node.js" stays a note.
_ATTACHMENT_SUFFIX = re.compile(
    r"\.(?:png|jpe?g|gif|bmp|svg|webp|avif|pdf|mp3|wav|m4a|ogg|flac|3gp|webm|mp4|mkv|mov|ogv|canvas|base"
    r"|docx?|xlsx?|pptx?|odt|ods|txt|csv|zip|json|html?)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class WikiLinks:
    notes: list[str]  # distinct note names in order of first use
    attachments: list[str]  # distinct attachment names in order of first use


def _without_code(text: str) -> str:
    if "`" not in text and "~" not in text:  # no code to strip (most notes): skip two scans
        return text
    text = _FENCE.sub(" ", text)
    return _INLINE_CODE.sub(" ", text)


def _target(inner: str) -> str:
    """``Title#Heading|shown`` → ``Title``; an empty result is a link within the same note."""
    target = inner.split("|", 1)[0]
    target = target.split("#", 1)[0]
    return target.strip()


def parse(body: str) -> WikiLinks:
    notes: dict[str, None] = {}
    attachments: dict[str, None] = {}
    if "[[" not in body:
        return WikiLinks([], [])
    for match in _LINK.finditer(_without_code(body)):
        name = _target(match.group(2))
        if not name or len(name) > MAX_NAME:
            continue
        if _ATTACHMENT_SUFFIX.search(name):
            attachments.setdefault(name, None)
        else:
            notes.setdefault(name, None)
    return WikiLinks(list(notes), list(attachments))


def name_variants(name: str) -> list[str]:
    """The keys a name may match a title by, most specific first, case-folded: the name as
    written, without a note suffix, and the last path part (``Folder/Title.md`` → ``title``)."""
    variants = [name]
    lower = name.lower()
    for suffix in NOTE_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            variants.append(name[: -len(suffix)])
            break
    last = variants[-1].rsplit("/", 1)[-1]
    if last and last != variants[-1]:
        variants.append(last)
    return list(dict.fromkeys(v.strip().casefold() for v in variants if v.strip()))
