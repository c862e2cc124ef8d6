"""Concurrent stale edits make a visible conflict, resolved by `edit --resolve` (HI-4)."""

from __future__ import annotations

import concurrent.futures

from tests.helpers import Cli


def test_stale_edits_conflict_and_resolve(vault: Cli) -> None:
    """HI-4: a stale base creates a conflict, never a silent overwrite."""
    base = vault.put("Shared note", "v0")
    # Two editors both read the same head and edit concurrently.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda body: vault.ok("edit", base["id"], "--body", body, "--base", base["revision"]),
                ["from laptop", "from phone"],
            )
        )
    assert any(r["conflict"] for r in results)
    listed = vault.ok("list")
    assert listed["items"][0]["conflict"] is True and listed["conflicts"] == 1
    got = vault.ok("get", base["id"])
    assert got["conflict"] is True
    assert sorted(h["body"] for h in got["head_contents"]) == ["from laptop", "from phone"]
    # A plain edit is refused while in conflict: nothing is overwritten.
    assert vault.err("edit", base["id"], "--body", "blind overwrite")["code"] == "conflict"
    status = vault.ok("status")
    assert status["conflicts"] == 1 and status["attention"] is True

    resolved = vault.ok("edit", base["id"], "--resolve", "--body", "from laptop and phone")
    assert resolved["conflict"] is False
    history = vault.ok("history", base["id"])["revisions"]
    last = history[-1]
    heads_before = {r["revision"] for r in results}
    assert set(last["parents"]) == heads_before
    assert vault.ok("get", base["id"])["body"] == "from laptop and phone"
    assert vault.ok("list")["conflicts"] == 0


def test_sequential_stale_base_conflicts(vault: Cli) -> None:
    """HI-4: an edit naming an older revision as base forks instead of overwriting."""
    first = vault.put("n", "one")
    second = vault.ok("edit", first["id"], "--body", "two", "--base", first["revision"])
    stale = vault.ok("edit", first["id"], "--body", "three", "--base", first["revision"])
    assert second["conflict"] is False and stale["conflict"] is True
    bodies = sorted(h["body"] for h in vault.ok("get", first["id"])["head_contents"])
    assert bodies == ["three", "two"]


def test_edit_requires_known_base(vault: Cli) -> None:
    first = vault.put("n", "one")
    assert vault.err("edit", first["id"], "--body", "x", "--base", "abcdef12")["code"] == "not_found"
    assert vault.ok("get", first["id"])["body"] == "one"
