"""Both devices of a sync quarantine the same writes (SY-2), over a real `/v1/channel`.

A serves (`memories serve`), B syncs (`memories sync`); each is its own daemon and data home.
While B is offline it writes a note (twice) and edits A's note; meanwhile the user hands the
vault to another user and steps down to Reader on A (roles belong to users: a member's device
of another user cannot receive a vault yet, so this is how a device's right to write is taken
away through the real surface). B's next sync brings B the newer policy, and B quarantines its
own offline writes; in the same session B's bundle, built before either side merges, carries
those writes to A. A must hold them back too: a revision written under a superseded policy by
a device whose user the newer policy no longer lets write is quarantined on every device, and
only an explicit `quarantine reapply` on a device that may write brings its content back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.helpers import Cli
from tests.sync.support import OTHER_USER, Listener, free_port, step_down_to_reader, sync, token_for


@dataclass
class Offline:
    shared: str  # A's note, edited offline on B
    offline: str  # B's offline note (two revisions)
    first: dict[str, Any]  # `memories sync --json` on B, first sync after the offline writes
    second: dict[str, Any]  # the same, run again right after


def _found(cli: Cli, word: str) -> set[str]:
    return {str(r["title"]) for r in cli.ok("search", word, "--wait", "30")["results"]}


def _items(cli: Cli) -> list[tuple[str, str]]:
    return sorted((str(i["id"]), str(i["title"])) for i in cli.ok("list", "--all")["items"])


def _held_back(cli: Cli) -> list[tuple[str, str, str]]:
    return sorted((str(e["revision"]), str(e["asset"]), str(e["reason"])) for e in cli.ok("quarantine", "list")["entries"])


def _offline_writes(a: Cli, b: Cli, change_policy_on_a: list[list[str]], edit_on_a: str | None = None) -> Offline:
    """B syncs once, writes offline, A runs ``change_policy_on_a`` (sudo) and optionally edits
    the shared note itself; then B syncs twice."""
    with Listener(a, free_port()).start() as listener:
        token = token_for(a, b)
        shared = str(a.put("shared note", "shared zebrafirst body")["id"])
        sync(b, listener.url, token)

        offline = str(b.put("offline note", "quokkaoffline body")["id"])
        b.ok("edit", offline, "--body", "quokkaoffline second body")
        b.ok("edit", shared, "--body", "shared quokkaedit body")
        assert _found(b, "quokkaoffline") == {"offline note"}

        a.sudo()
        for command in change_policy_on_a:
            a.ok(*command)
        if edit_on_a is not None:
            a.ok("edit", shared, "--body", edit_on_a)

        first = sync(b, listener.url, token)
        second = sync(b, listener.url, token)
    return Offline(shared, offline, first, second)


def _counts(report: dict[str, Any]) -> tuple[int, int, int]:
    return (int(report["policies_added"]), int(report["revisions_added"]), int(report["quarantined"]))


def test_offline_writes_of_a_device_demoted_to_reader_are_quarantined_on_both_devices(pair: tuple[Cli, Cli]) -> None:
    """SY-2: the writes B made offline under the superseded policy reach A in the same session
    in which B quarantines them; A quarantines them too instead of applying them. Afterwards A
    neither lists, gets nor finds B's offline note or edit, shows its own note as it wrote it,
    and its `quarantine list` holds the same three revisions as B's, with the reason; both
    devices list the same items. A second sync changes nothing on either side and sends no
    revision (B no longer offers what it quarantined)."""
    a, b = pair
    run = _offline_writes(a, b, step_down_to_reader(a))

    assert _items(a) == _items(b) == [(run.shared, "shared note")]
    assert a.ok("get", run.shared)["body"] == b.ok("get", run.shared)["body"] == "shared zebrafirst body"
    assert a.err("get", run.offline)["code"] == "not_found"
    for word in ("quokkaoffline", "quokkaedit"):
        assert _found(a, word) == _found(b, word) == set()
    assert _found(a, "zebrafirst") == {"shared note"}

    [b_side] = run.first["vaults"]
    [a_side] = run.first["peer_vaults"]
    assert _counts(b_side) == (3, 0, 3)
    assert _counts(a_side) == (0, 0, 3)

    on_a, on_b = _held_back(a), _held_back(b)
    assert [rev for rev, _, _ in on_a] == [rev for rev, _, _ in on_b]
    assert sorted(asset for _, asset, _ in on_a) == sorted([run.offline, run.offline, run.shared])
    assert all("superseded policy" in reason and "Reader" in reason for _, _, reason in on_a)

    # The second sync: nothing to merge on either side, nothing re-sent as content.
    [b_again] = run.second["vaults"] or [{"policies_added": 0, "revisions_added": 0, "quarantined": 0}]
    [a_again] = run.second["peer_vaults"] or [{"policies_added": 0, "revisions_added": 0, "quarantined": 0}]
    assert _counts(b_again) == _counts(a_again) == (0, 0, 0)
    assert _items(a) == _items(b) == [(run.shared, "shared note")]
    assert _held_back(a) == on_a and _held_back(b) == on_b

    # Review stays local and explicit: A, a Reader too, may not bring the content back.
    entry = next(e for e in a.ok("quarantine", "list")["entries"] if e["asset"] == run.offline)
    a.sudo()
    assert a.err("quarantine", "reapply", entry["id"])["code"] == "read_only"
    assert _held_back(a) == on_a


def test_an_authorized_concurrent_offline_write_still_merges_on_both_devices(pair: tuple[Cli, Cli]) -> None:
    """SY-2 boundary: B is still a Writer (A adds a member and rotates the key while B writes
    offline, so B's writes name a superseded policy and epoch). Nothing is quarantined: both
    devices list B's offline note with its second body, and A's and B's concurrent edits of the
    shared note are one conflict on both sides (HI-4); a second sync changes nothing."""
    a, b = pair
    run = _offline_writes(
        a,
        b,
        [["vault", "member", "add", OTHER_USER, "--role", "editor"], ["vault", "rotate"]],
        edit_on_a="shared zebrasecond body from A",
    )

    [b_side] = run.first["vaults"]
    [a_side] = run.first["peer_vaults"]
    assert _counts(b_side) == (2, 1, 0)
    assert _counts(a_side) == (0, 3, 0)
    assert _held_back(a) == _held_back(b) == []

    assert _items(a) == _items(b)
    assert {title for _, title in _items(a)} == {"shared note", "offline note"}
    assert a.ok("get", run.offline)["body"] == b.ok("get", run.offline)["body"] == "quokkaoffline second body"
    assert _found(a, "quokkaoffline") == _found(b, "quokkaoffline") == {"offline note"}
    assert a.ok("status")["conflicts"] == b.ok("status")["conflicts"] == 1

    for report in (*run.second["vaults"], *run.second["peer_vaults"]):
        assert _counts(report) == (0, 0, 0)
    assert _items(a) == _items(b)
