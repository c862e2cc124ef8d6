"""Request types of cloud object sync (API-1; CL-2, CL-3; issue 21).

Keys reach the engine only in ``cloud_add`` (the CLI reads them from the environment or
standard input); no answer ever carries them back (CL-2).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import Request

__all__ = ["CloudAdd", "CloudAccounts", "CloudRemove", "CloudSync", "CloudBegin", "CloudComplete"]

Name = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
Bucket = Annotated[str, msgspec.Meta(pattern="^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
Prefix = Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9_.=/-]{0,200}$")]
Region = Annotated[str, msgspec.Meta(pattern="^[a-z0-9-]{0,40}$")]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]


class CloudAdd(Request, tag="cloud_add"):
    kind: Literal["s3"]
    name: Name
    endpoint: Url
    bucket: Bucket
    access_key_id: Key
    secret_access_key: Key
    prefix: Prefix = ""
    region: Region = ""


class CloudAccounts(Request, tag="cloud_accounts"):
    pass


class CloudRemove(Request, tag="cloud_remove"):
    name: Name


class CloudSync(Request, tag="cloud_sync"):
    name: Name | None = None


class CloudBegin(Request, tag="cloud_login_begin"):
    """CL-1: start a browser sign-in; the engine keeps the PKCE verifier and answers the
    authorize URL (challenge and state only) and a ticket."""

    kind: Literal["onedrive", "gdrive"]
    name: Name
    client_id: Key
    redirect_uri: Url
    client_secret: Annotated[str, msgspec.Meta(max_length=2000)] = ""


class CloudComplete(Request, tag="cloud_login_complete"):
    """CL-1: what the browser brought back to the CLI's loopback listener."""

    ticket: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    code: Key
    state: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
