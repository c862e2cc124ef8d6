"""Typed requests of the card ops (API-1): unknown fields are rejected by the base class."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import AssetRef, Body, Meta, Request, Tags, Title

__all__ = [
    "CardWrite",
    "CardRead",
    "CardLink",
    "LinkItem",
    "CardLinkMany",
    "CardUnlink",
    "Graph",
    "Connections",
    "RecallConnected",
    "ProtectedCard",
    "OtpCode",
    "ProtectSecret",
    "CredentialCopy",
    "LocalConfig",
    "LocalConfigGet",
]

Label = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Rel = Annotated[str, msgspec.Meta(max_length=100, pattern=r"^[A-Za-z0-9_.:\-]*$")]
Confidence = Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
When = Annotated[str, msgspec.Meta(min_length=4, max_length=40)]
Direction = Literal["out", "in", "both"]
CardType = Literal["knowledge", "brain", "persona"]
Secret = Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
Uri = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
Ref = Annotated[str, msgspec.Meta(min_length=1, max_length=300)]


class CardWrite(Request, tag="card_write"):
    """Create (no ``id``) or update a card. ``secrets`` restates the card's secret map."""

    id: AssetRef | None = None
    type: CardType | None = None
    base: AssetRef | None = None
    resolve: bool = False
    title: Title | None = None
    body: Body | None = None
    tags: Tags | None = None
    meta: Meta | None = None
    secrets: dict[Label, AssetRef] | None = None


class CardRead(Request, tag="card_read"):
    id: AssetRef


class LinkItem(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    src: AssetRef
    dst: AssetRef
    rel: Rel = ""
    confidence: Confidence = 1.0
    valid_till: When | None = None


class CardLink(LinkItem, Request, tag="card_link"):
    pass


class CardLinkMany(Request, tag="card_link_many"):
    links: Annotated[list[LinkItem], msgspec.Meta(min_length=1, max_length=5000)]


class CardUnlink(Request, tag="card_unlink"):
    src: AssetRef
    dst: AssetRef
    rel: Rel | None = None


class Graph(Request, tag="graph"):
    id: AssetRef | None = None
    depth: Annotated[int, msgspec.Meta(ge=1, le=5)] = 2
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 10_000


class Connections(Request, tag="connections"):
    id: AssetRef
    depth: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    direction: Direction = "both"
    rel: Rel | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500


class RecallConnected(Request, tag="recall_connected"):
    ids: Annotated[list[AssetRef], msgspec.Meta(min_length=1, max_length=16)]
    hops: Annotated[int, msgspec.Meta(ge=1, le=4)] = 2
    decay: Confidence = 0.5
    direction: Direction = "both"
    limit: Annotated[int, msgspec.Meta(ge=1, le=200)] = 20


class ProtectedCard(Request, tag="protected_card"):
    title: Title
    body: Body = ""
    tags: Tags = []
    account: Annotated[str, msgspec.Meta(min_length=1, max_length=320)] | None = None
    env: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)] | None = None
    token: Secret | None = None
    totp: Uri | None = None
    hotp: Uri | None = None


class OtpCode(Request, tag="otp_code"):
    id: Ref
    # TOTP only: the code for another moment (Unix seconds), to compare with a service's
    # clock or check RFC 6238 vectors; the vault owner can compute any code anyway.
    at: Annotated[int, msgspec.Meta(ge=0, le=2**40)] | None = None


class ProtectSecret(Request, tag="protect_secret"):
    id: AssetRef
    label: Label
    value: Secret


class CredentialCopy(Request, tag="credential_copy"):
    ref: Ref


PathText = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
DirName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]


class LocalConfig(Request, tag="local_config"):
    """CD-9: the client's version and directory metadata, kept in a device-only vault."""

    client_version: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    directories: Annotated[dict[DirName, PathText], msgspec.Meta(max_length=32)] = {}


class LocalConfigGet(Request, tag="local_config_get"):
    pass
