"""Sharing a vault with another person over real daemons (issue 29; PO-3, ID-6, PO-2, SY-5).

Two users and three devices: Ann (device A, the Owner of vault "family") and Ben (device B,
his first, and device B2, joined to B with the device commands). Ben invites Ann's user
(`memories whoami --invite --owner FINGERPRINT`), Ann adds the invitation with a role, and
Ben's devices receive the vault on their next sync: B from A's listener, B2 from B's. Every
step is a real CLI process against each home's own daemon.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Cli
from tests.sync.support import (
    C_PASSWORD,
    Listener,
    add_device,
    free_port,
    sync,
    sync_err,
    token_for,
)
from tests.sync.test_relay import _relay_sync, _start_relay

BEN_PASSWORD = "ben's own vault password 3"


def _vaults(cli: Cli) -> dict[str, dict[str, object]]:
    return {str(v["name"]): v for v in cli.ok("vaults")["vaults"]}


def _titles(cli: Cli, vault: str) -> set[str]:
    return {str(row["title"]) for row in cli.ok("list", "--vault", vault)["items"]}


def _invite(ben: Cli, ann: Cli, password: str = BEN_PASSWORD) -> dict[str, object]:
    owner_fp = str(ann.ok("whoami")["user_fingerprint"])
    ben.sudo(password)
    return ben.ok("whoami", "--invite", "--owner", owner_fp)


@pytest.fixture
def people(tmp_path: Path) -> Iterator[tuple[Cli, Cli, Cli]]:
    ann = Cli(home=tmp_path / "ann")
    ben = Cli(home=tmp_path / "ben")
    ben2 = Cli(home=tmp_path / "ben2")
    ann.init()
    ben.init(BEN_PASSWORD)
    add_device(ben, ben2, "ben-laptop", C_PASSWORD, approver_password=BEN_PASSWORD)
    ann.ok("vault", "new", "family")
    ann.ok("put", "--title", "shared recipe", "--body", "flour and water", "--vault", "family")
    ann.put("ann's private note", "not for ben")
    ben.put("ben's private note", "not for ann")
    yield ann, ben, ben2
    for cli in (ann, ben, ben2):
        cli.stop()


def test_invite_add_sync_both_ways_and_other_vaults_stay_private(people: tuple[Cli, Cli, Cli]) -> None:
    """PO-3, ID-6, SY-5: the invitation names Ben's user and both devices with full fingerprints;
    the Owner sees the same full fingerprints; Ben's devices receive the vault on their next
    sync (B from A, B2 from B), edits flow both ways, and neither sees the other's other vaults."""
    ann, ben, ben2 = people
    invite = _invite(ben, ann)
    ben_who, ben2_who = ben.ok("whoami"), ben2.ok("whoami")
    assert invite["user_fingerprint"] == ben_who["user_fingerprint"] and len(str(invite["user_fingerprint"])) == 64
    assert {d["fingerprint"] for d in invite["devices"]} == {  # type: ignore[attr-defined]
        ben_who["device_fingerprint"],
        ben2_who["device_fingerprint"],
    }
    assert invite["owner_fingerprint"] == ann.ok("whoami")["user_fingerprint"]

    ann.sudo()
    checked = ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "editor", "--vault", "family", "--yes")
    assert checked["user_fingerprint"] == ben_who["user_fingerprint"]
    assert {d["fingerprint"] for d in checked["devices"]} == {ben_who["device_fingerprint"], ben2_who["device_fingerprint"]}
    assert checked["devices_added"] == 2
    members = {m["user"]: m for m in ann.ok("vault", "members", "--vault", "family")["members"]}
    assert members[ben_who["user_id"]]["role"] == "editor" and members[ben_who["user_id"]]["devices"] == 2

    token = token_for(ann, ben)
    with Listener(ann, free_port()).start() as listener:
        first = sync(ben, listener.url, token)
        assert first["synced"] is True
        assert "family" in _vaults(ben)
        assert _titles(ben, "family") == {"shared recipe"}
        assert _vaults(ben)["family"]["role"] == "editor"
        ben.ok("put", "--title", "ben's addition", "--body", "salt", "--vault", "family")
        sync(ben, listener.url, token)
    assert _titles(ann, "family") == {"shared recipe", "ben's addition"}
    # Each side's other vaults stay invisible to the other (only vaults authorizing the peer travel).
    assert "ben's private note" not in {str(r["title"]) for r in ann.ok("list", "--all")["items"]}
    assert "ann's private note" not in {str(r["title"]) for r in ben.ok("list", "--all")["items"]}
    assert len(_vaults(ann)) == 2 and len(_vaults(ben)) == 2

    # SY-5: Ben's second device receives the vault from Ben's first device.
    token2 = token_for(ben, ben2, BEN_PASSWORD)
    with Listener(ben, free_port()).start() as listener:
        sync(ben2, listener.url, token2)
    assert _titles(ben2, "family") == {"shared recipe", "ben's addition"}
    assert "ben's private note" in {str(r["title"]) for r in ben2.ok("list", "--all")["items"]}


