"""Request types of sync (API-1; SY-4, API-4, API-5): the listener, tokens, a sync run, status.

A sync token is never part of the TOML config (API-4): the CLI reads it from
``MEMORIES_SYNC_TOKEN`` or standard input and passes it in ``sync_run`` only.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import Request

__all__ = [
    "SyncServe",
    "SyncServeStop",
    "SyncStatus",
    "SyncTokenNew",
    "SyncTokenList",
    "SyncTokenRevoke",
    "SyncRun",
]

Url = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
FilePath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
Listen = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
DeviceRef = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
TokenId = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{4,16}$")]
Room = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_-]{22,128}$")]


class SyncServe(Request, tag="sync_serve"):
    listen: Listen = "127.0.0.1:7700"
    tls_cert: FilePath | None = None
    tls_key: FilePath | None = None
    allow_non_loopback: bool = False


class SyncServeStop(Request, tag="sync_serve_stop"):
    pass


class SyncStatus(Request, tag="sync_status"):
    pass


class SyncTokenNew(Request, tag="sync_token_new"):
    device: DeviceRef
    name: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class SyncTokenList(Request, tag="sync_token_list"):
    pass


class SyncTokenRevoke(Request, tag="sync_token_revoke"):
    token_id: TokenId


class SyncRun(Request, tag="sync_run"):
    url: Url | None = None
    token: Token | None = None
    relay: Url | None = None
    room: Room | None = None
    relay_token: Token | None = None
    ca_file: FilePath | None = None
    wait_seconds: Annotated[int, msgspec.Meta(ge=1, le=3600)] = 300
