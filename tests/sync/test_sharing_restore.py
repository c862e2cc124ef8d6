"""Sharing with a restored device (issue 29; BK-2, PO-3, ID-6), over real daemons.

Ben was a member of Ann's vault "family" and kept a backup. A restore makes a new device: new
keys, new vault IDs, and no claim on the old shared membership (BK-2). The restore says so in
words, with what to do. A plain restore keeps a copy of "family" that is Ben's alone; the copy
keeps the item IDs, so the shared vault itself cannot arrive beside it (an item lives in one
vault: the sync says so). `restore --leave-shared` leaves such vaults out: Ben's restored device
invites Ann's user again, Ann adds it, and the shared vault arrives on the next sync.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Cli
from tests.sync.support import Listener, free_port, sync, sync_err, token_for

BEN_PASSWORD = "ben's own vault password 3"
BACKUP_PASSWORD = "ben's backup password, long enough 5"
RESTORED_PASSWORD = "ben's restored device password 8"


@pytest.fixture
def people(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    ann = Cli(home=tmp_path / "ann")
    ben = Cli(home=tmp_path / "ben")
    try:
        ann.init()
        ben.init(BEN_PASSWORD)
        ann.ok("vault", "new", "family")
        ann.ok("put", "--title", "shared recipe", "--body", "flour and water", "--vault", "family")
        yield ann, ben
    finally:
        ann.stop()
        ben.stop()


def _vaults(cli: Cli) -> dict[str, dict[str, Any]]:
    return {str(v["name"]): v for v in cli.ok("vaults")["vaults"]}


def _titles(cli: Cli, vault: str) -> set[str]:
    return {str(row["title"]) for row in cli.ok("list", "--vault", vault)["items"]}


def _invite_and_add(ann: Cli, member: Cli, password: str, role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    member.sudo(password)
    invite = member.ok("whoami", "--invite", "--owner", str(ann.ok("whoami")["user_fingerprint"]))
    ann.sudo()
    added = ann.ok("vault", "member", "add", str(invite["invite"]), "--role", role, "--vault", "family", "--yes")
    return invite, added


def _restore(home: Path, backup: Path, *flags: str) -> Any:
    cli = Cli(home=home)
    proc = cli.run(
        "restore", str(backup), "--password-stdin", *flags, input=f"{BACKUP_PASSWORD}\n{RESTORED_PASSWORD}\n", timeout=180
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cli, proc.stdout


def test_a_restored_device_is_told_it_left_the_shared_vault_and_can_be_invited_again(
    people: tuple[Cli, Cli], tmp_path: Path
) -> None:
    """BK-2, PO-3, ID-6: a plain restore names the vaults that were shared with other people, says
    the old membership is not claimed, that its copy (Ben's alone: he is its Owner, under a new
    vault ID and a new user) keeps the shared vault from arriving, and how to rejoin; the sync
    refuses the shared vault beside the copy, naming the two vaults. Restored with
    `--leave-shared`, the device is invited again and receives the shared vault, written-since
    items included, under the role Ann gives; Ann can drop the old membership without touching
    the new one."""
    ann, ben = people
    _invite_and_add(ann, ben, BEN_PASSWORD, "editor")
    old_user = ben.ok("whoami")
    with Listener(ann, free_port()).start() as listener:
        sync(ben, listener.url, token_for(ann, ben))
    old_family = _vaults(ben)["family"]
    backup = tmp_path / "ben.backup"
    ben.sudo(BEN_PASSWORD)
    ben.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PASSWORD + "\n")
    ben.stop()
    ann.ok("put", "--title", "written after the backup", "--body", "x", "--vault", "family")

    # A plain restore, in the words a person reads (no --json): a copy that is Ben's alone.
    kept, text = _restore(tmp_path / "ben-kept", backup)
    try:
        assert "does not claim the old shared membership" in text
        assert "restored as copies that are yours alone: family" in text and "--leave-shared" in text
        copy = _vaults(kept)["family"]
        assert copy["role"] == "owner" and copy["id"] != old_family["id"]
        assert _titles(kept, "family") == {"shared recipe"}
        assert kept.ok("whoami")["user_fingerprint"] != old_user["user_fingerprint"]
        _invite_and_add(ann, kept, RESTORED_PASSWORD, "reader")
        with Listener(ann, free_port()).start() as listener:
            refused = sync_err(kept, listener.url, token_for(ann, kept))
        assert refused["code"] == "sync_rejected" and "One item in two vaults" in refused["message"], refused
        assert {v["id"] for v in _vaults(kept).values()}.isdisjoint({old_family["id"]})
    finally:
        kept.stop()

    # Restored leaving shared vaults out: invited again, it receives the shared vault.
    restored, out = _restore(tmp_path / "ben-restored", backup, "--leave-shared", "--json")
    try:
        result = json.loads(out)
        assert result["shared_vaults"] == [{"name": "family", "people": 2, "left_out": True}]
        assert result["vaults"] == 1 and "family" not in _vaults(restored)
        me = restored.ok("whoami")
        assert result["user_fingerprint"] == me["user_fingerprint"] != old_user["user_fingerprint"]
        assert me["device_fingerprint"] != old_user["device_fingerprint"]

        invite, added = _invite_and_add(ann, restored, RESTORED_PASSWORD, "reader")
        assert added["user_fingerprint"] == invite["user_fingerprint"] == result["user_fingerprint"]  # ID-6 at both ends
        with Listener(ann, free_port()).start() as listener:
            sync(restored, listener.url, token_for(ann, restored))
        name = "family"
        assert _vaults(restored)[name]["id"] == old_family["id"] and _vaults(restored)[name]["role"] == "reader"
        assert _titles(restored, name) == {"shared recipe", "written after the backup"}

        # Ann drops the old membership (the lost device's user); the new one keeps syncing.
        ann.sudo()
        ann.ok("vault", "member", "remove", str(old_user["user_id"]), "--vault", "family")
        ann.ok("put", "--title", "after the old membership ended", "--body", "y", "--vault", "family")
        with Listener(ann, free_port()).start() as listener:
            sync(restored, listener.url, token_for(ann, restored))
        assert "after the old membership ended" in _titles(restored, name)
    finally:
        restored.stop()
