"""The malicious-peer suite over the network (issue 14; SY-1, SY-4, API-4).

The liar is a real second process (tests/sync/lying_peer.py) that opens a joined device's
store, speaks the real protocol with the real bundle code and tampers with what it sends.
The honest engine A (its own daemon) syncs to it with `memories sync URL`: each lie must end
in a typed error, nothing merged, A's state exactly as before; an honest retry then works.
Token and listener checks run against A's real `memories serve`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Cli
from tests.sync.support import (
    B_PASSWORD,
    C_PASSWORD,
    Listener,
    add_device,
    device_id,
    free_port,
    make_pair,
    sync,
    sync_err,
    token_for,
)

LIMITED = {"MEMORIES_SYNC_MAX_BYTES": str(8 * 1024 * 1024), "MEMORIES_SYNC_MESSAGE_SECONDS": "3"}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    a, b = make_pair(tmp_path, env=LIMITED)
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def liar_pair(pair: tuple[Cli, Cli]) -> tuple[Cli, Cli]:
    """B has a chain of three revisions of one note and a second note, then its daemon stops."""
    a, b = pair
    note = b.put("chain", "v1")
    b.ok("edit", note["id"], "--body", "v2")
    b.ok("edit", note["id"], "--body", "v3")
    b.put("second", "x" * 5000)
    b.stop()
    return a, b


class Liar:
    def __init__(self, b: Cli, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.sync.lying_peer", str(b.home), B_PASSWORD, str(free_port()), mode],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the lying peer did not start: {self.process.stderr.read() if self.process.stderr else ''}"
        self.url = str(json.loads(line)["url"])

    def __enter__(self) -> Liar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


def _snapshot(cli: Cli) -> dict[str, Any]:
    status = cli.ok("status")
    items = sorted((row["id"], row["title"]) for row in cli.ok("list", "--all")["items"])
    return {"assets": status["assets"], "conflicts": status["conflicts"], "items": items, "devices": cli.ok("devices")}


def _lie(a: Cli, b: Cli, mode: str) -> dict[str, Any]:
    before = _snapshot(a)
    with Liar(b, mode) as liar:
        error = sync_err(a, liar.url, "msync1.any-token-will-do", timeout=120)
    assert _snapshot(a) == before, f"{mode}: the honest state changed"
    return error


@pytest.mark.parametrize(
    ("mode", "codes"),
    [
        ("ciphertext", {"sync_rejected"}),  # tampered ciphertext
        ("signature", {"sync_rejected"}),  # a forged revision signature
        ("drop", {"sync_rejected", "sync_invalid"}),  # a dropped revision in the middle of a chain
        ("reorder", {"sync_rejected"}),  # a reordered audit hash chain
        ("endless", {"sync_invalid"}),  # an endless stream: bounded by MEMORIES_SYNC_MAX_BYTES
        ("hugeframe", {"sync_invalid"}),  # one frame over the frame limit
        ("silent", {"sync_timeout"}),  # a peer that never finishes: the per-message deadline
        ("disconnect", {"sync_unreachable"}),  # a peer that dies mid-transfer
    ],
)
def test_a_lying_peer_is_refused_and_nothing_is_merged(liar_pair: tuple[Cli, Cli], mode: str, codes: set[str]) -> None:
    """SY-1: each lie ends in a typed error, A's state is exactly as before, and an honest
    sync afterwards still merges everything exactly once (resume without duplicates)."""
    a, b = liar_pair
    error = _lie(a, b, mode)
    assert error["code"] in codes, error
    assert "v1" not in error["message"] and "x" * 50 not in error["message"]
    with Liar(b, "honest") as liar:
        result = sync(a, liar.url, "msync1.any")
    assert [v["revisions_added"] for v in result["vaults"]] == [4]
    assert {row["title"] for row in a.ok("list", "--all")["items"]} == {"chain", "second"}


@pytest.mark.parametrize(
    ("mode", "sentence"),
    [
        ("pageorder", "came out of order (page 0 was due)"),
        ("pagehuge", "larger than a page may be"),
        ("pagemissing", "before its last page"),
        ("pagecount", "changed their page count midway"),
    ],
)
def test_a_malformed_inventory_page_is_refused_and_nothing_is_merged(
    liar_pair: tuple[Cli, Cli], mode: str, sentence: str
) -> None:
    """SY-1, SY-4 (issue 32): under sync protocol 2 the liar's inventory comes in pages of 64 bytes;
    a page out of order, a page over the page bound, a list that ends before its last page, or a
    page count that changes midway is sync_invalid with the sentence of that check, nothing is
    merged (A exactly as before), and an honest paged sync afterwards merges everything."""
    a, b = liar_pair
    error = _lie(a, b, mode)
    assert error["code"] == "sync_invalid" and sentence in error["message"], error
    with Liar(b, "honest") as liar:
        result = sync(a, liar.url, "msync1.any")
    assert [v["revisions_added"] for v in result["vaults"]] == [4]
    assert {row["title"] for row in a.ok("list", "--all")["items"]} == {"chain", "second"}


def test_the_same_revisions_delivered_twice_are_merged_once(liar_pair: tuple[Cli, Cli]) -> None:
    """SY-1 idempotence: a bundle carrying every chunk twice is refused whole by the merge
    (sync_invalid, nothing merged: engine/sync/merge.py treats it as malformed); the true
    bundle delivered in two syncs adds the four revisions once, and nothing is duplicated."""
    a, b = liar_pair
    assert _lie(a, b, "duplicate")["code"] == "sync_invalid"
    with Liar(b, "honest") as liar:
        first = sync(a, liar.url, "msync1.any")
    assert [v["revisions_added"] for v in first["vaults"]] == [4]
    with Liar(b, "honest") as liar:
        again = sync(a, liar.url, "msync1.any")
    assert [v["revisions_added"] for v in again["vaults"]] in ([0], [])
    chain = next(row for row in a.ok("list", "--all")["items"] if row["title"] == "chain")
    assert len(a.ok("history", chain["id"])["revisions"]) == 3
    assert a.ok("status")["assets"] == 2


# -- the listener's door: tokens and addresses ---------------------------------------------------------


def test_wrong_absent_and_revoked_tokens_are_refused(pair: tuple[Cli, Cli]) -> None:
    """API-4: a wrong, absent or revoked token, or one bound to another device, is
    sync_unauthorized and nothing is exchanged; the token is shown once and never listed."""
    a, b = pair
    b.put("only on B", "b")
    token = token_for(a, b)
    listed = a.ok("sync", "token", "list")["tokens"]
    assert len(listed) == 1 and token not in json.dumps(listed) and listed[0]["device_id"] == device_id(b)
    # The token names its device by the fingerprint `memories devices` and `whoami` show.
    shown = b.ok("whoami")["device_fingerprint"]
    assert listed[0]["fingerprint"] == shown
    assert " ".join(shown[i : i + 4] for i in range(0, 16, 4)) in a.run("sync", "token", "list").stdout
    with Listener(a, free_port()).start() as listener:
        for wrong in (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "msync1.", "Bearer x"):
            assert sync_err(b, listener.url, wrong)["code"] == "sync_unauthorized"
        assert sync_err(b, listener.url, None)["code"] == "sync_unauthorized"  # no token at all
        assert a.ok("status")["assets"] == 0
        a.sudo()
        a.ok("sync", "token", "revoke", listed[0]["token_id"])
        assert sync_err(b, listener.url, token)["code"] == "sync_unauthorized"
        assert a.ok("status")["assets"] == 0
        # A fresh token works; revoking B's device revokes it too (checked at each connection).
        fresh = token_for(a, b)
        assert sync(b, listener.url, fresh)["synced"] is True
        a.sudo()
        a.ok("device", "revoke", "laptop")
        assert sync_err(b, listener.url, fresh)["code"] == "sync_unauthorized"
        assert a.ok("sync", "token", "list")["tokens"][-1]["device_authorized"] is False


def test_non_loopback_listener_needs_the_flag_and_tls(pair: tuple[Cli, Cli]) -> None:
    """API-4: binding another address is refused without --allow-non-loopback, and then without TLS."""
    a, _ = pair
    refused = a.err("serve", "--listen", "0.0.0.0:0")
    assert refused["code"] == "invalid_input" and "--allow-non-loopback" in refused["message"]
    refused = a.err("serve", "--listen", "0.0.0.0:0", "--allow-non-loopback")
    assert refused["code"] == "invalid_input" and "--tls-cert" in refused["message"]
    assert a.ok("sync", "status")["serving"] is False


# -- policy lies and the token's device binding over the network ---------------------------------------


def _policy(cli: Cli) -> list[tuple[str, int, int]]:
    """(vault, epoch, members) of every vault: what a policy lie must not move."""
    return sorted((v["name"], v["epoch"], v["members"]) for v in cli.ok("vaults")["vaults"])


def test_a_forged_owner_signature_on_a_policy_is_refused(pair: tuple[Cli, Cli]) -> None:
    """SY-1/PO-1 over the network: the liar's new policy (a rotation) carries a flipped Owner
    signature: sync_rejected, nothing merged (no policy, no note), A's policy as before; the true
    bundle afterwards brings the rotation."""
    a, b = pair
    b.sudo(B_PASSWORD)
    b.ok("vault", "rotate")
    b.put("written after the rotation", "rotated body")
    b.stop()
    policy = _policy(a)
    error = _lie(a, b, "forgepolicy")
    assert error["code"] == "sync_rejected" and "policy" in error["message"], error
    assert _policy(a) == policy
    with Liar(b, "honest") as liar:
        result = sync(a, liar.url, "msync1.any")
    assert [v["policies_added"] for v in result["vaults"]] == [1]
    assert [epoch for _, epoch, _ in _policy(a)] == [epoch + 1 for _, epoch, _ in policy]


def test_a_replayed_old_policy_cannot_roll_the_policy_back(pair: tuple[Cli, Cli]) -> None:
    """SY-1 rollback over the network: A rotated after B stopped; the liar replays its whole older
    history from the genesis. No policy is added, A's head and epoch stay, and A's next write is
    still sealed under the new epoch (a replayed prefix is a no-op by design, docs/sync.md: an
    honest peer that received part of a newer history from a third device sends such a prefix)."""
    a, b = pair
    b.put("from B", "b")
    b.stop()
    a.sudo()
    a.ok("vault", "rotate")
    policy = _policy(a)
    with Liar(b, "rollback") as liar:
        result = sync(a, liar.url, "msync1.any")
    assert [v["policies_added"] for v in result["vaults"]] == [0]
    assert _policy(a) == policy
    a.put("after the replay", "a")
    assert a.ok("vaults")["vaults"][0]["epoch"] == policy[0][1]


def test_a_forked_policy_without_the_owners_resolution_is_refused(pair: tuple[Cli, Cli]) -> None:
    """SY-3 over the network: A and B each signed a different next policy; the liar sends its
    branch with no resolution: policy_fork, nothing of the bundle merged (B's note stays away),
    A's policy as before, and the fork is kept for `memories vault fork resolve`."""
    a, b = pair
    b.sudo(B_PASSWORD)
    b.ok("vault", "rotate")
    b.put("on B's branch", "b")
    b.stop()
    a.sudo()
    a.ok("vault", "member", "add", "ab" * 32, "--role", "reader")
    policy = _policy(a)
    error = _lie(a, b, "honest")
    assert error["code"] == "policy_fork", error
    assert _policy(a) == policy
    assert a.ok("status")["assets"] == 0
    assert len(a.ok("vault", "forks")["forks"]) == 1


def test_a_valid_token_used_by_another_devices_key_is_refused(pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """API-4: a token bound to B, presented by C (another authorized device of the same user,
    proving its own key in the handshake), is sync_unauthorized and nothing is exchanged;
    B with the same token syncs."""
    a, b = pair
    c = Cli(home=tmp_path / "c", env=dict(LIMITED))
    try:
        add_device(a, c, "third", C_PASSWORD)
        c.put("only on C", "c")
        b.put("only on B", "b")
        token = token_for(a, b)
        with Listener(a, free_port()).start() as listener:
            error = sync_err(c, listener.url, token)
            assert error["code"] == "sync_unauthorized", error
            assert a.ok("status")["assets"] == 0 and c.ok("status")["assets"] == 1
            assert sync(b, listener.url, token)["synced"] is True
            assert {row["title"] for row in a.ok("list", "--all")["items"]} == {"only on B"}
    finally:
        c.stop()
