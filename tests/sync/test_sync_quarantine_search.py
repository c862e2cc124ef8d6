"""Quarantined writes leave search and every view for good (SR-3, SR-2, SY-2), over a real `/v1/channel`.

A and B are two devices of one user, each its own daemon; B syncs with `memories sync` from
A's `memories serve`. The one way a device's already-indexed content becomes quarantined is
SY-2's second half: this device's own offline writes, when an incoming newer policy no longer
lets it write (a revoked device gets no sync at all, and a revision a device already holds is
never quarantined afterwards: docs/sync.md). Here the user hands the vault to another user and
steps down to Reader on A while B writes offline; B's next sync brings that policy and hides
B's own writes (AssetIndex.hide) in a commit that adds no content revision.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import Cli
from tests.mcp.support import grant, result_of, stdio_client
from tests.sync.support import B_PASSWORD, Listener, add_device, free_port, step_down_to_reader, sync, sync_err, token_for


@dataclass
class Quarantined:
    shared: str  # A's note, edited offline on B
    offline: str  # B's offline note
    mcp_token: str  # a read grant on B, made before the quarantine
    report: dict[str, object]  # B's side of the sync that quarantined


def _found(cli: Cli, word: str, *extra: str) -> set[str]:
    return {str(r["title"]) for r in cli.ok("search", word, "--wait", "30", *extra)["results"]}


def _mcp_found(cli: Cli, token: str, word: str) -> set[str]:
    async def scenario() -> set[str]:
        async with stdio_client(cli, token) as client:
            found = result_of(await client.call_tool("search", {"query": word}))
            return {str(r["title"]) for r in found["results"]}

    return asyncio.run(scenario())


def _quarantine_offline_writes(a: Cli, b: Cli, before_sync: list[str] | None = None) -> Quarantined:
    """B writes a note and edits A's note offline (both indexed on B: found by CLI and MCP); the
    user becomes a Reader on A; B syncs. ``before_sync``: extra B commands run just before."""
    with Listener(a, free_port()).start() as listener:
        token = token_for(a, b)
        shared = str(a.put("shared note", "shared zebrafirst body")["id"])
        sync(b, listener.url, token)

        offline = str(b.put("offline note", "quokkaoffline body")["id"])
        b.ok("edit", shared, "--body", "shared quokkaedit body")
        b.sudo(B_PASSWORD)
        mcp_token = grant(b, "reader", "read")
        assert _found(b, "quokkaoffline") == {"offline note"}
        assert _found(b, "quokkaedit") == {"shared note"}
        assert _mcp_found(b, mcp_token, "quokkaoffline") == {"offline note"}
        if before_sync:
            b.ok(*before_sync)

        a.sudo()
        for command in step_down_to_reader(a):
            a.ok(*command)

        report = sync(b, listener.url, token)
    [mine] = report["vaults"]
    # The quarantining commit: the new policies and two hidden revisions, no content revision.
    assert (mine["policies_added"], mine["quarantined"], mine["revisions_added"]) == (3, 2, 0)
    return Quarantined(shared, offline, mcp_token, report)


def test_own_offline_writes_quarantined_by_a_synced_policy_leave_search(pair: tuple[Cli, Cli]) -> None:
    """SR-3, SR-2, SY-2: B's offline note and offline edit were indexed when written; the sync that
    brings the policy making this user a Reader quarantines them. Afterwards CLI and MCP search
    (the dashboard's search is the same engine op) find neither, `get` of the note answers
    not_found as for any unknown ID, the shared note reads and is found as A wrote it — and the
    same after lock+unlock, when the index is rebuilt from the stored token streams."""
    a, b = pair
    q = _quarantine_offline_writes(a, b)

    def check() -> None:
        assert _found(b, "quokkaoffline") == set()
        assert _found(b, "quokkaedit") == set()
        assert _found(b, "zebrafirst") == {"shared note"}
        assert b.err("get", q.offline)["code"] == "not_found"
        assert b.ok("get", q.shared)["body"] == "shared zebrafirst body"
        assert _mcp_found(b, q.mcp_token, "quokkaoffline") == set()
        assert _mcp_found(b, q.mcp_token, "zebrafirst") == {"shared note"}
        assert len(b.ok("quarantine", "list")["entries"]) == 2

    check()
    b.ok("lock")
    b.unlock(B_PASSWORD)
    check()


def test_importing_an_export_does_not_bring_back_a_quarantined_item_in_another_vault(
    pair: tuple[Cli, Cli], tmp_path: Path
) -> None:
    """SY-2, SR-3: an item's ID stays taken while quarantine hides it whole. A memories-json export
    made before the quarantine, imported into another vault B may write, skips it like any
    existing ID: nothing is written, no vault lists or finds it, before and after lock+unlock.
    (It used to add a first revision in the other vault: the import failed after its commit, and
    the next unlock showed the item again — listed and found in the vault it was quarantined
    from, with its vault ID fixed at the first revision, while the other vault did not list it.)"""
    a, b = pair
    export = tmp_path / "export"
    q = _quarantine_offline_writes(a, b, ["export", "--format", "memories-json", str(export)])
    assert q.offline in {item["id"] for item in json.loads((export / "memories.json").read_text())["items"]}
    b.ok("vault", "new", "second")

    imported = b.ok("import", str(export / "memories.json"), "--vault", "second")
    assert imported["created"] == 0 and imported["skipped"] == 2

    def check() -> None:
        for vault in ("default", "second"):
            assert "offline note" not in {i["title"] for i in b.ok("list", "--all", "--vault", vault)["items"]}
            assert _found(b, "quokkaoffline", "--vault", vault) == set()
        assert b.err("get", q.offline)["code"] == "not_found"
        assert _mcp_found(b, q.mcp_token, "quokkaoffline") == set()

    check()
    b.ok("lock")
    b.unlock(B_PASSWORD)
    check()


def test_a_peer_item_of_another_vault_with_a_quarantined_items_id_is_refused(tmp_path: Path) -> None:
    """SY-2, SR-3: an item's vault is fixed by its first revision, also while quarantine hides it.
    B writes a note offline and exports it; A (which never had the note) imports the export into
    the vault "second"; the user becomes a Reader of the default vault. B's sync hides its note
    (default vault) and then refuses A's copy in "second" as moving an item into another vault:
    the note stays out of every list, search and `get` on B, before and after lock+unlock.
    (The copy used to be committed under the hidden item and the sync answered "internal ...
    nothing was changed"; after the next unlock the note was back in the default vault, listed
    and found, with the content A wrote in "second".)"""
    a, b = Cli(home=tmp_path / "a"), Cli(home=tmp_path / "b")
    try:
        a.init()
        a.ok("vault", "new", "second")
        add_device(a, b, "laptop", B_PASSWORD)
        export = tmp_path / "export"
        with Listener(a, free_port()).start() as listener:
            token = token_for(a, b)
            sync(b, listener.url, token)
            offline = str(b.put("offline note", "quokkaoffline body")["id"])
            b.sudo(B_PASSWORD)
            b.ok("export", "--format", "memories-json", str(export))
            assert a.ok("import", str(export / "memories.json"), "--vault", "second")["created"] == 1
            a.sudo()
            for command in step_down_to_reader(a):
                a.ok(*command)

            error = sync_err(b, listener.url, token)
        assert error["code"] == "sync_rejected" and "another vault" in error["message"]
        assert len(b.ok("quarantine", "list")["entries"]) == 1

        def check() -> None:
            for vault in ("default", "second"):
                assert "offline note" not in {i["title"] for i in b.ok("list", "--all", "--vault", vault)["items"]}
                assert _found(b, "quokkaoffline", "--vault", vault) == set()
            assert b.err("get", offline)["code"] == "not_found"

        check()
        b.ok("lock")
        b.unlock(B_PASSWORD)
        check()
    finally:
        a.stop()
        b.stop()
