"""`list` pages from the order the index keeps (issue 20, engine/vault/listing.py): the same
answers as the straightforward implementation (every item summarized, filtered, sorted, sliced),
kept here as the reference, for every sort, tag, kind, offset, limit, --all and --vault, on
vaults with deletions, conflicts (two heads), resolutions and a credential, after every kind
of change and after a lock and unlock (the order rebuilt from a bulk load)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig, Paths
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.handlers.assets import SECRET_BODY_KINDS, UNLISTED_KINDS
from engine.service.handlers.vaults import vault_for
from engine.service.projections import asset_summary
from engine.service.service import Service
from tests.helpers import PASSWORD

CALLER = Caller("cli:test")
VAULTS = [None, "work", "home"]
KINDS = ["memory", "knowledge", "brain"]
TAGS = ["red", "blue", "green"]
TITLES = ["alpha", "Alpha", "beta", "gamma", "Zeta", "", "delta"]  # repeats and case ties


def reference(service: Service, request: dict[str, Any]) -> dict[str, Any]:
    """The straightforward list: summarize every visible item, filter, sort, slice."""
    state = service.require_unlocked()
    vault_id = vault_for(state, request.get("vault")).vault_id
    kind, tag, sort = request.get("kind"), request.get("tag"), request.get("sort", "updated")
    items = []
    for entry in state.index.visible():
        if entry.vault_id != vault_id:
            continue
        if kind is not None and entry.kind != kind:
            continue
        if kind is None and (entry.kind in SECRET_BODY_KINDS or entry.kind in UNLISTED_KINDS):
            continue
        summary = asset_summary(service, state, entry)
        if tag is not None and tag not in summary["tags"]:
            continue
        items.append(summary)
    if sort == "title":
        items.sort(key=lambda s: (s["title"].casefold(), s["id"]))
    else:
        items.sort(key=lambda s: (s["updated_ms"], s["id"]), reverse=sort == "updated")
    offset, limit = request.get("offset", 0), request.get("limit", 100)
    return {"items": items[offset : offset + limit], "total": len(items), "conflicts": sum(s["conflict"] for s in items)}


def _requests(service: Service) -> list[dict[str, Any]]:
    out = []
    for vault in VAULTS:
        for kind in [None, "memory", "knowledge", "credential"]:
            for tag in [None, "red", "blue", "absent"]:
                for sort in ["updated", "oldest", "title"]:
                    base: dict[str, Any] = {"op": "list", "sort": sort}
                    base.update({k: v for k, v in (("vault", vault), ("kind", kind), ("tag", tag)) if v is not None})
                    total = reference(service, base)["total"]
                    for offset in sorted({0, 1, 3, max(0, total - 1), total, total + 2}):
                        for limit in (1, 2, 5, 100):
                            out.append({**base, "offset": offset, "limit": limit})
    return out


def _check_all(service: Service) -> int:
    checked = 0
    for request in _requests(service):
        assert service.dispatch(dict(request), CALLER) == reference(service, request), request
        checked += 1
    # --all: the CLI's loop over pages gives the whole reference list.
    for vault in VAULTS:
        for sort in ["updated", "oldest", "title"]:
            body: dict[str, Any] = {"op": "list", "sort": sort, "limit": 3, **({"vault": vault} if vault else {})}
            first = service.dispatch(dict(body), CALLER)
            items = list(first["items"])
            while len(items) < first["total"]:
                page = service.dispatch({**body, "offset": len(items)}, CALLER)
                assert page["items"]
                items.extend(page["items"])
            assert items == reference(service, {**body, "limit": 100_000})["items"]
    return checked


class World:
    """A service with several vaults and random changes of every kind that moves heads."""

    def __init__(self, home: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.service = Service(Paths(home), EngineConfig())
        self.service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
        for name in VAULTS[1:]:
            self.service.dispatch({"op": "vault_new", "name": name}, CALLER)
        self.ids: list[str] = []

    def call(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.service.dispatch(body, CALLER)

    def _live(self) -> list[dict[str, Any]]:
        return [self.call({"op": "get", "id": i}) for i in self.ids if not self._deleted(i)]

    def _deleted(self, asset_id: str) -> bool:
        state = self.service.require_unlocked()
        return state.index.is_deleted(state.index.assets[bytes.fromhex(asset_id)])

    def _hide(self, asset_id: str) -> None:
        """Sync's quarantine of this device's offline writes (SY-2): the newest revision, or the
        whole item when it has one, leaves the view (AssetIndex.hide, as a commit applies it)."""
        with self.service.lock:
            index = self.service.require_unlocked().index
            entry = index.assets[bytes.fromhex(asset_id)]
            index.hide([entry.revisions[-1]])
            if bytes.fromhex(asset_id) not in index.assets:
                self.ids.remove(asset_id)

    def step(self) -> None:
        rng = self.rng
        live = [i for i in self.ids if not self._deleted(i)]
        actions = ["put", "put", "put", "edit", "stale", "delete", "resolve", "credential", "hide"]
        action = rng.choice(actions if live else ["put"])
        if action == "put":
            vault = rng.choice(VAULTS)
            body = {
                "op": "put",
                "title": rng.choice(TITLES) or "untitled",
                "body": "b",
                "kind": rng.choice(KINDS),
                "tags": rng.sample(TAGS, rng.randint(0, 2)),
                **({"vault": vault} if vault else {}),
            }
            self.ids.append(self.call(body)["id"])
        elif action == "hide":
            self._hide(rng.choice(live))
        elif action == "credential":
            self.call({"op": "protected_card", "title": rng.choice(TITLES) or "cred", "token": "tok-12345"})
        else:
            target = rng.choice(live)
            got = self.call({"op": "get", "id": target})
            if action == "delete":
                self.call({"op": "delete", "id": target})
            elif action == "resolve" and got["conflict"]:
                self.call({"op": "edit", "id": target, "resolve": True, "title": rng.choice(TITLES) or "r"})
            elif not got["conflict"]:
                history = self.call({"op": "history", "id": target})["revisions"]
                # A stale base (the first revision) forks the item when it has moved on: two heads.
                base = history[0]["revision"] if action == "stale" else got["revision"]
                edit = {"op": "edit", "id": target, "base": base, "title": rng.choice(TITLES) or "e"}
                if rng.random() < 0.5:
                    edit["tags"] = rng.sample(TAGS, rng.randint(0, 2))
                self.call(edit)


@pytest.mark.parametrize("seed", [1, 2])
def test_list_pages_match_the_reference(tmp_path: Path, seed: int) -> None:
    """Issue 20: the kept order answers exactly as the straightforward list, through every change."""
    world = World(tmp_path / "home", seed)
    checked = 0
    try:
        for round_ in range(4):
            for _ in range(12):
                world.step()
            checked += _check_all(world.service)  # after the title and tag orders exist: changes refresh them
            if round_ == 1:  # the order is rebuilt from the unlock's bulk load
                world.service.lock_now("test")
                world.call({"op": "unlock", "password": PASSWORD})
        state = world.service.require_unlocked()
        assert state.index.conflict_count > 0, "the random changes made no conflict"
        assert any(state.index.is_deleted(e) for e in state.index.assets.values()), "nothing was deleted"
        assert checked > 1000
    finally:
        world.service.lock_now("test")
