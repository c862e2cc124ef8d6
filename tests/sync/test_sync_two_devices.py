"""Two (and three) honest engines syncing over a real `/v1/channel` listener (issue 14; SY-1, SY-4, HI-4).

Every device is its own data home served by its own daemon; B joined A with the device
commands. A serves with `memories serve` (a real foreground process); B syncs with `memories
sync URL` and a token made on A. Nothing here reaches into either engine.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.helpers import Cli
from tests.integration.test_files import pack_files, pseudo_random
from tests.sync.support import (
    B_PASSWORD,
    C_PASSWORD,
    Listener,
    add_device,
    free_port,
    sync,
    sync_err,
    titles,
    token_for,
)


def _history(cli: Cli, asset: str) -> list[tuple[str, tuple[str, ...]]]:
    revs = cli.ok("history", asset)["revisions"]
    return sorted((r["revision"], tuple(sorted(r["parents"]))) for r in revs)


def _heads(cli: Cli, asset: str) -> list[str]:
    return sorted(r["revision"] for r in cli.ok("history", asset)["revisions"] if r["head"])


def _by_title(cli: Cli) -> dict[str, str]:
    return {str(row["title"]): str(row["id"]) for row in cli.ok("list", "--all")["items"]}


def test_edits_on_both_sides_sync_both_ways(pair: tuple[Cli, Cli]) -> None:
    """SY-4, SY-1: A and B each write; one sync later both hold both edits with identical
    history; a second sync moves nothing; the status queue is real before and after."""
    a, b = pair
    on_a = a.put("written on A", "alpha body")
    on_b = b.put("written on B", "beta body")
    a.ok("edit", on_a["id"], "--body", "alpha body, second version")
    assert b.ok("status")["sync_queue"]["outbox"] == 1  # B's one revision, no peer has it yet
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        first = sync(b, listener.url, token)
        assert first["synced"] is True
        assert [v["revisions_added"] for v in first["vaults"]] == [2]  # A's put and edit arrived at B
        assert [v["revisions_added"] for v in first["peer_vaults"]] == [1]  # B's put arrived at A
        assert titles(a) == titles(b) == {"written on A", "written on B"}
        for asset in (on_a["id"], on_b["id"]):
            assert _history(a, asset) == _history(b, asset)
        assert b.ok("get", on_a["id"])["body"] == "alpha body, second version"
        assert a.ok("get", on_b["id"])["body"] == "beta body"
        assert a.ok("status")["sync_queue"] == b.ok("status")["sync_queue"] == {"outbox": 0, "inbox": 0}
        again = sync(b, listener.url, token)
        assert all(v["revisions_added"] == 0 for v in again["vaults"] + again["peer_vaults"])
        # An edit after the sync is queued on the side that made it, and only there.
        b.ok("edit", on_b["id"], "--body", "beta body, edited offline")
        assert b.ok("status")["sync_queue"]["outbox"] == 1
        assert a.ok("status")["sync_queue"]["outbox"] == 0
        sync(b, listener.url, token)
        assert a.ok("get", on_b["id"])["body"] == "beta body, edited offline"
        assert b.ok("status")["sync_queue"]["outbox"] == 0


def test_concurrent_edit_is_the_same_conflict_on_both_sides_and_resolves_once(pair: tuple[Cli, Cli]) -> None:
    """HI-4: the same memory edited on A and on B between syncs is one visible conflict with the
    same heads on both devices (never a silent overwrite); resolving it on B reaches A."""
    a, b = pair
    note = a.put("shared note", "v1")
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync(b, listener.url, token)
        a.ok("edit", note["id"], "--body", "A's version")
        b.ok("edit", note["id"], "--body", "B's version")
        result = sync(b, listener.url, token)
        assert [len(v["conflicts"]) for v in result["vaults"]] == [1]
        assert [len(v["conflicts"]) for v in result["peer_vaults"]] == [1]
        heads = {cli.home.name: _heads(cli, note["id"]) for cli in (a, b)}
        assert len(heads["a"]) == 2 and heads["a"] == heads["b"]
        assert a.ok("status")["conflicts"] == b.ok("status")["conflicts"] == 1
        assert a.err("edit", note["id"], "--body", "blind")["code"] == "conflict"
        b.ok("edit", note["id"], "--resolve", "--body", "merged by hand")
        sync(b, listener.url, token)
        assert a.ok("status")["conflicts"] == b.ok("status")["conflicts"] == 0
        assert a.ok("get", note["id"])["body"] == b.ok("get", note["id"])["body"] == "merged by hand"
        assert _history(a, note["id"]) == _history(b, note["id"])


def test_a_third_device_joining_later_catches_up(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-4: C joins through B after A and B have written and synced; one sync with A brings
    C everything, including B's writes that reached A by the earlier sync."""
    a, b = pair
    c = Cli(home=tmp_path / "c")
    try:
        a.put("from A", "a")
        b.put("from B", "b")
        token_b = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            sync(b, listener.url, token_b)
            add_device(b, c, "desktop", C_PASSWORD, approver_password=B_PASSWORD)
            assert titles(c) == set()
            # A learns of C's device only from B's new policy: sync B first, then C.
            sync(b, listener.url, token_b)
            token_c = token_for(a, c)
            result = sync(c, listener.url, token_c)
            assert [v["revisions_added"] for v in result["vaults"]] == [2]
            assert titles(c) == {"from A", "from B"}
            assert c.ok("get", _by_title(c)["from B"])["body"] == "b"
    finally:
        c.stop()