def test_roles_hold_on_every_device_and_removal_rotates(people: tuple[Cli, Cli, Cli]) -> None:
    """PO-2, PO-3: an Editor cannot change membership; a Reader cannot write (refused at the
    device, and the Owner's device would quarantine such writes); removing the member starts a new
    epoch whose key never reaches their devices, so what is written afterwards stays unreadable
    to them and their sync is refused."""
    ann, ben, _ = people
    invite = _invite(ben, ann)
    ann.sudo()
    ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "editor", "--vault", "family", "--yes")
    ann_user = str(ann.ok("whoami")["user_id"])
    ben_user = str(ben.ok("whoami")["user_id"])
    token = token_for(ann, ben)
    with Listener(ann, free_port()).start() as listener:
        sync(ben, listener.url, token)
        ben.sudo(BEN_PASSWORD)
        assert ben.err("vault", "member", "role", ann_user, "--role", "reader", "--vault", "family")["code"] == "policy_forbidden"
        assert ben.err("vault", "member", "remove", ann_user, "--vault", "family")["code"] in {
            "policy_forbidden",
            "policy_invalid",
        }
        # Made a Reader: Ben's devices may no longer write in the vault.
        ann.sudo()
        ann.ok("vault", "member", "role", ben_user, "--role", "reader", "--vault", "family")
        sync(ben, listener.url, token)
        assert _vaults(ben)["family"]["role"] == "reader"
        assert ben.err("put", "--title", "reader write", "--body", "x", "--vault", "family")["code"] == "read_only"
        epoch_before = int(_vaults(ben)["family"]["epoch"])  # type: ignore[call-overload]
        # Removed: a new epoch; Ben's devices are revoked and get neither the key nor the notes.
        ann.sudo()
        removed = ann.ok("vault", "member", "remove", ben_user, "--vault", "family")
        assert removed["new_epoch"] is True
        ann.ok("put", "--title", "after removal", "--body", "secret plan", "--vault", "family")
        error = sync_err(ben, listener.url, token)
        assert error["code"] in {"sync_unauthorized", "sync_rejected"}
    assert "after removal" not in _titles(ben, "family")
    assert int(_vaults(ben)["family"]["epoch"]) == epoch_before  # type: ignore[call-overload]


def test_ownership_transfer_to_another_person(people: tuple[Cli, Cli, Cli]) -> None:
    """PO-2: the Owner hands the vault to the invited person; after a sync Ben is the only Owner
    on both sides and Ann an Admin, who then may no longer remove him."""
    ann, ben, _ = people
    invite = _invite(ben, ann)
    ann.sudo()
    ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "editor", "--vault", "family", "--yes")
    ben_user = str(ben.ok("whoami")["user_id"])
    ann.ok("vault", "transfer", ben_user, "--vault", "family")
    token = token_for(ann, ben)
    with Listener(ann, free_port()).start() as listener:
        sync(ben, listener.url, token)
    assert _vaults(ben)["family"]["role"] == "owner"
    assert _vaults(ann)["family"]["role"] == "admin"
    # Exactly one Owner, as each device sees it; the new Owner cannot make a second one.
    for cli in (ann, ben):
        roles = [m["role"] for m in cli.ok("vault", "members", "--vault", "family")["members"]]
        assert roles.count("owner") == 1 and sorted(roles) == ["admin", "owner"]
    ben.sudo(BEN_PASSWORD)
    ann_user = str(ann.ok("whoami")["user_id"])
    assert ben.err("vault", "member", "role", ann_user, "--role", "owner", "--vault", "family")["code"] == "policy_invalid"
    ann.sudo()
    assert ann.err("vault", "member", "remove", ben_user, "--vault", "family")["code"] in {"policy_forbidden", "policy_invalid"}


