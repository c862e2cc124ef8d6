"""Background work through a real daemon: `memories status --json` shows the index build's progress,
and `memories lock` cancels it (issue 16). States and counts are asserted, never times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config import EngineConfig, Paths
from engine.ipc.client import IpcClient
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from tests.helpers import PASSWORD, Cli

NOTES = 4000
ATTEMPTS = 8  # unlocks tried until one lock lands while the build runs (each is a fresh build)
WORDS = "garden river lantern harbor meadow copper violet orchard summit willow ember quartz".split()


def notes(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"title": f"Note {n}", "body": " ".join(WORDS[(n * 7 + k) % len(WORDS)] for k in range(60)) + f" number {n}"}
        for n in range(start, start + count)
    ]


def builds(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [job for job in status.get("jobs", []) if job["name"] == "search-build"]


def test_status_shows_build_progress_and_lock_cancels_it(cli: Cli) -> None:
    """Issue 16: the build is a background job with done/total in `status --json`; a lock cancels it."""
    cli.init()
    with IpcClient(Paths(cli.home).socket) as client:
        for start in range(0, NOTES, 1000):
            client.request({"op": "import_batch", "items": notes(start, 1000)})
    cli.ok("lock")
    cli.unlock()  # a build of the whole vault
    settled = cli.ok("search", "lantern", "--wait", "120")
    assert settled["partial"] is False
    finished = builds(cli.ok("status"))
    assert finished and finished[-1]["state"] == "done"
    assert finished[-1]["done"] == finished[-1]["total"] >= NOTES

    cancelled = None
    for _ in range(ATTEMPTS):
        cli.ok("lock")
        seen = None
        with IpcClient(Paths(cli.home).socket) as client:
            client.request({"op": "unlock", "password": PASSWORD})
            # Poll over one connection (no process start per read) until the build has counted
            # some assets but not all, then lock at once.
            while True:
                job = builds(client.request({"op": "desktop_status"}))[-1]
                if job["state"] == "running" and job["total"] and 0 < job["done"] < job["total"]:
                    seen = job
                    client.request({"op": "lock"})
                    break
                if job["state"] in ("done", "failed", "cancelled"):
                    break  # this build ended before it was caught; try another unlock
        if seen is None:
            continue
        cli.unlock()
        while True:  # the interrupted build ends at its next batch boundary
            (ended,) = [job for job in builds(cli.ok("status")) if job["started"] == seen["started"]]
            if ended["state"] not in ("waiting", "running"):
                break
        assert ended["state"] in ("cancelled", "done"), ended
        if ended["state"] == "cancelled":  # "done": the lock came after its last batch
            cancelled = ended
            break
    assert cancelled is not None, "no lock landed while a build was running"
    assert cancelled["done"] < cancelled["total"]
    # The next build runs to the end: the index is complete again.
    assert cli.ok("search", "lantern", "--wait", "120")["partial"] is False
    cli.stop()


def test_locked_status_still_says_only_locked(cli: Cli) -> None:
    """DT-1: the jobs list appears only while unlocked; a locked engine says only "locked"."""
    cli.init()
    assert isinstance(cli.ok("status")["jobs"], list)
    cli.ok("lock")
    assert cli.ok("status") == {"state": "locked"}
    cli.stop()


def test_a_failed_signature_check_is_a_failed_job(tmp_path: Path) -> None:
    """Issue 16, ST-10: the signature re-check is the `verify` job; a forged signature ends it as
    failed (code store_corrupt, no detail) and locks the vault."""
    service = Service(Paths(tmp_path / "home"), EngineConfig())
    caller = Caller("cli:test")
    service.dispatch({"op": "init", "password": PASSWORD}, caller)
    service.dispatch({"op": "put", "title": "note", "body": "body"}, caller)
    assert service.verifier.handle is not None and service.verifier.handle.wait(60)
    assert service.verifier.handle.state == "done"
    store = service.require_store()
    revision = next(record for _, record in reversed(store.load().records) if record.get("t") == "revision")
    store.commit([dict(revision, sig=bytes([revision["sig"][0] ^ 1]) + bytes(revision["sig"][1:]))])
    service.lock_now("test")
    service.dispatch({"op": "unlock", "password": PASSWORD}, caller)
    check = service.verifier.handle
    assert check is not None and check.wait(60)
    assert (check.state, check.failure) == ("failed", "store_corrupt")
    assert service.state is None
    assert [job["state"] for job in service.background.snapshot() if job["name"] == "verify"][-1] == "failed"