def test_a_thousand_offline_edits_then_both_merge_in_order(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """Offline work (issue 14): B writes 1,000 notes while A is unreachable (sync fails with
    sync_unreachable, nothing changes, the outbox counts them); when A serves again one sync
    merges them all on A, and A's own offline edit on B."""
    a, b = pair
    seed = a.put("seed", "0")
    token = token_for(a, b)
    port = free_port()
    with Listener(a, port).start() as listener:
        sync(b, listener.url, token)
        url = listener.url
    assert sync_err(b, url, token)["code"] == "sync_unreachable"
    lines = [json.dumps({"title": f"offline {i:04d}", "body": f"body {i}"}) for i in range(1000)]
    source = tmp_path / "offline.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    b.ok("import", str(source))
    a.ok("edit", seed["id"], "--body", "edited on A while apart")
    assert b.ok("status")["sync_queue"]["outbox"] == 1000
    assert a.ok("status")["sync_queue"]["outbox"] == 1
    with Listener(a, port).start() as listener:
        result = sync(b, listener.url, token)
    assert [v["revisions_added"] for v in result["peer_vaults"]] == [1000]
    assert [v["revisions_added"] for v in result["vaults"]] == [1]
    assert a.ok("status")["assets"] == b.ok("status")["assets"] == 1001
    assert b.ok("get", seed["id"])["body"] == "edited on A while apart"
    assert a.ok("status")["sync_queue"]["outbox"] == b.ok("status")["sync_queue"]["outbox"] == 0


def test_locking_stops_serving(pair: tuple[Cli, Cli]) -> None:
    """ST-10: `memories lock` on the serving device stops the listener; `serve` says so and exits."""
    a, b = pair
    token = token_for(a, b)
    listener = Listener(a, free_port()).start()
    try:
        assert a.ok("sync", "status")["serving"] is True
        a.ok("lock")
        assert listener.process is not None
        assert listener.process.wait(timeout=30) == 1
        assert sync_err(b, listener.url, token)["code"] == "sync_unreachable"
    finally:
        listener.stop()


def test_large_files_sync_both_ways_from_pack_files(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """SY-1, HI-2, issue 32: a file stored in a pack file on A (its chunks beside the store, not
    rows) reaches B byte for byte, and one added on B reaches A, each into a pack file of the side
    that receives it; each side's chunks are checked against the signed digests as they arrive
    and again as they are read from the pack, and a second sync moves nothing."""
    a, b = pair
    on_a, on_b = tmp_path / "from-a.bin", tmp_path / "from-b.bin"
    sha_a = pseudo_random(on_a, 3 * 1024 * 1024 + 11, b"a")
    sha_b = pseudo_random(on_b, 2 * 1024 * 1024, b"b")
    file_a = a.ok("file", "add", str(on_a))["id"]
    file_b = b.ok("file", "add", str(on_b))["id"]
    assert len(pack_files(a)) == len(pack_files(b)) == 1
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync(b, listener.url, token)
        # Arrived whole in a bundle, each file's chunks land in a pack file too, not in rows.
        assert len(pack_files(a)) == len(pack_files(b)) == 2
        for n, (cli, file_id, sha) in enumerate(((b, file_a, sha_a), (a, file_b, sha_b), (a, file_a, sha_a), (b, file_b, sha_b))):
            out = tmp_path / f"{n}.out"
            assert cli.ok("file", "get", file_id, "-o", str(out))["sha256"] == sha
            assert hashlib.sha256(out.read_bytes()).hexdigest() == sha
        again = sync(b, listener.url, token)
        assert [v["revisions_added"] for v in again["vaults"]] == [0]