def test_invitation_refusals_are_typed_and_change_nothing(people: tuple[Cli, Cli, Cli]) -> None:
    """ID-6: an invitation pinned to another Owner, a damaged one, and adding without checking
    (no --yes, no terminal) are refused with typed errors; the policy is unchanged."""
    ann, ben, _ = people
    # Pinned to Ben's second device's user (= Ben himself is refused) and to a stranger.
    ben.sudo(BEN_PASSWORD)
    own = ben.err("whoami", "--invite", "--owner", str(ben.ok("whoami")["user_fingerprint"]))
    assert own["code"] == "invalid_input"
    stranger = ben.ok("whoami", "--invite", "--owner", "ab" * 32)
    before = ann.ok("vault", "members", "--vault", "family")
    ann.sudo()
    wrong = ann.err("vault", "member", "add", str(stranger["invite"]), "--role", "reader", "--vault", "family", "--yes")
    assert wrong["code"] == "invite_wrong_owner"
    text = str(_invite(ben, ann)["invite"])
    damaged = text[:-6] + ("A" if text[-6] != "A" else "B") + text[-5:]
    assert ann.err("vault", "member", "add", damaged, "--role", "reader", "--vault", "family", "--yes")["code"] == (
        "invite_invalid"
    )
    unconfirmed = ann.run("vault", "member", "add", text, "--role", "reader", "--vault", "family", "--json")
    assert unconfirmed.returncode != 0 and json.loads(unconfirmed.stdout)["error"]["code"] == "confirmation_required"
    assert ann.ok("vault", "members", "--vault", "family") == before


def test_a_vault_of_a_person_no_invitation_pins_is_refused(people: tuple[Cli, Cli, Cli]) -> None:
    """PO-3: Ann adds Ben's invitation, but B2 (which made no invitation and does not hold the
    vault) cannot be handed it by Ann directly: Ann's device is nobody B2 trusts, so the session
    is refused before anything is exchanged."""
    ann, ben, ben2 = people
    invite = _invite(ben, ann)
    ann.sudo()
    ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "reader", "--vault", "family", "--yes")
    token = token_for(ann, ben2)
    with Listener(ann, free_port()).start() as listener:
        assert sync_err(ben2, listener.url, token)["code"] == "sync_unauthorized"
    assert "family" not in _vaults(ben2)


def test_a_vault_made_after_a_device_joined_follows_it(pair: tuple[Cli, Cli]) -> None:
    """SY-5: a vault created on A after B joined is authorized on B from the start and reaches B
    on its next sync, with its notes; the device-only vault stays on A."""
    a, b = pair
    made = a.ok("vault", "new", "later")
    assert made["policy_seq"] == 2  # the genesis, then B's device
    a.ok("put", "--title", "made after the join", "--body", "x", "--vault", "later")
    a.ok("local-config", "record")  # makes the device-only vault "local"
    a.ok("put", "--title", "only here", "--body", "y", "--vault", "local")
    token = token_for(a, b)
    with Listener(a, free_port()).start() as listener:
        sync(b, listener.url, token)
    assert _titles(b, "later") == {"made after the join"}
    assert "only here" not in {str(r["title"]) for r in b.ok("list", "--all")["items"]}
    assert "local" not in _vaults(b) and "later" in _vaults(b)


def test_the_shared_vault_arrives_through_a_relay(people: tuple[Cli, Cli, Cli]) -> None:
    """PO-3, SY-4: the same invitation and add; Ben's device receives the vault through a relay
    room, where neither side holds a token of the other."""
    ann, ben, _ = people
    invite = _invite(ben, ann)
    ann.sudo()
    ann.ok("vault", "member", "add", str(invite["invite"]), "--role", "reader", "--vault", "family", "--yes")
    relay, url = _start_relay(free_port())
    try:
        room = secrets.token_hex(16)
        first, second = _relay_sync(ann, url, room), _relay_sync(ben, url, room)
        outs = [proc.communicate(timeout=120) for proc in (first, second)]
    finally:
        relay.terminate()
        relay.wait(30)
        for stream in (relay.stdout, relay.stderr):
            if stream is not None:
                stream.close()
    assert first.returncode == 0 and second.returncode == 0, outs
    assert _titles(ben, "family") == {"shared recipe"}
    assert _vaults(ben)["family"]["role"] == "reader"
