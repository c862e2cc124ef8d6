"""Another person's vault delivered through the cloud bucket (issue 29; PO-3, ID-6, SY-5, PO-2).

Two users and three devices, every one a real home with its own daemon, that never talk to each
other: only to one bucket of a real S3 wire-protocol server on loopback (moto's server mode).
Ann (device A) owns vault "family"; Ben (B, and B2 joined to B) invites Ann's user and Ann adds
the invitation with a role. Ben's devices receive the vault on their next `cloud sync` (B by the
introduction Ann's device leaves for it, engine/cloud/intro.py; B2 from B); roles hold through
the bucket; a removal rotates the epoch and nothing written afterwards reaches Ben, even from a
copy of his old store.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.cloud.objects import device_dir
from engine.sync.merge import READER_REASON
from tests.cloud.support import S3Server, add_account, bucket_objects
from tests.helpers import Cli
from tests.sync.support import C_PASSWORD, add_device, device_id

ENV = {"MEMORIES_CLOUD_BACKOFF_MS": "1"}
BEN_PASSWORD = "ben's own vault password 3"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def people(tmp_path: Path, s3: S3Server, request: pytest.FixtureRequest) -> Iterator[tuple[Cli, Cli, Cli, str]]:
    ann = Cli(home=tmp_path / "ann", env=dict(ENV))
    ben = Cli(home=tmp_path / "ben", env=dict(ENV))
    ben2 = Cli(home=tmp_path / "ben2", env=dict(ENV))
    try:
        ann.init()
        ben.init(BEN_PASSWORD)
        add_device(ben, ben2, "ben-laptop", C_PASSWORD, approver_password=BEN_PASSWORD)
        ann.ok("vault", "new", "family")
        ann.ok("put", "--title", "shared recipe", "--body", "flour and water", "--vault", "family")
        ann.put("ann's private note", "not for ben")
        ben.put("ben's private note", "not for ann")
        bucket = s3.bucket("share-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20])
        add_account(ann, s3.endpoint, bucket)
        add_account(ben, s3.endpoint, bucket, password=BEN_PASSWORD)
        add_account(ben2, s3.endpoint, bucket, password=C_PASSWORD)
        yield ann, ben, ben2, bucket
    finally:
        for cli in (ann, ben, ben2):
            cli.stop()


def _sync(cli: Cli) -> dict[str, Any]:
    proc = cli.run("cloud", "sync", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _vaults(cli: Cli) -> dict[str, dict[str, Any]]:
    return {str(v["name"]): v for v in cli.ok("vaults")["vaults"]}


def _titles(cli: Cli, vault: str) -> set[str]:
    return {str(row["title"]) for row in cli.ok("list", "--vault", vault)["items"]}


def _all_titles(cli: Cli) -> set[str]:
    return {str(row["title"]) for row in cli.ok("list", "--all")["items"]}


def _add_ben(ann: Cli, ben: Cli, role: str) -> dict[str, Any]:
    ben.sudo(BEN_PASSWORD)
    invite = ben.ok("whoami", "--invite", "--owner", str(ann.ok("whoami")["user_fingerprint"]))
    ann.sudo()
    return ann.ok("vault", "member", "add", str(invite["invite"]), "--role", role, "--vault", "family", "--yes")


def _descriptors_for(s3: S3Server, bucket: str, to: str, sender: str) -> set[str]:
    prefix = f"d/{device_dir(bytes.fromhex(to))}/{device_dir(bytes.fromhex(sender))}/"
    return {k for k in bucket_objects(s3, bucket) if k.startswith(prefix)}


def test_the_shared_vault_arrives_through_the_bucket_and_edits_flow_both_ways(
    s3: S3Server, people: tuple[Cli, Cli, Cli, str]
) -> None:
    """PO-3, SY-5: Ben's device receives the vault on its first `cloud sync` (no listener, no
    relay: only the bucket), with the role Ann gave; his edit reaches Ann the same way; his second
    device receives it from his first; neither person sees the other's other vaults, and the
    bucket holds no plaintext."""
    ann, ben, ben2, bucket = people
    checked = _add_ben(ann, ben, "editor")
    assert checked["devices_added"] == 2

    sent = _sync(ann)
    assert sent["uploaded"] >= 1 and sent["introductions"] == 2  # one for each of Ben's devices
    assert "family" not in _vaults(ben)
    # Whoever can write to the bucket can leave junk where introductions go: it is ignored.
    s3.client().put_object(Bucket=bucket, Key=f"i/{device_dir(bytes.fromhex(device_id(ben)))}/{'0' * 32}", Body=b"junk")
    first = _sync(ben)
    assert first["introduced"] == 1, first
    assert _titles(ben, "family") == {"shared recipe"}
    assert _vaults(ben)["family"]["role"] == "editor"
    assert first["gaps"] == [] and first["rejected"] == []

    ben.ok("put", "--title", "ben's addition", "--body", "salt", "--vault", "family")
    _sync(ben)
    _sync(ann)
    assert _titles(ann, "family") == {"shared recipe", "ben's addition"}
    # Once a device of Ben's answered with its marks, Ann's device no longer introduces itself to it.
    assert _sync(ann)["introductions"] == 1  # only B2, which has not synced yet

    # SY-5: B2 follows Ben's devices: it receives the vault from B through the bucket (Ann's
    # introduction for B2 is not followed: no invitation made on B2 pins her).
    assert _sync(ben2)["introduced"] == 0
    assert _titles(ben2, "family") == {"shared recipe", "ben's addition"}
    assert _vaults(ben2)["family"]["role"] == "editor"
    _sync(ben2)  # now holding the vault, B2 follows Ann's device and answers with its marks
    assert _sync(ann)["introductions"] == 0

    # Each side's other vaults stay invisible to the other.
    assert "ben's private note" not in _all_titles(ann)
    assert "ann's private note" not in _all_titles(ben) | _all_titles(ben2)
    for data in bucket_objects(s3, bucket).values():
        for plain in (b"shared recipe", b"flour and water", b"ben's addition", b"not for ben", b"not for ann"):
            assert plain not in data


def test_a_readers_write_through_the_bucket_is_quarantined_at_the_owner(people: tuple[Cli, Cli, Cli, str]) -> None:
    """PO-2, PO-3, SY-2: Ann makes Ben a Reader; a write Ben's device made before it heard of that
    (offline) travels through the bucket and is quarantined at Ann's device (and at Ben's own),
    never applied; afterwards Ben's device refuses to write at all."""
    ann, ben, ben2, _bucket = people
    _add_ben(ann, ben, "editor")
    _sync(ann)
    _sync(ben)
    assert _vaults(ben)["family"]["role"] == "editor"
    ben_user = str(ben.ok("whoami")["user_id"])
    ann.sudo()
    ann.ok("vault", "member", "role", ben_user, "--role", "reader", "--vault", "family")
    _sync(ann)
    # Ben has not synced since: his device still thinks he may write.
    ben.ok("put", "--title", "reader write", "--body", "written after the demotion", "--vault", "family")
    _sync(ben)
    assert _vaults(ben)["family"]["role"] == "reader"
    _sync(ann)
    assert "reader write" not in _titles(ann, "family")
    held = ann.ok("quarantine", "list")["entries"]
    assert [str(e["reason"]) for e in held] == [READER_REASON], held
    assert ben.err("put", "--title", "another", "--body", "x", "--vault", "family")["code"] == "read_only"
    assert "reader write" not in _titles(ben, "family")
    # Ben's other device holds the same role: it receives the vault from B and refuses to write.
    # (B's write reaches it in the bundle B made before it heard of the demotion, under the policy
    # that let B write; B2 keeps it like any revision it applied before it learned of the policy:
    # docs/sync.md, Quarantine, "Both sides of a sync hold back the same writes".)
    _sync(ben)
    _sync(ben2)
    assert _vaults(ben2)["family"]["role"] == "reader" and "shared recipe" in _titles(ben2, "family")
    assert ben2.err("put", "--title", "b2 write", "--body", "x", "--vault", "family")["code"] == "read_only"


