"""In-process helpers for the merge suites (tests/sync/test_merge_*.py, S1).

Two or three Services in temp homes, joined through the real ``device_request`` /
``device_approve`` / ``device_join`` handlers, exchanging bundles through the real
``inventory`` / ``make_bundle`` / ``merge`` functions: real stores, real signatures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from engine.sync.bundle import inventory, make_bundle, shared_vault_ids
from engine.sync.merge import MergeReport, merge
from engine.vault.core import Unlocked
from tests.helpers import PASSWORD, TEST_ENV

CHUNK = 1024 * 1024


@dataclass
class Device:
    service: Service
    caller: Caller

    def do(self, op: str, **fields: Any) -> Any:
        return self.service.dispatch({"op": op, **fields}, self.caller)

    @property
    def state(self) -> Unlocked:
        return self.service.require_unlocked()

    @property
    def device_pub(self) -> bytes:
        return self.state.identity.device_pub

    def rows(self) -> int:
        """State rows plus content rows in the store file: what a refused merge must not change."""
        conn = self.service.require_store().conn
        return int(conn.execute("SELECT (SELECT COUNT(*) FROM state) + (SELECT COUNT(*) FROM content)").fetchone()[0])

    def edit(self, asset: str, body: str, **fields: Any) -> Any:
        """Edit the current (single) head of ``asset``, as the CLI does."""
        entry = self.state.index.resolve(asset)
        base = entry.heads[-1].hex()
        return self.do("edit", id=asset, body=body, base=base, **fields)

    def put(self, title: str, body: str = "", **fields: Any) -> str:
        return str(self.do("put", title=title, body=body or f"body of {title}", **fields)["id"])


def _env() -> None:
    for key, value in TEST_ENV.items():
        os.environ.setdefault(key, value)


def first_device(home: Path, name: str = "a") -> Device:
    _env()
    device = Device(Service(Paths(home), EngineConfig()), Caller(f"cli:{name}"))
    device.do("init", password=PASSWORD)
    device.do("sudo", password=PASSWORD)
    return device


def join(approver: Device, home: Path, name: str) -> Device:
    """A new device of the same user, joined by the real request/approve/join handlers."""
    _env()
    new = Device(Service(Paths(home), EngineConfig()), Caller(f"cli:{name}"))
    request = new.do("device_request", approver=approver.device_pub.hex(), password=PASSWORD, name=name)
    approver.do("sudo", password=PASSWORD)
    approval = approver.do("device_approve", request=request["request"])
    new.do("device_join", approval=approval["approval"], password=PASSWORD)
    new.do("sudo", password=PASSWORD)
    return new


def bundle_for(sender: Device, receiver: Device, vault_id: bytes | None = None) -> list[bytes]:
    vault_id = vault_id or receiver.state.default_vault
    peer = inventory(receiver.service.vault, receiver.state, vault_id)
    return make_bundle(sender.service.vault, sender.state, vault_id, peer, max_bytes=CHUNK)


def pull(receiver: Device, sender: Device, vault_id: bytes | None = None) -> MergeReport:
    """``receiver`` merges what ``sender`` has and it lacks."""
    chunks = bundle_for(sender, receiver, vault_id)
    return merge(receiver.service.vault, receiver.state, chunks, peer_device=sender.device_pub, actor=receiver.caller)


def sync(a: Device, b: Device) -> None:
    """Both ways, every shared vault."""
    for vault_id in shared_vault_ids(a.state):
        if vault_id in b.state.vaults:
            pull(b, a, vault_id)
            pull(a, b, vault_id)


def view(device: Device) -> dict[str, tuple[str, ...]]:
    """Asset ID -> sorted head revision IDs (the current view, comparable across devices)."""
    index = device.state.index
    return {entry.asset_id.hex(): tuple(sorted(h.hex() for h in entry.heads)) for entry in index.assets.values()}
