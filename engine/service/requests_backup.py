"""Typed requests of backup and restore (BK-1, BK-2): unknown fields are rejected by the base class."""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import Password, Request

__all__ = ["BackupCreate", "BackupVerify", "BackupProgress", "Restore"]

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
