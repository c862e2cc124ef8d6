"""The unlocked state kept compact (issue 32), through a real in-process Service on a real store:
a revision keeps only a few decoded fields and decodes the rest from its signed bytes, a listing
page does not keep the summaries it decrypts, and asset IDs are looked up by any hex prefix from
sorted bytes. What is asserted is behaviour, never a memory figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.search_runtime import runtime_of
from engine.service.service import Service
from tests.helpers import PASSWORD

CALLER = Caller("cli:test")
NOTES = 240


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Service:
    home: Path = tmp_path_factory.mktemp("compact") / "home"
    service = Service(Paths(home), EngineConfig())
    service.dispatch({"op": "init", "password": PASSWORD}, CALLER)
    items = [{"title": f"Note {i}", "body": f"body {i} 记忆", "tags": ["work", f"t{i % 3}"]} for i in range(NOTES)]
    service.dispatch({"op": "import_batch", "items": items}, CALLER)
    first = service.dispatch({"op": "list", "limit": 1}, CALLER)["items"][0]
    service.dispatch({"op": "edit", "id": first["id"], "base": first["revision"], "title": "Edited"}, CALLER)
    service.lock_now("test")  # in process: no re-execution; the next unlock decodes every row again
    service.dispatch({"op": "unlock", "password": PASSWORD}, CALLER)
    # The index build decrypts what it must segment (keeping none of it) and the signature check
    # reads every revision: both end before the tests look at what is kept.
    assert runtime_of(service).wait_ready(120) and service.verifier.done.wait(120)
    return service


def test_revision_fields_agree_with_their_signed_body(service: Service) -> None:
    state = service.require_unlocked()
    assert len(state.index.revisions) == NOTES + 1
    for rev in state.index.revisions.values():
        body = rev.body
        assert rev.asset_id == bytes(body["asset"]) and rev.vault_id == bytes(body["vault"])
        assert rev.policy_head == bytes(body["policy"]) and rev.author == bytes(body["device"])
        assert rev.cert == body["cert"] and rev.epoch == int(body["epoch"])
        assert rev.kind == body["kind"] and rev.tombstone is bool(body["tombstone"])
        assert rev.parents == list(body["parents"]) and rev.created_ms == int(body["created_ms"])
        assert rev.body is not body  # decoded again on each read, not kept


def test_a_kept_summary_reads_back_equal_and_unshared(service: Service) -> None:
    state = service.require_unlocked()
    entry = next(iter(state.index.assets.values()))
    rev = state.index.revisions[entry.heads[0]]
    first = service.vault.summary_of(state, rev)
    second = service.vault.summary_of(state, rev)
    assert first == second and first is not second  # packed once, unpacked per read
    assert first["tags"][0] == "work"
    second["title"] = "changed by a caller"
    assert service.vault.summary_of(state, rev)["title"] == first["title"]


def test_a_listing_page_keeps_no_summary_and_shows_the_same_rows(service: Service) -> None:
    state = service.require_unlocked()
    kept_before = {r.rev_id for r in state.index.revisions.values() if r.summary_cache is not None}
    listed = service.dispatch({"op": "list", "limit": NOTES}, CALLER)
    assert listed["total"] == NOTES and len(listed["items"]) == NOTES
    assert {r.rev_id for r in state.index.revisions.values() if r.summary_cache is not None} == kept_before
    # The same rows whether or not the summaries were kept: a `get` keeps its item's.
    for row in listed["items"][:20]:
        got = service.dispatch({"op": "get", "id": row["id"]}, CALLER)
        assert (got["title"], got["tags"], got["revision"]) == (row["title"], row["tags"], row["revision"])
    again = service.dispatch({"op": "list", "limit": NOTES}, CALLER)
    assert again["items"] == listed["items"]
    titles = {row["title"] for row in listed["items"]}
    assert "Edited" in titles and len(titles) == NOTES and titles - {"Edited"} < {f"Note {i}" for i in range(NOTES)}


@pytest.mark.parametrize("length", [4, 5, 6, 7, 8, 9, 31, 32])
def test_any_hex_prefix_resolves_as_over_hex_strings(service: Service, length: int) -> None:
    state = service.require_unlocked()
    ids = [a.hex() for a in state.index.assets]
    for full in ids:
        prefix = full[:length]
        matches = [i for i in ids if i.startswith(prefix)]
        if len(matches) == 1:
            assert state.index.resolve(prefix.upper()).asset_id.hex() == full
        else:
            with pytest.raises(MemoriesError) as raised:
                state.index.resolve(prefix)
            assert raised.value.code == "ambiguous_id"
        short = state.index.short_id(bytes.fromhex(full))
        assert [i for i in ids if i.startswith(short)] == [full]
    with pytest.raises(MemoriesError) as missing:
        state.index.resolve("f" * 32 if "f" * 32 not in ids else "0" * 32)
    assert missing.value.code == "not_found"
