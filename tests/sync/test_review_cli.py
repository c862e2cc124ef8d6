"""The review commands of sync through the real CLI and daemon (SY-2, SY-3): quarantine and forks.

What gets quarantined or forked is proven in-process by tests/sync/test_merge_review.py; this
checks the commands a user types: empty states, typed errors for unknown IDs, and sudo gates.
"""

from __future__ import annotations

from tests.helpers import Cli


def test_quarantine_and_forks_when_there_is_nothing(vault: Cli) -> None:
    """SY-2, SY-3: an honest single device has nothing held back and no fork."""
    assert vault.ok("quarantine")["entries"] == []
    assert "Nothing is in quarantine." in vault.run("quarantine", "list").stdout
    assert vault.ok("vault", "forks")["forks"] == []
    assert "has no policy fork" in vault.run("vault", "forks").stdout


def test_review_actions_need_sudo_and_a_real_id(vault: Cli) -> None:
    """API-8: reapply/discard/resolve are elevated; an unknown ID is a typed error and changes nothing."""
    assert vault.err("quarantine", "reapply", "5e0b71c2")["code"] == "elevation_required"
    assert vault.err("quarantine", "discard", "5e0b71c2")["code"] == "elevation_required"
    assert vault.err("vault", "fork", "resolve", "--keep", "3f9a0c2e")["code"] == "elevation_required"
    vault.sudo()
    assert vault.err("quarantine", "show", "5e0b71c2")["code"] == "not_found"
    assert vault.err("quarantine", "reapply", "5e0b71c2")["code"] == "not_found"
    err = vault.err("vault", "fork", "resolve", "--keep", "3f9a0c2e")
    assert err["code"] == "not_found" and "nothing was changed" in err["message"]
    assert vault.ok("quarantine")["entries"] == []


def test_a_single_device_has_no_sync_queue(vault: Cli) -> None:
    """SY-4/DT-4: with nobody to sync with, writes queue nothing (the tray must not look busy forever)."""
    vault.put("alone", "no peer")
    assert vault.ok("status")["sync_queue"] == {"outbox": 0, "inbox": 0}
