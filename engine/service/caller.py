"""Who is calling: the elevation namespace and the surface the request came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.errors import MemoriesError

__all__ = ["Caller", "CLIENT_LABELS", "CLIENT_LABEL_KEY", "take_client_label"]

# What a local program may call itself in a request (``"client_label": "dashboard"``), so the
# audit log can say "dashboard" instead of "you (cli)" for the desktop's own reads. The label
# is the program's word, not the kernel's: it is recorded beside the OS-derived namespace and
# surface and nothing reads it for a permission, so claiming it gains nothing.
CLIENT_LABEL_KEY = "client_label"
CLIENT_LABELS = frozenset({"dashboard", "tray"})


@dataclass(frozen=True)
class Caller:
    namespace: str  # e.g. "cli:1234" (API-3); remote surfaces use "ws:remote"/"relay:remote"
    surface: str = "ipc"  # "ipc", "mcp", "dashboard"
    uid: int | None = None
    # The connecting process as the kernel reports it (SO_PEERCRED); None when unknown or not
    # local. Only for reaching what that process holds open (engine/files/source.py).
    pid: int | None = None
    # Asset kinds this caller may not read through search/retrieve/ask (an MCP grant without
    # transcripts hides "transcript", AG-5).
    hidden_kinds: frozenset[str] = frozenset()
    # The program's own name for itself (CLIENT_LABELS) or "": informational, audit only.
    client: str = ""
    # AG-13: for an MCP caller, the grant the daemon authenticated and the key derived from the
    # token that authenticated it (opens that grant's notebook only). Never from a request.
    grant_id: bytes | None = None
    grant_key: bytes | None = field(default=None, repr=False)
    # AG-11: a grant whose transcript access is one project's: the project's absolute path
    # (only sessions whose working directory is inside it are visible). None: no such limit.
    transcript_scope: str | None = None


def take_client_label(body: dict[str, Any]) -> str:
    """Remove the optional client label from a request body and return it ("" when absent)."""
    label = body.pop(CLIENT_LABEL_KEY, None)
    if label is None:
        return ""
    if not isinstance(label, str) or label not in CLIENT_LABELS:
        raise MemoriesError("invalid_input", f"{CLIENT_LABEL_KEY} is one of: {', '.join(sorted(CLIENT_LABELS))}.")
    return label
