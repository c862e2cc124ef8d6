"""Requests of file assets (FI-1) and of `memories run` (RN-1, API-7)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import AssetRef, Request, Tags, Title, VaultRef

__all__ = [
    "CHUNKS_PER_FRAME",
    "CHUNKS_PER_BINARY",
    "CHUNKS_PER_PULL",
    "FileBegin",
    "FileChunk",
    "FilePull",
    "FileCommit",
    "FileAbort",
    "FileOpen",
    "FileRead",
    "FileClose",
    "FileList",
    "FileEdit",
    "RunBoundPrepare",
    "RunBoundFinish",
]

# Chunks of 256 KiB per request or answer: 2 MiB of data, ~2.8 MB of base64, well inside a frame.
CHUNKS_PER_FRAME = 8
# Chunks per request or answer when they travel as the frame's binary part (no base64): 8 MiB.
CHUNKS_PER_BINARY = 32
# Chunks per `file_pull` (the engine reads them from the client's file itself): 8 MiB.
CHUNKS_PER_PULL = 32
ChunkSize = Annotated[int, msgspec.Meta(ge=0, le=256 * 1024)]
Handle = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
# One base64 chunk of at most 256 KiB (344 ASCII characters per 256 bytes).
ChunkText = Annotated[str, msgspec.Meta(max_length=349_528)]
Index = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
# What identifies a file's content without reading it (FI-2): st_dev, st_ino, st_size,
# st_mtime_ns, st_ctime_ns, as the CLI saw them when it opened the file.
Identity = Annotated[list[int], msgspec.Meta(min_length=5, max_length=5)]
# A file descriptor number in the client process.
Descriptor = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
FileName = Annotated[str, msgspec.Meta(max_length=255)]


class FileBegin(Request, tag="file_begin"):
    """Start writing a file revision of ``size`` bytes (a new file, or a new revision of ``id``)."""

    size: Annotated[int, msgspec.Meta(ge=0, le=1 << 40)]
    # Without a title: a new file is titled by its name; a new revision keeps the current title.
    title: Title | None = None
    tags: Tags = []
    name: FileName = ""
    id: AssetRef | None = None
    vault: VaultRef | None = None
    # Whether search indexes the file's text (issue 27: off unless asked for, per file); a new
    # revision (``id``) keeps the file's current setting when this is left out.
    searchable: bool | None = None
    # A client on this machine (Linux) offers the file it opened instead of sending its bytes:
    # its descriptor number and what identifies the file (see engine/files/source.py). The
    # engine reads it itself when it can open that descriptor and finds the same file;
    # the answer then has ``"pull": true`` and the client sends ``file_pull`` requests.
    fd: Descriptor | None = None
    identity: Identity | None = None


class FileChunk(Request, tag="file_chunk"):
    """Chunks ``index``, ``index + 1``, … either as base64 ``data`` or as the frame's binary
    part (``payload``) cut into ``sizes`` — exactly one of the two."""

    upload: Handle
    index: Index
    data: Annotated[list[ChunkText], msgspec.Meta(max_length=CHUNKS_PER_FRAME)] = []
    sizes: Annotated[list[ChunkSize], msgspec.Meta(max_length=CHUNKS_PER_BINARY)] = []
    payload: bytes | None = None


class FilePull(Request, tag="file_pull"):
    """Chunks ``index`` … ``index + count - 1`` read by the engine from the file the upload's
    client offered at ``file_begin`` (``"pull": true`` in its answer)."""

    upload: Handle
    index: Index
    count: Annotated[int, msgspec.Meta(ge=1, le=CHUNKS_PER_PULL)]


class FileCommit(Request, tag="file_commit"):
    upload: Handle
    # The SHA-256 (hex) the client computed while reading: a file that changed while it was read is
    # refused. Left out only for an upload the engine read itself (``file_pull``).
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None


class FileAbort(Request, tag="file_abort"):
    upload: Handle


class FileOpen(Request, tag="file_open"):
    """An authorized read (an intent is committed first) of one revision of a file."""

    id: AssetRef
    rev: AssetRef | None = None


class FileRead(Request, tag="file_read"):
    read: Handle
    index: Index
    count: Annotated[int, msgspec.Meta(ge=1, le=CHUNKS_PER_BINARY)] = CHUNKS_PER_FRAME
    # True: the chunks come back as the answer's binary part with their ``sizes`` (up to
    # CHUNKS_PER_BINARY); false: as base64 ``data`` (up to CHUNKS_PER_FRAME).
    binary: bool = False


class FileClose(Request, tag="file_close"):
    read: Handle


class FileList(Request, tag="file_list"):
    vault: VaultRef | None = None
    tag: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] | None = None


class FileEdit(Request, tag="file_edit"):
    """A new revision of a file with the same bytes: its title, tags or search setting changed."""

    id: AssetRef
    title: Title | None = None
    tags: Tags | None = None
    searchable: bool | None = None


EnvName = Annotated[str, msgspec.Meta(pattern="^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
SecretRef = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]


class RunBoundPrepare(Request, tag="run_bound_prepare"):
    """Resolve secrets for `memories run` (API-7): by label, ``ID:LABEL`` or ``card:ID#field``."""

    env: Annotated[dict[EnvName, SecretRef], msgspec.Meta(max_length=64)] = {}
    # Labels named by {{secret:LABEL}} in a template file.
    template: Annotated[list[SecretRef], msgspec.Meta(max_length=64)] = []


class RunBoundFinish(Request, tag="run_bound_finish"):
    """Audit how the program run with the secrets ended (API-7)."""

    run: Handle
    exit_code: Annotated[int, msgspec.Meta(ge=-255, le=255)]
