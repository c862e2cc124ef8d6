"""Request types of the MCP feature (API-1): grants and the agent call envelope."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from engine.agents.grants import Scope
from engine.service.requests import Request

__all__ = ["McpGrantCreate", "McpGrantList", "McpGrantRevoke", "McpCall", "McpWhoami"]

GrantName = Annotated[str, msgspec.Meta(pattern="^[a-z0-9][a-z0-9_-]{0,31}$")]
VaultName = Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class McpGrantCreate(Request, tag="mcp_grant"):
    """Create a grant (needs elevation); the token is returned once and never stored."""

    name: GrantName
    scope: Scope
    vaults: Annotated[list[VaultName], msgspec.Meta(min_length=1, max_length=64)] = msgspec.field(
        default_factory=lambda: ["default"]
    )
    # AG-5: the agent may read imported transcripts (off by default).
    transcripts: bool = False
    # AG-11: with transcripts, only the sessions whose working directory is inside this absolute path.
    transcripts_project: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # AG-13: take over the notebook of a revoked grant of the same name (agent connect again).
    keep_notebook: bool = False


class McpGrantList(Request, tag="mcp_grants"):
    include_revoked: bool = False


class McpGrantRevoke(Request, tag="mcp_revoke"):
    name: GrantName


class McpCall(Request, tag="mcp_call"):
    """One agent request on behalf of a grant: authenticated, scope-checked, then dispatched."""

    token: Token
    request: dict[str, Any]


class McpWhoami(Request, tag="mcp_whoami"):
    """Check a token at MCP server start-up: the grant's name and scope, nothing else."""

    token: Token
