"""The fixed list of engine requests the desktop may send (SPEC API-6, DT-5).

The dashboard is not a Request transport: each method here builds one specific request
with validated fields, over the ordinary OS-authenticated IPC socket, with a timeout.
There is deliberately no method that forwards an arbitrary body, unlocks, elevates or
reads a secret. Calls are blocking; async callers run them in a bounded executor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import MemoriesError
from engine.ipc.client import IpcClient

__all__ = ["EngineGateway", "DEFAULT_TIMEOUT", "lock_quietly", "QUIT_LOCK_TIMEOUT", "CLIENT_LABEL"]

# Who the audit log says acted for the desktop's requests ("dashboard", not "you (cli)").
# Informational only: the engine identifies the caller by its socket's peer credentials.
CLIENT_LABEL = "dashboard"

QUIT_LOCK_TIMEOUT = 3.0

DEFAULT_TIMEOUT = 5.0


class EngineGateway:
    def __init__(self, socket_path: Path, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        # One connection per call: calls come from several worker threads, and a
        # timed-out connection must never deliver a late answer to the next call.
        with IpcClient(self.socket_path, timeout=self.timeout, client_label=CLIENT_LABEL) as client:
            return client.request(body, timeout=self.timeout)

    def lock(self) -> dict[str, Any]:
        return self._call({"op": "lock"})

    def settings(self) -> dict[str, Any]:
        """DT-9: the settings of engine/settings.py, their values and where each is stored."""
        return self._call({"op": "settings_get"})

    def set_setting(self, name: str, value: bool | int | float | str) -> dict[str, Any]:
        """DT-9: one setting (the engine checks the name and value, writes and audits it)."""
        return self._call({"op": "settings_set", "name": name, "value": value})

    def list_assets(self, kind: str, limit: int, offset: int) -> dict[str, Any]:
        return self._call({"op": "list", "kind": kind, "limit": limit, "offset": offset})

    def standalone_credential_ids(self) -> set[str]:
        """IDs of the credentials the user made on their own (not those behind a protected
        card, a login or a protected secret): the engine's `credential_list` default."""
        items = self._call({"op": "credential_list"}).get("items", [])
        return {str(i["id"]) for i in items if isinstance(i, dict) and "id" in i}

    def list_ordinary(self, kinds: list[str], tag: str | None, limit: int, offset: int, sort: str) -> dict[str, Any]:
        """Ordinary items only (the engine's `dashboard_list` cannot be widened to other kinds)."""
        body: dict[str, Any] = {"op": "dashboard_list", "kinds": kinds, "limit": limit, "offset": offset, "sort": sort}
        if tag is not None:
            body["tag"] = tag
        return self._call(body)

    def search(self, query: str, kind: str | None, limit: int, offset: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {"op": "search", "query": query, "limit": limit, "offset": offset, "wait_ms": 2000}
        if kind is not None:
            body["kind"] = kind
        return self._call(body)

    def create_asset(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        return self._call({**fields, "op": "put", "kind": kind})

    def delete_asset(self, asset_id: str) -> dict[str, Any]:
        return self._call({"op": "delete", "id": asset_id})

    def resolve_asset(self, asset_id: str, keep: str) -> dict[str, Any]:
        """End a conflict by keeping one head's content as it is (an `edit --resolve`)."""
        return self._call({"op": "edit", "id": asset_id, "base": keep, "resolve": True})

    def resolve_merged(self, asset_id: str, base: str, fields: dict[str, Any]) -> dict[str, Any]:
        """DT-8: end a conflict with the user's merged fields as a new revision on every head."""
        return self._call({**fields, "op": "edit", "id": asset_id, "base": base, "resolve": True})

    def pending_tickets(self) -> dict[str, Any]:
        """Remote-exec tickets waiting for approval (the tray's notifications; no idle touch)."""
        return self._call({"op": "remote_pending"})

    def get_asset(self, asset_id: str) -> dict[str, Any]:
        return self._call({"op": "get", "id": asset_id})

    def read_card(self, asset_id: str) -> dict[str, Any]:
        """A card with its protected features (names of the secrets it holds, never a value)."""
        return self._call({"op": "card_read", "id": asset_id})

    def get_revision(self, asset_id: str, revision: str) -> dict[str, Any]:
        """One revision (any, not only a head), its body redacted by the engine (CD-7); audited as a get."""
        return self._call({"op": "get", "id": asset_id, "rev": revision})

    def history(self, asset_id: str) -> dict[str, Any]:
        """Every revision of one item: time, author device, parents, title (never a body)."""
        return self._call({"op": "history", "id": asset_id})

    def restore_revision(self, asset_id: str, revision: str | None) -> dict[str, Any]:
        """DT-8: an earlier revision's content as a new revision; with no revision, the undelete."""
        body: dict[str, Any] = {"op": "restore_revision", "id": asset_id}
        if revision is not None:
            body["rev"] = revision
        return self._call(body)

    def trash(self) -> dict[str, Any]:
        """DT-8: deleted ordinary items (title, kind, when), newest deletion first."""
        return self._call({"op": "trash"})

    def devices(self) -> dict[str, Any]:
        """The vault's devices (names and fingerprints): who wrote each revision, in words."""
        return self._call({"op": "devices"})

    def connections(self, asset_id: str, depth: int, limit: int) -> dict[str, Any]:
        """A card's or memory's neighbours up to ``depth`` links away, in both directions (titles only)."""
        return self._call({"op": "connections", "id": asset_id, "depth": depth, "direction": "both", "limit": limit})

    def edit_asset(self, asset_id: str, base: str, fields: dict[str, Any], *, keep_both: bool = False) -> dict[str, Any]:
        """A save on ``base``: refused by the engine (``stale_base``) when the item changed
        elsewhere meanwhile (DT-7), unless the user chose to keep both versions (a conflict)."""
        if not base:
            raise MemoriesError("invalid_input", "A save must name the revision it edits.")
        # The fixed keys come last so no field can ever rename the op or retarget the edit.
        return self._call({**fields, "op": "edit", "id": asset_id, "base": base, "current_only": not keep_both})

    def events(self, after: int | None, stream: str | None, wait_ms: int) -> dict[str, Any]:
        """The engine's change feed (DT-7): IDs and kinds of what changed after ``after``."""
        body: dict[str, Any] = {"op": "events", "wait_ms": wait_ms}
        if after is not None:
            body["after"] = after
        if stream is not None:
            body["stream"] = stream
        timeout = wait_ms / 1000 + self.timeout
        with IpcClient(self.socket_path, timeout=timeout, client_label=CLIENT_LABEL) as client:
            return client.request(body, timeout=timeout)

    def attention(self) -> dict[str, Any]:
        """What needs the user: conflicts, quarantined revisions, forks, cloud delivery gaps."""
        return self._call({"op": "attention"})

    def sync_status(self) -> dict[str, Any]:
        """The sync listener and the recent sync sessions (no idle touch): did the last one fail?"""
        return self._call({"op": "sync_status"})

    def search_conflicts(self, query: str) -> dict[str, Any]:
        """Conflicted items (kept out of the index) that a search for ``query`` would have matched."""
        return self._call({"op": "search_conflicts", "query": query})


def lock_quietly(gateway: EngineGateway) -> bool:
    """Lock on the way out (quitting the tray or the dashboard); True if the engine locked.

    Best effort and bounded: an engine that is not running, has no vault or is already
    locked has nothing to lock, and a hung one must not keep the process from exiting.
    """
    try:
        EngineGateway(gateway.socket_path, timeout=min(gateway.timeout, QUIT_LOCK_TIMEOUT)).lock()
    except (MemoriesError, OSError):
        return False
    return True
