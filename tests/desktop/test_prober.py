"""DT-3: the prober runs the sibling CLI with a deadline and kills and reaps it."""

from __future__ import annotations

import os
import signal

from desktop.prober import probe_once, sanitize
from tests.desktop.support import children_of
from tests.helpers import Cli


def test_probe_reports_not_running_locked_unlocked(cli: Cli) -> None:
    """DT-3: states come from `memories status --json` run as a child."""
    assert probe_once(cli.home, 10, cli.environ()).state == "not_running"
    cli.init()
    probe = probe_once(cli.home, 10, cli.environ())
    assert probe.state == "unlocked" and probe.status["vaults"] == 1
    cli.ok("lock")
    probe = probe_once(cli.home, 10, cli.environ())
    assert (probe.state, probe.status) == ("locked", {"state": "locked"})


def test_probe_of_a_stopped_engine_is_not_responding_and_leaves_no_child(vault: Cli) -> None:
    """DT-3: SIGSTOPped engine -> "not responding" at the deadline; the child is killed and reaped."""
    pid = vault.daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        probe = probe_once(vault.home, 1.0, vault.environ())
        leftovers = [c for c in children_of(os.getpid()) if "status" in c[1]]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert probe.state == "not_responding"
    assert probe.error == "timeout"
    assert leftovers == [], leftovers
    assert probe_once(vault.home, 10, vault.environ()).state == "unlocked"


def test_sanitize_keeps_only_the_projection() -> None:
    """DT-1/DT-3: foreign keys and non-plain values never reach the tray or the page."""
    probe = sanitize(
        {
            "state": "unlocked",
            "assets": 3,
            "vault_id": "00ff" * 8,
            "providers": ["onedrive"],
            "busy": False,
            "sync_queue": {"outbox": 1, "inbox": 0},
            "attention": {"nested": {"deep": 1}},
        }
    )
    assert probe.status == {
        "state": "unlocked",
        "assets": 3,
        "providers": ["onedrive"],
        "busy": False,
        "sync_queue": {"outbox": 1, "inbox": 0},
        "activity": [],
    }
    assert sanitize({"state": "locked", "assets": 3}).status == {"state": "locked"}
    assert sanitize({"error": {"code": "timeout", "message": "x"}}).state == "not_responding"
    assert sanitize({"state": "weird"}).state == "error"
    assert sanitize([1, 2]).state == "error"


def test_activity_passes_running_known_jobs_as_counts_only() -> None:
    """DT-1 (issue 17): running background jobs reach the desktop as a fixed job name and two
    counts; finished jobs, times and failure types are dropped."""
    probe = sanitize(
        {
            "state": "unlocked",
            "jobs": [
                {"name": "verify", "state": "done", "done": 5, "total": 5, "started": 1.0, "seconds": 0.2},
                {"name": "search-build", "state": "running", "done": 3000, "total": 10000, "started": 2.0},
                {"name": "segmenter-warm", "state": "running", "done": 0, "total": None},
                {"name": "search-tokens", "state": "waiting", "done": 0, "total": None},
            ],
        }
    )
    assert probe.status["activity"] == [
        {"job": "search-build", "done": 3000, "total": 10000},
        {"job": "segmenter-warm", "done": 0, "total": None},
    ]


def test_activity_drops_hostile_jobs() -> None:
    """DT-1: unknown names, long strings, nested objects, negative or boolean counts and
    extra keys never reach the tray or the page; the list is bounded; locked shows nothing."""
    hostile = [
        {"name": "/home/alice/secret.txt", "state": "running", "done": 1, "total": 2},
        {"name": "search-build" * 20, "state": "running", "done": 1, "total": 2},
        {"name": {"nested": "search-build"}, "state": "running", "done": 1, "total": 2},
        {"name": "search-build", "state": "running", "done": {"n": 1}, "total": 2},
        {"name": "search-build", "state": "running", "done": "3000", "total": 2},
        {"name": "search-build", "state": "running", "done": -1, "total": 2},
        {"name": "search-build", "state": "running", "done": True, "total": 2},
        {"name": "search-build", "state": "running", "done": 1, "total": [2]},
        {"name": "search-build", "state": "running", "done": 1, "total": 10**13},
        {"name": "search-build", "state": {"x": "running"}, "done": 1, "total": 2},
        "search-build",
        ["verify", "running"],
    ]
    assert sanitize({"state": "unlocked", "jobs": hostile}).status["activity"] == []
    extra = {"name": "verify", "state": "running", "done": 1, "total": 2, "item_id": "ab" * 16, "path": "/x"}
    assert sanitize({"state": "unlocked", "jobs": [extra]}).status["activity"] == [{"job": "verify", "done": 1, "total": 2}]
    many = [{"name": "verify", "state": "running", "done": i, "total": None} for i in range(100)]
    assert len(sanitize({"state": "unlocked", "jobs": many}).status["activity"]) == 8
    assert sanitize({"state": "unlocked", "jobs": {"verify": 1}}).status["activity"] == []
    assert sanitize({"state": "unlocked", "jobs": "x" * 10_000}).status["activity"] == []
    locked = sanitize({"state": "locked", "jobs": [{"name": "verify", "state": "running", "done": 1, "total": 2}]})
    assert locked.status == {"state": "locked"}
