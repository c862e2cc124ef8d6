"""Where transcripts are on disk, which adapter reads a file, and reading one (AG-5)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from engine.errors import MemoriesError
from engine.transcripts import claude_code, codex
from engine.transcripts.model import Parsed, revision_id

__all__ = ["ADAPTERS", "default_roots", "discover", "adapter_for", "read_source", "Source", "MAX_FILE_BYTES"]

ADAPTERS: Final[dict[str, Callable[[bytes], Parsed]]] = {claude_code.ADAPTER: claude_code.parse, codex.ADAPTER: codex.parse}
# A session file above this is refused (a client does not write one this large).
MAX_FILE_BYTES: Final = 512 * 1024 * 1024


def default_roots(home: Path) -> list[tuple[Path, str]]:
    return [(home / ".claude" / "projects", claude_code.ADAPTER), (home / ".codex" / "sessions", codex.ADAPTER)]


def discover(paths: Iterable[Path]) -> list[Path]:
    """Every ``*.jsonl`` file named or under a named directory, sorted, without duplicates."""
    found: dict[Path, None] = {}
    for path in paths:
        if path.is_dir():
            for item in sorted(path.rglob("*.jsonl")):
                if item.is_file() and not item.is_symlink():
                    found.setdefault(item, None)
        elif path.is_file():
            found.setdefault(path, None)
        else:
            raise MemoriesError("not_found", "A transcript path given does not exist.")
    return list(found)


def adapter_for(path: Path, head: bytes) -> str | None:
    """The adapter for a file: by where it lives, else by what its first record looks like."""
    parts = path.parts
    for i in range(len(parts) - 1):
        if parts[i] == ".claude" and parts[i + 1] == "projects":
            return claude_code.ADAPTER
        if parts[i] == ".codex" and parts[i + 1] in ("sessions", "archived_sessions"):
            return codex.ADAPTER
    first = head.split(b"\n", 1)[0]
    if b'"payload"' in first and (b'"session_meta"' in first or b'"response_item"' in first):
        return codex.ADAPTER
    if b'"sessionId"' in head[:65536] or b'"type":"summary"' in first or b'"type": "summary"' in first:
        return claude_code.ADAPTER
    return None


@dataclass
class Source:
    path: Path
    adapter: str
    sha256: str
    size: int
    data: bytes

    def revision_id(self, adapter_version: str) -> str:
        return revision_id(self.sha256, adapter_version)


def read_source(path: Path, adapter: str | None = None) -> Source | None:
    """The file's bytes and digest, or None when no adapter recognises it."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        raise MemoriesError("io_error", "A transcript file could not be read.") from None
    if len(data) > MAX_FILE_BYTES:
        raise MemoriesError("invalid_input", "A transcript file is larger than 512 MiB.")
    name = adapter or adapter_for(path, data[:65536])
    if name is None:
        return None
    return Source(path=path, adapter=name, sha256=hashlib.sha256(data).hexdigest(), size=len(data), data=data)


def parse(source: Source) -> Parsed:
    return ADAPTERS[source.adapter](source.data)


def version_of(adapter: str) -> str:
    return {claude_code.ADAPTER: claude_code.VERSION, codex.ADAPTER: codex.VERSION}[adapter]
