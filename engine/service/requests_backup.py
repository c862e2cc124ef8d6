"""Typed requests of backup and restore (BK-1, BK-2): unknown fields are rejected by the base class."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from engine.service.requests import Body, Password, Request, VaultRef

__all__ = ["BackupCreate", "BackupVerify", "BackupProgress", "Restore", "ExportJson", "ImportJson", "JsonItem", "JsonLink"]

# An absolute path the engine reads or writes (the CLI resolves it against its own directory).
FilePath = Annotated[str, msgspec.Meta(min_length=2, max_length=4096, pattern="^/")]


class BackupCreate(Request, tag="backup_create"):
    path: FilePath
    password: Password


class BackupVerify(Request, tag="backup_verify"):
    path: FilePath
    password: Password


class BackupProgress(Request, tag="backup_progress"):
    pass


class Restore(Request, tag="restore"):
    path: FilePath
    backup_password: Password
    password: Password
    leave_shared: bool = False  # leave out the vaults shared with other people (issue 29)


# -- export --format memories-json and its import -----------------------------------------------
class ExportJson(Request, tag="export_memories_json"):
    """One page of every item of a vault, every card kind, with its links on the first page (sudo)."""

    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 200
    vault: VaultRef | None = None
    include_secrets: bool = False


class JsonHead(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # The summary as canonical JSON (bytes tagged {"$b": base64url}); bounded by the frame limit.
    summary: dict[str, Any]
    body: Body | None = None


class JsonItem(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
    kind: Annotated[str, msgspec.Meta(pattern="^[a-z_]{1,32}$")]
    heads: Annotated[list[JsonHead], msgspec.Meta(min_length=1, max_length=16)]


class JsonLink(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    src: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
    dst: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
    rel: Annotated[str, msgspec.Meta(max_length=64)] = ""
    confidence_ppm: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 1_000_000
    valid_till_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None


class ImportJson(Request, tag="import_memories_json"):
    """A batch of a memories-json file: items (credentials first), then links; existing IDs are skipped."""

    items: Annotated[list[JsonItem], msgspec.Meta(max_length=500)] = []
    links: Annotated[list[JsonLink], msgspec.Meta(max_length=5000)] = []
    vault: VaultRef | None = None
