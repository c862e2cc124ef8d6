"""One item ID in two vaults (SY-1): the refusal says what to do, and doing it works.

An item lives in the vault of its first revision, and its ID is global on a device. A
memories-json export of one vault, imported into another vault on a device that does not hold
the item yet, gives the item a first revision there under the same ID. Sync then meets the
item in two vaults and merge must refuse it (it cannot move an item between vaults): over real
daemons and `/v1/channel`, the refusal names the item, both vaults and which device made the
later copy, changes nothing, and the steps the user guide gives ("One item in two vaults":
export, set that device up again, sync, import) end it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, C_PASSWORD, Listener, add_device, free_port, sync, sync_err, token_for


@dataclass
class Collision:
    a: Cli
    b: Cli
    listener: Listener
    token: str
    team_note: str  # A's note in "team", imported into B's default vault before B held it
    own_note: str  # B's own note in its default vault, never synced


def _items(cli: Cli, vault: str) -> list[tuple[str, str]]:
    return sorted((str(i["id"]), str(i["title"])) for i in cli.ok("list", "--all", "--vault", vault)["items"])


@pytest.fixture
def collision(tmp_path: Path) -> Iterator[Collision]:
    a, b = Cli(home=tmp_path / "a"), Cli(home=tmp_path / "b")
    listener = Listener(a, free_port())
    try:
        a.init()
        a.ok("vault", "new", "team")
        add_device(a, b, "laptop", B_PASSWORD)
        team_note = str(a.ok("put", "--vault", "team", "--title", "team note", "--body", "zebra team body")["id"])
        a.sudo()
        export = tmp_path / "team-export"
        a.ok("export", "--format", "memories-json", str(export), "--vault", "team")
        own_note = str(b.put("own note", "quokka own body")["id"])
        assert b.ok("import", str(export / "memories.json"))["created"] == 1  # into B's default vault
        listener.start()
        yield Collision(a, b, listener, token_for(a, b), team_note, own_note)
    finally:
        listener.stop()
        a.stop()
        b.stop()


def test_an_item_in_two_vaults_is_refused_with_what_to_do_and_nothing_changes(collision: Collision) -> None:
    """SY-1, API-8: B holds A's "team" note in its default vault (imported from A's export). B's
    sync is `sync_rejected` with a sentence naming the item, both vaults and that this device
    made the later copy, pointing to the user guide; nothing changes on B, and the same sync
    again gives the same answer, also after B deletes its copy. (It used to say only "A revision
    moves an item into another vault", on every sync.)"""
    c = collision
    before = (_items(c.b, "default"), _items(c.b, "team"), c.b.ok("history", c.team_note)["revisions"])
    for _ in range(2):
        error = sync_err(c.b, c.listener.url, c.token)
        assert error["code"] == "sync_rejected"
        message = error["message"]
        assert f"Item {c.team_note[:16]} is in vault 'default' here" in message
        assert "another vault, 'team'" in message
        assert "this device made the later copy: set it up again" in message
        assert "One item in two vaults" in message and message.endswith("nothing was merged.")
        assert "zebra" not in message  # IDs and vault names only, never content
        assert (_items(c.b, "default"), _items(c.b, "team"), c.b.ok("history", c.team_note)["revisions"]) == before
    assert _items(c.a, "team") == [(c.team_note, "team note")]
    # Deleting the copy does not end it (the user guide says so): a tombstone keeps the vault.
    c.b.ok("delete", c.team_note)
    assert "this device made the later copy" in sync_err(c.b, c.listener.url, c.token)["message"]


def test_the_user_guides_steps_end_the_collision(collision: Collision, tmp_path: Path) -> None:
    """SY-1: the steps of the user guide's "One item in two vaults" work. B's user exports B's
    default vault, A revokes B, a new device (C, an empty home) joins and syncs, then imports
    B's export: the team note is skipped (C holds it in "team"), B's own note comes back, and
    every later sync of C and A succeeds with the note in "team" only."""
    c = collision
    saved = tmp_path / "b-export"
    c.b.sudo(B_PASSWORD)
    c.b.ok("export", "--format", "memories-json", str(saved))
    c.a.sudo()
    c.a.ok("device", "revoke", "laptop")
    new = Cli(home=tmp_path / "c")
    try:
        add_device(c.a, new, "laptop again", C_PASSWORD)
        token = token_for(c.a, new)
        sync(new, c.listener.url, token)
        imported = new.ok("import", str(saved / "memories.json"))
        assert (imported["created"], imported["skipped"]) == (1, 1)
        sync(new, c.listener.url, token)
        again = sync(new, c.listener.url, token)
        assert all(v["revisions_added"] == 0 for v in [*again["vaults"], *again["peer_vaults"]])
        for cli in (c.a, new):
            assert _items(cli, "team") == [(c.team_note, "team note")]
            assert [title for _, title in _items(cli, "default")] == ["own note"]
            assert cli.ok("get", c.team_note)["body"] == "zebra team body"
    finally:
        new.stop()


def test_a_restored_device_cannot_be_given_back_the_vault_it_was_restored_from(collision: Collision, tmp_path: Path) -> None:
    """BK-2, as the user guide states it: a restore claims no old membership, and adding the
    restored device's user as a member does not bring it back (no device of another user can be
    added to a vault yet): the Owner's device makes it no sync token, so the restored copy and
    its original never meet in a merge. When that changes, the restored copy must give way to
    the original instead of being refused as an item in two vaults (docs/sync.md)."""
    c = collision
    backup = tmp_path / "a.backup"
    c.a.sudo()
    c.a.ok("backup", "create", str(backup), "--password-stdin", input="backup horse staple 42\n")
    restored = Cli(home=tmp_path / "restored")
    try:
        proc = restored.run(
            "restore", str(backup), "--password-stdin", "--json", input="backup horse staple 42\nnew device password 7\n"
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _items(restored, "team") == [(c.team_note, "team note")]  # same item ID, new vault ID
        originals = {v["id"] for v in c.a.ok("vaults")["vaults"]}
        assert not originals & {v["id"] for v in restored.ok("vaults")["vaults"]}
        who = restored.ok("whoami")
        c.a.ok("vault", "member", "add", who["user_id"], "--role", "editor", "--vault", "team")
        error = c.a.err("sync", "token", "new", "--device", who["device_id"])
        assert error["code"] == "device_not_found"
    finally:
        restored.stop()


def test_the_other_vaults_sync_while_one_is_refused(collision: Collision) -> None:
    """SY-1: each vault's merge is all or nothing on its own. While B refuses "team" (and A
    refuses B's default vault, which holds the copy), A's new note in the default vault still
    reaches B in the same session; the command names the vault not merged on each side and
    exits 1, and a second sync merges nothing twice. (A refused vault used to end the session:
    vaults merged before it stayed merged, the ones after it never were.)"""
    c = collision
    news = str(c.a.put("default news", "otter news body")["id"])
    ids = {v["name"]: v["id"] for v in c.a.ok("vaults")["vaults"]}

    def run_sync(*extra: str) -> tuple[int, str]:
        proc = c.b.run("sync", c.listener.url, "--token-stdin", *extra, input=c.token + "\n", timeout=300)
        return proc.returncode, proc.stdout

    for attempt in range(2):
        code, stdout = run_sync("--json")
        assert code == 1, stdout
        result = json.loads(stdout)
        ours = {r["vault"]: r for r in result["vaults"]}
        assert ours[ids["team"]]["error"]["code"] == "sync_rejected"
        if attempt == 0:
            assert "error" not in ours[ids["default"]] and ours[ids["default"]]["revisions_added"] == 1
        else:
            assert ours.get(ids["default"], {"revisions_added": 0})["revisions_added"] == 0  # nothing new to send
        theirs = {r["vault"]: r for r in result["peer_vaults"]}
        assert theirs[ids["default"]]["error"]["code"] == "sync_rejected"  # B's copy, refused on A
        assert c.b.ok("get", news)["body"] == "otter news body"
    code, text = run_sync()
    assert code == 1
    assert f"vault {ids['team'][:12]}: not merged here [sync_rejected]" in text
    assert f"vault {ids['default'][:12]}: the peer did not merge our changes [sync_rejected]" in text
