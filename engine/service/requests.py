"""The typed ``Request`` union (API-1): JSON objects with a snake_case ``op``.

Unknown top-level fields are rejected (``forbid_unknown_fields``). Each request
type is registered with its handler in ``engine.service.registry``; later
features add their own request modules without touching this one.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = [
    "Request",
    "Title",
    "Body",
    "Tags",
    "Meta",
    "Password",
    "AssetRef",
    "ImportItem",
]

Title = Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
Body = Annotated[str, msgspec.Meta(max_length=8 * 1024 * 1024)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Tags = Annotated[list[Tag], msgspec.Meta(max_length=64)]
MetaKey = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Meta = Annotated[dict[MetaKey, Annotated[str, msgspec.Meta(max_length=10_000)]], msgspec.Meta(max_length=64)]
Password = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
AssetRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Kind = Annotated[str, msgspec.Meta(pattern="^[a-z_]{1,32}$")]
# A vault by name (`memories vaults`); an op without one acts on the default vault.
VaultRef = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class Request(msgspec.Struct, tag_field="op", forbid_unknown_fields=True, kw_only=True):
    """Base of every request; subclasses set ``tag=`` to their snake_case op name."""


# -- session -------------------------------------------------------------------------
class DesktopStatus(Request, tag="desktop_status"):
    pass


class DaemonInfo(Request, tag="daemon_info"):
    pass


class Init(Request, tag="init"):
    password: Password


class Unlock(Request, tag="unlock"):
    password: Password


class Lock(Request, tag="lock"):
    pass


class Sudo(Request, tag="sudo"):
    password: Password


class Shutdown(Request, tag="shutdown"):
    pass


# -- assets --------------------------------------------------------------------------
class Put(Request, tag="put"):
    title: Title
    body: Body = ""
    tags: Tags = []
    meta: Meta = {}
    kind: Kind = "memory"
    vault: VaultRef | None = None


class Edit(Request, tag="edit"):
    id: AssetRef
    base: AssetRef | None = None
    resolve: bool = False
    # Refuse (``stale_base``) unless ``base`` is still the item's only head, instead of keeping
    # both versions as a conflict (HI-4): a window saving over a change made elsewhere (DT-7).
    current_only: bool = False
    title: Title | None = None
    body: Body | None = None
    tags: Tags | None = None
    meta: Meta | None = None


class Get(Request, tag="get"):
    id: AssetRef
    # One revision (any, not only a head) instead of the current heads; shown redacted (CD-7).
    rev: AssetRef | None = None
    # Only an asset of this vault (asset IDs are global; this checks where it lives).
    vault: VaultRef | None = None


class ListAssets(Request, tag="list"):
    limit: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 100
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    tag: Tag | None = None
    kind: Kind | None = None
    vault: VaultRef | None = None
    # updated: most recently changed first; oldest: least recently changed first; title: A to Z.
    sort: Literal["updated", "oldest", "title"] = "updated"


class Delete(Request, tag="delete"):
    id: AssetRef


class History(Request, tag="history"):
    id: AssetRef


class RestoreRevision(Request, tag="restore_revision"):
    """DT-8: an earlier revision's content as a new revision (also undeletes); ``rev`` None
    means the newest revision that is not a deletion."""

    id: AssetRef
    rev: AssetRef | None = None


class Trash(Request, tag="trash"):
    """DT-8: deleted items (every head a tombstone), newest deletion first."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 200


class Diff(Request, tag="diff"):
    id: AssetRef
    rev_a: AssetRef | None = None
    rev_b: AssetRef | None = None


# -- transfer ------------------------------------------------------------------------
class ImportItem(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    title: Title
    body: Body
    tags: Tags = []
    meta: Meta = {}


class ImportBatch(Request, tag="import_batch"):
    items: Annotated[list[ImportItem], msgspec.Meta(max_length=5000)]
    vault: VaultRef | None = None
    # More batches of the same import follow: the search index catches up once they are in
    # (searches say "partial" meanwhile), not beside them.
    more: bool = False


class Export(Request, tag="export"):
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=2000)] = 500
    vault: VaultRef | None = None


class WikilinksSync(Request, tag="wikilinks_sync"):
    """DT-8: read notes again and bring their ``[[wikilink]]`` graph links up to date;
    ``ids`` None means every ordinary item of the vault."""

    ids: Annotated[list[AssetRef], msgspec.Meta(max_length=5000)] | None = None
    vault: VaultRef | None = None


# -- audit (AU-1) --------------------------------------------------------------------
class Audit(Request, tag="audit"):
    """Read the audit log, newest first; times are Unix milliseconds, ``actor`` a namespace or its prefix."""

    since_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    until_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None
    actor: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    operation: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50
