"""Who is calling: the elevation namespace and the surface the request came from."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Caller"]


@dataclass(frozen=True)
class Caller:
    namespace: str  # e.g. "cli:1234" (API-3); remote surfaces use "ws:remote"/"relay:remote"
    surface: str = "ipc"  # "ipc", "mcp", "dashboard"
    uid: int | None = None
    # Asset kinds this caller may not read through search/retrieve/ask (an MCP grant without
    # transcripts hides "transcript", AG-5).
    hidden_kinds: frozenset[str] = frozenset()
