"""Which tools ``tools/list`` shows an agent: only those its grant can call (issue 27).

Listing a tool the grant cannot use (``memory_delete`` to a read-only grant, ``recall_turn``
to a grant without transcripts) invites calls that can only fail, and tells the agent about
data it has no access to. The daemon's ``mcp_whoami`` answers the grant's capabilities and
whether it includes transcripts; a tool needs ``read`` when it is read-only, ``delete`` when
it is destructive, ``write`` otherwise (the flags its annotations publish), and a transcript
tool needs the transcripts flag too. The daemon still checks every call (AG-2): this only
shapes the list.

The grant is known once the vault has been unlocked while the server runs (grants are
encrypted with the vault); until then every tool is listed, and each call answers ``locked``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from engine.errors import MemoriesError
from engine.mcp.tools import TOOLS, TRANSCRIPT_TOOLS, ToolSpec

__all__ = ["GrantView", "needed_capability", "visible_tools"]


def needed_capability(spec: ToolSpec) -> str:
    if spec.capability is not None:
        return spec.capability
    if spec.read_only:
        return "read"
    return "delete" if spec.destructive else "write"


def visible_tools(view: dict[str, Any] | None) -> list[ToolSpec]:
    """The tools to list for a grant (``view`` from ``mcp_whoami``; ``None``: not known yet)."""
    if view is None:
        return list(TOOLS)
    capabilities = set(view.get("capabilities") or ())
    transcripts = view.get("transcripts") is True
    return [
        spec for spec in TOOLS if needed_capability(spec) in capabilities and (transcripts or spec.name not in TRANSCRIPT_TOOLS)
    ]


class GrantView:
    """The grant's ``mcp_whoami`` answer, asked for until the daemon can give it."""

    def __init__(self, ask: Callable[[], Awaitable[dict[str, Any]]], known: dict[str, Any] | None = None) -> None:
        self._ask = ask
        self.known = known

    async def get(self) -> dict[str, Any] | None:
        if self.known is None:
            try:
                self.known = await self._ask()
            except MemoriesError:
                return None  # locked, engine not running: list everything for now
        return self.known
