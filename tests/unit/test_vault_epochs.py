"""Epoch keys after a member's removal (PO-2), in-process on a real store in a temp home.

The removed party holds at most the keys of the epochs they were in. These tests open
revisions with exactly such a key: what was written before the removal opens, what was
written after does not (it is sealed under the new epoch's fresh key).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig, Paths
from engine.crypto.aead import AeadError
from engine.crypto.chunks import ChunkError
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from engine.vault.core import VaultKeys
from engine.vault.revision import Revision
from tests.helpers import PASSWORD

OTHER = "ab" * 32
CALLER = Caller("cli:epochs")


def _service(home: Path) -> Service:
    service = Service(Paths(home), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
    service.dispatch({"op": "sudo", "password": PASSWORD}, CALLER)
    service.dispatch({"op": "vault_new", "name": "team"}, CALLER)
    return service


def _team(service: Service) -> VaultKeys:
    state = service.require_unlocked()
    return next(v for v in state.vaults.values() if v.name == "team")


def _put(service: Service, title: str) -> Revision:
    result = service.dispatch({"op": "put", "title": title, "body": f"body of {title}", "vault": "team"}, CALLER)
    state = service.require_unlocked()
    return state.index.revisions[bytes.fromhex(result["revision"])]


def _opens(service: Service, rev: Revision, key: bytes) -> bool:
    store = service.require_store()
    try:
        rev.open_summary(key)
        rev.open_body(key, store.read_content(rev.body_seqs))
    except (AeadError, ChunkError):
        return False
    return True


@pytest.mark.parametrize("change", ["vault_member_remove", "vault_rotate"])
def test_a_removed_member_cannot_open_what_is_written_afterwards(tmp_path: Path, change: str) -> None:
    """PO-2: removing a member (or rotating) starts a new epoch; later revisions need the new key."""
    service = _service(tmp_path / "home")
    service.dispatch({"op": "vault_member_add", "user": OTHER, "role": "reader", "vault": "team"}, CALLER)
    before = _put(service, "before")
    old_key = _team(service).epoch_keys[1]  # everything the member could ever have held
    request = {"op": change, "vault": "team"} | ({"user": OTHER} if change == "vault_member_remove" else {})
    service.dispatch(request, CALLER)
    after = _put(service, "after")
    team = _team(service)
    assert team.policy.epoch == 2 and int(after.body["epoch"]) == 2 and int(before.body["epoch"]) == 1
    assert team.epoch_keys[2] != old_key
    assert _opens(service, before, old_key)
    assert not _opens(service, after, old_key)
    assert _opens(service, after, team.epoch_keys[2])
    # This device keeps every epoch key: both stay readable here, also after a restart.
    service.lock_now("test")
    service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
    titles = {i["title"] for i in service.dispatch({"op": "list", "vault": "team"}, CALLER)["items"]}
    assert titles == {"before", "after"}
    assert _team(service).epoch_keys[1] == old_key and _team(service).policy.epoch == 2
