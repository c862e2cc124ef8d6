"""Cloud object sync through a real S3 wire-protocol server on loopback (issue 21; CL-2, CL-3).

Every device is its own data home served by its own daemon; devices never talk to each other,
only to the bucket (moto's server mode, a separate HTTP server speaking the S3 protocol). The
engines use their own S3 client; the tests look at the bucket with boto3, like an operator.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cloud.support import ACCESS, SECRET, HoldingRelay, S3Server, add_account, bucket_objects
from tests.helpers import PASSWORD, Cli
from tests.integration.test_files import pack_files, pseudo_random
from tests.sync.support import B_PASSWORD, C_PASSWORD, add_device, make_pair, titles

# Back-off base of 1 ms: retries are due at once, and the doubling is read from the records.
ENV = {"MEMORIES_CLOUD_BACKOFF_MS": "1"}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    a, b = make_pair(tmp_path, ENV)
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def _bucket(s3: S3Server, request: pytest.FixtureRequest) -> str:
    return s3.bucket("t-" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:20])


def _sync(cli: Cli) -> dict[str, Any]:
    return cli.ok("cloud", "sync")


def _sync_with_gap(cli: Cli) -> dict[str, Any]:
    """A sync that leaves a gap (CL-5): exit 1, and the answer says why."""
    proc = cli.run("cloud", "sync", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_two_engines_sync_both_ways_and_a_third_catches_up_from_the_bucket(
    s3: S3Server, pair: tuple[Cli, Cli], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """CL-3: two engines that never talk to each other sync through one bucket both ways; a
    device joined later catches up from the bucket alone; the bucket holds only sealed bytes
    named by their SHA-256; DesktopStatus lists the provider kind."""
    a, b = pair
    bucket = _bucket(s3, request)
    assert a.ok("status")["providers"] == []
    add_account(a, s3.endpoint, bucket)
    add_account(b, s3.endpoint, bucket, password=B_PASSWORD)
    assert a.ok("status")["providers"] == ["s3"]

    a.put("Alpha from A", "alpha-body-7d1e")
    first = _sync(a)
    assert first["uploaded"] == 1 and first["enqueued"] == 1
    got = _sync(b)
    assert sum(int(r["revisions_added"]) for r in got["merged"]) == 1
    assert titles(b) == {"Alpha from A"}

    b.put("Beta from B", "beta-body-3c9a")
    _sync(b)
    _sync(a)
    assert titles(a) == {"Alpha from A", "Beta from B"}
    assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 0

    # A third device joins through A; A publishes for it, C reads only the bucket.
    c = Cli(home=tmp_path / "c", env=dict(ENV))
    try:
        add_device(a, c, "desktop", C_PASSWORD)
        _sync(a)
        add_account(c, s3.endpoint, bucket, password=C_PASSWORD)
        _sync(c)
        assert titles(c) == {"Alpha from A", "Beta from B"}
    finally:
        c.stop()

    stored = bucket_objects(s3, bucket)
    objects = {k: v for k, v in stored.items() if k.startswith("o/")}
    assert objects and any(k.startswith("d/") for k in stored)
    for key, data in objects.items():
        assert key == "o/" + hashlib.sha256(data).hexdigest()
    for data in stored.values():
        for plain in (b"Alpha from A", b"alpha-body-7d1e", b"Beta from B", b"beta-body-3c9a", SECRET.encode()):
            assert plain not in data


def test_descriptor_before_its_object_stays_pending_with_persisted_backoff(
    s3: S3Server, pair: tuple[Cli, Cli], request: pytest.FixtureRequest
) -> None:
    """CL-3: a descriptor whose object is missing (or whose bytes do not match its ID) stays
    pending, merges nothing, and is retried with exponential back-off that survives a lock;
    when the object arrives it merges. Foreign keys are ignored and a forged descriptor is
    refused (reported, nothing merged). CL-5: each of these is a gap, so the sync exits 1."""
    a, b = pair
    bucket = _bucket(s3, request)
    add_account(a, s3.endpoint, bucket)
    add_account(b, s3.endpoint, bucket, password=B_PASSWORD)
    a.put("Late object", "late-body")
    _sync(a)
    stored = bucket_objects(s3, bucket)
    [(object_key, object_bytes)] = [(k, v) for k, v in stored.items() if k.startswith("o/")]
    [descriptor_key] = [k for k in stored if k.startswith("d/")]
    client = s3.client()

    # The storage holds other bytes under the object's name: not the object.
    client.put_object(Bucket=bucket, Key=object_key, Body=b"not the sealed object")
    client.put_object(Bucket=bucket, Key=descriptor_key.rsplit("/", 1)[0] + "/zz-foreign", Body=b"junk")
    got = _sync_with_gap(b)
    assert [(g["seq"], g["why"], g["code"]) for g in got["gaps"]] == [(1, "missing", "cloud_object_missing")]
    assert got["merged"] == [] and got["corrupt"] == 1 and int(got["ignored"]) >= 1
    assert [(p["seq"], p["attempts"]) for p in got["pending"]] == [(1, 1)]
    assert titles(b) == set()
    assert b.ok("status")["sync_queue"]["inbox"] >= 1

    # Gone altogether: still pending, the next try is twice as far away.
    client.delete_object(Bucket=bucket, Key=object_key)
    again = _sync_with_gap(b)
    [pending] = again["pending"]
    assert pending["attempts"] == 2 and pending["retry_in_ms"] == 2 * 1
    assert titles(b) == set()

    # The back-off is persisted: a lock and unlock keep it.
    b.ok("lock")
    b.unlock(B_PASSWORD)
    [row] = b.ok("cloud", "accounts")["accounts"]
    assert row["inbox"] == 1 and row["pending"][0]["attempts"] == 2

    client.put_object(Bucket=bucket, Key=object_key, Body=object_bytes)
    done = _sync(b)
    assert done["pending"] == [] and len(done["merged"]) == 1
    assert titles(b) == {"Late object"}

    # A descriptor forged under A's path (no valid signature) is refused, nothing merged.
    forged = descriptor_key.rsplit("/", 1)[0] + "/000000000002"
    client.put_object(Bucket=bucket, Key=forged, Body=b"MEMCLDD\x01" + b"\x80" * 40)
    refused = _sync_with_gap(b)
    assert [r["code"] for r in refused["rejected"]] == ["sync_rejected"]
    assert [(g["seq"], g["why"]) for g in refused["gaps"]] == [(2, "refused")]
    assert refused["merged"] == [] and titles(b) == {"Late object"}


def test_a_lock_during_the_transfer_voids_the_ack_and_the_retry_resends_the_same_object(
    s3: S3Server, pair: tuple[Cli, Cli], request: pytest.FixtureRequest
) -> None:
    """CL-3 (and ST-10): the vault is locked (and unlocked again) while the upload is in
    flight; the late acknowledgement is dropped (the lock cancels the transfer and the sync
    answers `locked`; the outbox keeps the entry), and the
    next sync sends exactly the same object bytes under the same ID."""
    a, _ = pair
    bucket = _bucket(s3, request)
    port = int(s3.endpoint.rsplit(":", 1)[1])
    relay = HoldingRelay(port).start()
    try:
        add_account(a, relay.endpoint, bucket)
        a.put("Held upload", "held-body")
        relay.requests.clear()
        relay.hold_on = b"/d/"  # the descriptor goes up after the objects: hold it
        proc = subprocess.Popen(
            a.command("cloud", "sync", "--json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=a.environ(),
        )
        try:
            assert relay.held.wait(60), "the descriptor upload never started"
            # Locked and unlocked again before the upload returns: a new session, so the old
            # transfer's acknowledgement must not count.
            a.ok("lock")
            a.unlock()
            relay.release()
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode != 0
        # The lock voided the transfer: it cancelled the held upload, and the sync heard `locked`.
        assert '"locked"' in out, out
        first = sorted(p for m, p in relay.requests if m == "PUT" and "/o/" in p)
        assert len(first) == 1

        assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 1  # not acknowledged
        relay.hold_on = None
        relay.requests.clear()
        retried = a.ok("cloud", "sync")
        assert retried["uploaded"] == 1 and retried["enqueued"] == 0
        second = sorted(p for m, p in relay.requests if m == "PUT" and "/o/" in p)
        assert second == first  # the same object ID, so the same bytes
        assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 0
        stored = bucket_objects(s3, bucket)
        [(key, data)] = [(k, v) for k, v in stored.items() if k.startswith("o/")]
        assert first[0].endswith(key) and key == "o/" + hashlib.sha256(data).hexdigest()
    finally:
        relay.stop()


def test_a_lock_cancels_a_transfer_stuck_on_a_hung_endpoint_and_the_next_sync_resumes_st12(
    s3: S3Server, pair: tuple[Cli, Cli], request: pytest.FixtureRequest
) -> None:
    """ST-12, CL-3: the bucket endpoint accepts the object upload and never answers (a real
    socket that hangs, never released here). A lock cancels the transfer: the sync answers
    `locked` (not a connection its engine's restart had to cut after giving up on the drain),
    the engine is locked and serving again, nothing was acknowledged or half-stored, and after
    an unlock the next sync sends the same object and completes."""
    a, _ = pair
    bucket = _bucket(s3, request)
    port = int(s3.endpoint.rsplit(":", 1)[1])
    relay = HoldingRelay(port).start()
    try:
        add_account(a, relay.endpoint, bucket)
        a.put("Stuck upload", "stuck-body")
        relay.requests.clear()
        relay.hold_on = b"/o/"  # the first object upload: accepted, then no answer, ever
        proc = subprocess.Popen(
            a.command("cloud", "sync", "--json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=a.environ(),
        )
        try:
            assert relay.held.wait(60), "the object upload never started"
            assert a.ok("lock") == {"locked": True}
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert proc.returncode != 0
        # Cancelled by the lock, answered on its own connection: not cut off by the restart.
        assert json.loads(out)["error"]["code"] == "locked", out
        assert a.ok("status") == {"state": "locked"}
        assert not any(k.startswith(("o/", "d/")) for k in bucket_objects(s3, bucket))  # nothing half-stored
        a.unlock()
        assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 1  # not acknowledged
        stuck = [p for m, p in relay.requests if m == "PUT" and "/o/" in p]
        relay.hold_on = None
        relay.requests.clear()
        retried = a.ok("cloud", "sync")
        assert retried["uploaded"] == 1 and retried["enqueued"] == 0
        assert [p for m, p in relay.requests if m == "PUT" and "/o/" in p] == stuck  # the same object, resumed
        assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 0
        assert len([k for k in bucket_objects(s3, bucket) if k.startswith("o/")]) == 1
    finally:
        relay.stop()


def test_keys_never_leave_the_engine(s3: S3Server, vault: Cli, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """CL-2 (and BK-1): the S3 keys are stored sealed and never come back: not in `cloud
    accounts`, `cloud sync` or `status` answers, not in any file of the data home (store,
    logs), not in the bucket, and a backup restored elsewhere holds no cloud account."""
    bucket = _bucket(s3, request)
    added = add_account(vault, s3.endpoint, bucket)
    vault.put("Canary note", "body")
    outputs = [
        str(added),
        vault.run("cloud", "accounts", "--json").stdout,
        vault.run("cloud", "accounts").stdout,
        vault.run("cloud", "sync", "--json").stdout,
        vault.run("status", "--json").stdout,
        vault.run("status").stdout,
    ]
    for text in outputs:
        assert SECRET not in text and ACCESS not in text
    for path in vault.home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and ACCESS.encode() not in data, path
    for data in bucket_objects(s3, bucket).values():
        assert SECRET.encode() not in data and ACCESS.encode() not in data

    vault.sudo()
    backup = tmp_path / "cloud.backup"
    vault.ok("backup", "create", str(backup), "--password-stdin", input="backup pw for cloud 1\n")
    restored = Cli(home=tmp_path / "restored")
    try:
        proc = restored.run("restore", str(backup), "--password-stdin", "--json", input="backup pw for cloud 1\nnew pw 2\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if restored.ok("status")["locked"]:
            restored.unlock("new pw 2")
        assert restored.ok("cloud", "accounts")["accounts"] == []
        assert restored.ok("status")["providers"] == []
    finally:
        restored.stop()


def test_bad_accounts_are_typed_errors_and_store_nothing(s3: S3Server, vault: Cli) -> None:
    """CL-2: an http:// endpoint off loopback, a bucket that does not exist, no keys, or no sudo
    are typed errors that store no account and never echo the secret."""
    vault.sudo(PASSWORD)
    base = ["cloud", "add", "s3", "--name", "x", "--bucket", "no-such-bucket-here", "--keys-stdin"]
    keys = f"{ACCESS}\n{SECRET}\n"
    off_loopback = vault.err(*base, "--endpoint", "http://192.0.2.1:9000", input=keys)
    assert off_loopback["code"] == "invalid_input"
    missing = vault.err(*base, "--endpoint", s3.endpoint, input=keys)
    assert missing["code"] == "cloud_denied"
    no_keys = vault.err(*base, "--endpoint", s3.endpoint, input="\n")
    assert no_keys["code"] == "invalid_input"
    for error in (off_loopback, missing, no_keys):
        assert SECRET not in str(error)
    vault.ok("lock")
    vault.unlock()  # unlocking drops sudo
    bucket = s3.bucket("exists-but-no-sudo")
    denied = vault.err(
        "cloud", "add", "s3", "--name", "y", "--endpoint", s3.endpoint, "--bucket", bucket, "--keys-stdin", input=keys
    )
    assert denied["code"] == "elevation_required"
    assert vault.ok("cloud", "accounts")["accounts"] == []
    assert vault.err("cloud", "sync")["code"] == "not_found"


def test_a_file_in_a_pack_file_travels_through_the_bucket(
    s3: S3Server, pair: tuple[Cli, Cli], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """CL-3, issue 32: a file whose chunks lie in a pack file beside A's store (not in rows) reaches
    B through the bucket byte for byte, checked against its signed digests; the bucket holds none
    of its bytes in clear."""
    a, b = pair
    bucket = _bucket(s3, request)
    add_account(a, s3.endpoint, bucket)
    add_account(b, s3.endpoint, bucket, password=B_PASSWORD)
    source = tmp_path / "big.bin"
    sha = pseudo_random(source, 2 * 1024 * 1024 + 3, b"cloud")
    file_id = a.ok("file", "add", str(source))["id"]
    assert len(pack_files(a)) == 1
    _sync(a)
    _sync(b)
    assert len(pack_files(b)) == 1  # arrived whole from the bucket, its chunks go to a pack on B as well
    out = tmp_path / "out.bin"
    assert b.ok("file", "get", file_id, "-o", str(out))["sha256"] == sha
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sha
    plain = source.read_bytes()
    for data in bucket_objects(s3, bucket).values():
        assert plain[:64] not in data and plain[-64:] not in data
