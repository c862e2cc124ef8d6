"""Typed requests of the login ops (CD-10, IM-1): unknown fields are rejected by the base class."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import AssetRef, Body, Request, Tag, Tags, Title

__all__ = ["LoginEntry", "LoginNew", "LoginImportBatch", "LoginSecret", "LoginList"]

Text = Annotated[str, msgspec.Meta(min_length=1, max_length=320)]
Url = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]
Urls = Annotated[list[Url], msgspec.Meta(max_length=32)]
Secret = Annotated[str, msgspec.Meta(min_length=1, max_length=16 * 1024)]
Uri = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
FieldName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Fields = Annotated[dict[FieldName, Annotated[str, msgspec.Meta(max_length=10_000)]], msgspec.Meta(max_length=60)]
HiddenFields = Annotated[dict[FieldName, Secret], msgspec.Meta(max_length=32)]
Where = Annotated[str, msgspec.Meta(max_length=300)]
NoteText = Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]


class EarlierPassword(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One earlier password of a moved-in login, with when its source says it was replaced."""

    password: Secret
    when: Annotated[str, msgspec.Meta(max_length=40)] | None = None


class LoginEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One login: what `login new` sends, and one entry of an import batch."""

    title: Title
    username: Text | None = None
    urls: Urls = []
    password: Secret | None = None
    totp: Uri | None = None  # otpauth://totp/…
    notes: Body = ""
    tags: Tags = []
    fields: Fields = {}
    hidden: HiddenFields = {}
    note: NoteText | None = None  # a moved-in secure note's text (IM-1): kept protected, never body
    # Newest first; kept as the credential's earlier revisions (history), never as fields.
    password_history: Annotated[list[EarlierPassword], msgspec.Meta(max_length=100)] = []
    reprompt: bool = False  # every read of its secrets needs a fresh `memories sudo`
    where: Where = ""  # the entry's place in its source file, for error messages


class LoginNew(LoginEntry, Request, tag="login_new"):
    pass


class LoginImportBatch(Request, tag="login_import_batch"):
    """IM-1: every entry is validated first; the batch commits as one transaction, or not at all."""

    entries: Annotated[list[LoginEntry], msgspec.Meta(min_length=1, max_length=1000)]
    dry_run: bool = False
    # More batches of the same import follow (as for ``import_batch``): the search index catches
    # up once they are in.
    more: bool = False


class LoginSecret(Request, tag="login_secret"):
    """The login's password or current TOTP code, for `login copy-*` only (local, elevated)."""

    id: AssetRef
    what: Literal["password", "otp"]
    # An earlier password: 1 is the one before the current (the login's history, issue 33).
    previous: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0


class LoginHistory(Request, tag="login_history"):
    """When a login's password was changed: dates and numbers only, never a password."""

    id: AssetRef


class LoginList(Request, tag="login_list"):
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 10_000
    # Words that must each occur (ignoring case) in the title, username, a URL or a tag: how
    # a password manager's list is searched (`bw list items --search`, keepassxc-cli search).
    query: Annotated[str, msgspec.Meta(max_length=256)] = ""
    tag: Tag | None = None
