"""Typed errors shared by every surface (SPEC API-8).

Each error has a stable machine ``code`` and one human sentence. The same code
travels over IPC, the CLI (``--json`` and text), HTTP and MCP. Messages never
contain secrets: callers pass only non-secret context.

This module is imported by the lean CLI client, so it must stay stdlib-only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MemoriesError", "CODES", "error_from_wire"]

# code -> default sentence. The code is the contract; the sentence may improve.
CODES: dict[str, str] = {
    "already_initialized": "A vault already exists in this data directory; it was not touched.",
    "not_initialized": "No vault exists here yet; run `memories init` first.",
    "locked": "The vault is locked; run `memories unlock`.",
    "wrong_password": "The password is wrong; nothing was changed.",
    "rate_limited": "Too many password attempts; wait a minute and try again.",
    "elevation_required": "This needs elevation; run `memories sudo` first.",
    "invalid_request": "The request is malformed.",
    "unknown_op": "The request names an operation this engine does not know.",
    "unknown_field": "The request has a field this operation does not accept.",
    "invalid_json": "The frame is not valid JSON.",
    "frame_too_large": "The frame exceeds the size limit.",
    "unsupported_wire_version": "The wire version is not supported by this engine.",
    "busy": "The engine has too many open connections; try again.",
    "not_found": "No asset matches that ID.",
    "ambiguous_id": "That ID prefix matches more than one asset; type more characters.",
    "conflict": "The asset has conflicting heads; resolve with `memories edit ID --resolve`.",
    "stale_base": "The base revision is not a current head of this asset.",
    "store_in_use": "Another engine already holds this data directory.",
    "store_corrupt": "The store failed verification; it was not modified.",
    "daemon_unavailable": "The engine is not running and could not be reached.",
    "timeout": "The engine did not answer in time.",
    "invalid_input": "The input is invalid.",
    "permission_denied": "The caller is not allowed to do this.",
    "io_error": "A file could not be read or written.",
    "internal": "The engine hit an unexpected error; nothing was changed.",
}


class MemoriesError(Exception):
    """An error with a stable code and one clear, secret-free sentence."""

    def __init__(self, code: str, message: str | None = None, **details: Any) -> None:
        if code not in CODES:
            # An unknown code is itself a programming error; keep the contract closed.
            message = f"{message or ''} (unregistered code {code})".strip()
            code = "internal"
        self.code = code
        self.message = message or CODES[code]
        self.details = details
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            wire["details"] = self.details
        return wire


def error_from_wire(obj: object) -> MemoriesError:
    """Rebuild an error received over IPC; malformed payloads become ``internal``."""
    if isinstance(obj, dict):
        code = obj.get("code")
        message = obj.get("message")
        details = obj.get("details")
        if isinstance(code, str) and isinstance(message, str):
            extra = details if isinstance(details, dict) else {}
            return MemoriesError(code if code in CODES else "internal", message, **extra)
    return MemoriesError("internal", "The engine sent a malformed error.")