def _copy_home(src: Path, dst: Path) -> None:
    """A copy of a stopped device's whole data home (its store, keys and cloud account)."""

    def sockets(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if stat.S_ISSOCK((Path(folder) / n).lstat().st_mode)]

    shutil.copytree(src, dst, ignore=sockets, symlinks=True)


def test_removal_rotates_and_the_bucket_gives_the_removed_person_nothing_new(
    s3: S3Server, people: tuple[Cli, Cli, Cli, str], tmp_path: Path
) -> None:
    """PO-3: Ann removes Ben; the vault starts a new epoch; what Ann writes afterwards is sealed to
    no device of Ben's, so neither Ben's device nor a copy of his old store (same keys, same cloud
    account) receives it through the bucket, and their epoch stays the old one."""
    ann, ben, ben2, bucket = people
    _add_ben(ann, ben, "editor")
    _sync(ann)
    _sync(ben)
    _sync(ben)  # publishes B's marks for A, and hands the vault on to B2
    _sync(ben2)
    assert _titles(ben2, "family") == {"shared recipe"}
    epoch_before = int(_vaults(ben)["family"]["epoch"])
    ben_user = str(ben.ok("whoami")["user_id"])
    a_id, b_id, b2_id = device_id(ann), device_id(ben), device_id(ben2)
    ben.stop()
    _copy_home(ben.home, tmp_path / "ben-copy")
    copy = Cli(home=tmp_path / "ben-copy", env=dict(ENV))
    try:
        before = _descriptors_for(s3, bucket, b_id, a_id) | _descriptors_for(s3, bucket, b2_id, a_id)
        assert before
        ann.sudo()
        removed = ann.ok("vault", "member", "remove", ben_user, "--vault", "family")
        assert removed["new_epoch"] is True
        ann.ok("put", "--title", "after removal", "--body", "secret plan", "--vault", "family")
        _sync(ann)
        # Nothing new is addressed to either of Ben's devices.
        assert _descriptors_for(s3, bucket, b_id, a_id) | _descriptors_for(s3, bucket, b2_id, a_id) == before
        ben.unlock(BEN_PASSWORD)
        copy.unlock(BEN_PASSWORD)
        for device in (ben, copy, ben2):
            _sync(device)
            assert "after removal" not in _titles(device, "family")
            assert int(_vaults(device)["family"]["epoch"]) == epoch_before
        assert int(_vaults(ann)["family"]["epoch"]) > epoch_before
        for data in bucket_objects(s3, bucket).values():
            assert b"secret plan" not in data and b"after removal" not in data
    finally:
        copy.stop()
