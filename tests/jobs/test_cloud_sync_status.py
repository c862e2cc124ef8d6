"""The cloud worker and peer sync report through the background runtime (issue 16): a real daemon, a real S3
server (moto) behind a relay that holds one request, so "mid-transfer" is a state the test sets.
`status --json` lists `cloud-sync` with its phase; a lock mid-transfer leaves it cancelled (and the
sync answers `locked`, as before); a sync that completes is listed as done with every phase."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cloud.support import HoldingRelay, S3Server, add_account
from tests.helpers import Cli
from tests.sync.support import Listener, free_port, make_pair, sync, sync_err, token_for


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Cli]:
    """A vault with a second device (a one-device vault has nothing to send to the storage)."""
    a, b = make_pair(tmp_path, {"MEMORIES_CLOUD_BACKOFF_MS": "1"})
    try:
        yield a
    finally:
        a.stop()
        b.stop()


def cloud_jobs(cli: Cli) -> list[dict[str, Any]]:
    return [job for job in cli.ok("status").get("jobs", []) if job["name"] == "cloud-sync"]


def test_cloud_sync_is_listed_with_its_phase_and_a_lock_cancels_it(s3: S3Server, vault: Cli) -> None:
    """Issue 16: the worker is listed while it transfers (phase 1 of 4), a lock leaves it cancelled
    and the sync refused with `locked` (or cut off by the engine's restart after the lock,
    ST-12); the retry completes and is listed as done, 4 of 4 (the
    fourth phase publishes the delivery marks, CL-5)."""
    bucket = s3.bucket("t-jobs-cloud-status")
    relay = HoldingRelay(int(s3.endpoint.rsplit(":", 1)[1])).start()
    try:
        add_account(vault, relay.endpoint, bucket)
        vault.put("Held upload", "held-body")
        relay.hold_on = b"/d/"  # the descriptor goes up after the objects: hold it
        proc = subprocess.Popen(
            vault.command("cloud", "sync", "--json"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=vault.environ(),
        )
        try:
            assert relay.held.wait(60), "the descriptor upload never started"
            (held,) = [job for job in cloud_jobs(vault) if job["state"] == "running"]
            assert held["done"] == 1 and held["total"] == 4  # enqueued, transferring
            vault.ok("lock")
            vault.unlock()
            relay.release()
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        # Refused with `locked`, or (ST-12) its connection closed by the engine's restart after
        # the lock, which stops waiting for an upload held on the network.
        assert proc.returncode != 0 and ('"locked"' in out or '"daemon_unavailable"' in out), out
        assert cloud_jobs(vault)[-1]["state"] == "cancelled"
        relay.hold_on = None
        vault.ok("cloud", "sync")
        done = cloud_jobs(vault)[-1]
        assert done["state"] == "done" and done["done"] == done["total"] == 4
    finally:
        relay.stop()


def test_a_peer_sync_is_listed_as_background_work(tmp_path: Path) -> None:
    """Issue 16: `memories sync URL` (a real listener on the other device) is listed in `status`
    as `sync`, done with 1 of 1 once it answered; a refused one is listed as failed."""
    a, b = make_pair(tmp_path)
    try:
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            assert sync(b, listener.url, token)["synced"] is True
            (ran,) = [job for job in b.ok("status")["jobs"] if job["name"] == "sync"]
            assert ran["state"] == "done" and ran["done"] == ran["total"] == 1
            sync_err(b, listener.url, "not-a-token")
            refused = [job for job in b.ok("status")["jobs"] if job["name"] == "sync"]
            assert [job["state"] for job in refused] == ["done", "failed"]
    finally:
        a.stop()
        b.stop()
