"""CT-1 tickets mode on real engines: three daemon processes pin a Center's key in
`[[centers]]` and take their MCP grants (and device approvals) only from its signed tickets.

The Center here is a real loopback HTTP server speaking the protocol's ticket routes
(tests/center/ticket_center.py) with tickets issued by the real codec under a real key.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from engine.center.tickets import TICKET_DOMAIN
from engine.crypto.canonical import b64e, canonical_bytes
from engine.crypto.keys import fingerprint
from tests.center.support_daemon import apply, call, call_error, engine_with, grant_names
from tests.center.ticket_center import TicketCenter, running_center, ticket_id_of
from tests.helpers import Cli

SCOPE_CASES = {
    # scope: (an op it allows, an op it does not)
    "read": ({"op": "list"}, {"op": "put", "title": "no"}),
    "write": ({"op": "put", "title": "w"}, {"op": "list"}),
    "read_write": ({"op": "list"}, {"op": "delete", "id": "0" * 32}),
    "read_write_delete": ({"op": "put", "title": "rwd"}, {"op": "rag_index"}),
    "allow_all": ({"op": "rag_status"}, {"op": "mcp_grants"}),
}


@pytest.fixture(scope="module")
def center() -> Iterator[TicketCenter]:
    with running_center() as c:
        yield c


@pytest.fixture(scope="module")
def engines(center: TicketCenter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Cli]]:
    root = tmp_path_factory.mktemp("ct1")
    clis: list[Cli] = []
    try:
        for name in ("a", "b", "c"):
            clis.append(engine_with(root / name, center.config()))
        clis[0].ok("vault", "new", "team")
        yield clis
    finally:
        for cli in clis:
            cli.stop()


def test_ct1_local_grant_creation_is_refused_naming_the_center(engines: list[Cli], center: TicketCenter) -> None:
    for cli in engines:
        before = grant_names(cli)
        error = cli.err("mcp", "grant", "--name", "local", "--scope", "read")
        assert error["code"] == "center_managed"
        assert center.url in error["message"]
        assert grant_names(cli) == before
    # agent connect makes its grant through the same op: refused the same way.
    error = engines[0].err("agent", "connect", "codex", "--scope", "read")
    assert error["code"] == "center_managed", error


@pytest.mark.parametrize("scope", sorted(SCOPE_CASES))
def test_ct1_tickets_of_each_scope(engines: list[Cli], center: TicketCenter, scope: str) -> None:
    cli = engines[sorted(SCOPE_CASES).index(scope) % 3]
    name = f"s-{scope.replace('_', '-')}"
    granted = apply(cli, center.ticket(scope, name=name), name)
    assert (granted["scope"], granted["vaults"], granted["center"]) == (scope, ["default"], center.url)
    allowed, denied = SCOPE_CASES[scope]
    call(cli, granted["token"], **allowed)
    error = call_error(cli, granted["token"], **denied)
    assert error.code in ("scope_denied", "permission_denied"), error
    assert name in grant_names(cli)


def _forged_bodies(center: TicketCenter) -> dict[str, str]:
    other = SigningKey.generate()
    good = center.ticket("read", name="forged")
    prefix, body, signature = good.split(".")
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    altered = json.loads(raw)
    altered["scope"] = "allow_all"
    altered_text = f"{prefix}.{b64e(canonical_bytes(altered))}.{signature}"
    # Names the pinned Center but is signed by another key.
    resigned = f"{prefix}.{body}.{b64e(other.sign(TICKET_DOMAIN + raw).signature)}"
    return {
        "other key": center.ticket("read", name="forged", key=other),
        "altered body": altered_text,
        "resigned by another key": resigned,
        "truncated": good[:-5],
        "not a ticket": "mct1.not-base64!.x",
    }


def test_ct1_forged_tickets_are_refused_and_change_nothing(engines: list[Cli], center: TicketCenter) -> None:
    cli = engines[1]
    before = grant_names(cli)
    for what, text in _forged_bodies(center).items():
        error = cli.err("center", "ticket", "apply", text, "--name", "forged")
        assert error["code"] == "ticket_invalid", what
        assert text not in error["message"]
    assert grant_names(cli) == before


def test_ct1_an_expired_ticket_is_refused_and_a_grant_stops_at_its_expiry(engines: list[Cli], center: TicketCenter) -> None:
    cli = engines[2]
    past = int(time.time() * 1000) - 1000
    error = cli.err("center", "ticket", "apply", center.ticket("read", expires_ms=past), "--name", "late")
    assert error["code"] == "ticket_expired"
    assert "late" not in grant_names(cli)
    # A grant lives as long as its ticket: refused once the expiry has passed.
    expiry = int(time.time() * 1000) + 15_000
    granted = apply(cli, center.ticket("read", expires_ms=expiry), "short")
    call(cli, granted["token"], op="list")
    while time.time() * 1000 < expiry:
        time.sleep(0.2)
    assert call_error(cli, granted["token"], op="list").code == "ticket_expired"


def test_ct1_a_replayed_ticket_is_refused_even_after_a_lock(engines: list[Cli], center: TicketCenter) -> None:
    cli = engines[0]
    ticket = center.ticket("read", name="once")
    apply(cli, ticket, "once")
    assert cli.err("center", "ticket", "apply", ticket, "--name", "twice")["code"] == "ticket_replayed"
    cli.ok("lock")  # the engine re-executes: what it remembers is in the store, not in memory
    cli.unlock()
    cli.sudo()
    assert cli.err("center", "ticket", "apply", ticket, "--name", "thrice")["code"] == "ticket_replayed"
    assert "twice" not in grant_names(cli) and "thrice" not in grant_names(cli)


def test_ct1_a_ticket_bound_to_a_device_is_refused_on_another(engines: list[Cli], center: TicketCenter) -> None:
    a, b = engines[0], engines[1]
    device_a = fingerprint(bytes.fromhex(a.ok("whoami")["device_id"]))
    ticket = center.ticket("read", device=device_a, name="bound")
    assert b.err("center", "ticket", "apply", ticket, "--name", "bound")["code"] == "ticket_invalid"
    apply(a, ticket, "bound")


def test_ct1_a_revoked_grant_is_refused_on_its_next_call(engines: list[Cli], center: TicketCenter) -> None:
    cli = engines[1]
    ticket = center.ticket("read_write", name="rev")
    granted = apply(cli, ticket, "rev")
    call(cli, granted["token"], op="put", title="before revocation")
    asked = len(center.asked)
    center.revoke(ticket)
    error = call_error(cli, granted["token"], op="list")
    assert error.code == "ticket_revoked"
    assert center.asked[asked:] == [ticket_id_of(ticket)]  # the Center was asked, not a cache
    # A ticket revoked before it is applied makes no grant.
    early = center.ticket("read", name="early")
    center.revoke(early)
    assert cli.err("center", "ticket", "apply", early, "--name", "early")["code"] == "ticket_revoked"
    assert "early" not in grant_names(cli)


def test_ct1_out_of_scope_vaults_are_refused(engines: list[Cli], center: TicketCenter) -> None:
    cli = engines[0]
    outside = cli.put("in the default vault", "not for the team agent")["id"]
    granted = apply(cli, center.ticket("read_write", ("team",), name="team-only"), "team-only")
    assert granted["vaults"] == ["team"]
    written = call(cli, granted["token"], op="put", title="team note", vault="team")
    assert call(cli, granted["token"], op="get", id=written["id"], vault="team")["title"] == "team note"
    assert call_error(cli, granted["token"], op="put", title="x", vault="default").code == "scope_denied"
    assert call_error(cli, granted["token"], op="get", id=outside, vault="team").code == "scope_denied"
    # An op on one item acts in that item's vault (not the default one the grant lacks).
    assert call(cli, granted["token"], op="history", id=written["id"])["revisions"]
    assert call_error(cli, granted["token"], op="history", id=outside).code == "scope_denied"
    assert call_error(cli, granted["token"], op="history", id="f" * 32).code == "not_found"
    # A ticket naming a vault this device does not hold makes no grant (and is not used up).
    missing = center.ticket("read", ("nowhere",), name="nowhere")
    assert cli.err("center", "ticket", "apply", missing, "--name", "nowhere")["code"] == "invalid_input"
    assert "nowhere" not in grant_names(cli)


def test_ct1_device_approval_needs_a_device_ticket(engines: list[Cli], center: TicketCenter, tmp_path: Path) -> None:
    approver = engines[2]
    approver.sudo()
    new = Cli(home=tmp_path / "new")
    try:
        device_id = approver.ok("whoami")["device_id"]
        request = new.ok("device", "request", "--approver", device_id, "--name", "laptop", "--password-stdin", input="pw 12345\n")
        error = approver.err("device", "approve", request["request"], "--yes")
        assert error["code"] == "center_managed" and center.url in error["message"]
        joining = bytes.fromhex(request["device_id"])
        other = center.ticket("read", kind="device", device="ab" * 32, name="laptop")
        assert approver.err("device", "approve", request["request"], "--yes", "--ticket", other)["code"] == "ticket_invalid"
        grant_ticket = center.ticket("read", name="laptop")
        error = approver.err("device", "approve", request["request"], "--yes", "--ticket", grant_ticket)
        assert error["code"] == "ticket_invalid"
        ticket = center.ticket("read", kind="device", device=fingerprint(joining), name="laptop")
        approval = approver.ok("device", "approve", request["request"], "--yes", "--ticket", ticket)
        assert approval["fingerprint"] == request["fingerprint"]
        new.ok("device", "join", approval["approval"], "--password-stdin", input="pw 12345\n")
    finally:
        new.stop()


def test_ct1_an_unreachable_center_refuses_calls_fail_closed(tmp_path: Path) -> None:
    center = TicketCenter()
    center.start()
    cli = engine_with(tmp_path / "home", center.config())
    try:
        granted = apply(cli, center.ticket("read"), "agent")
        call(cli, granted["token"], op="list")
        center.stop()
        assert call_error(cli, granted["token"], op="list").code == "center_unavailable"
        assert cli.err("center", "ticket", "apply", center.ticket("read"), "--name", "down")["code"] == "center_unavailable"
        center.start()
        call(cli, granted["token"], op="list")
    finally:
        center.stop()
        cli.stop()


def test_ct1_ct4_an_older_generation_is_refused(tmp_path: Path) -> None:
    with running_center() as center:
        cli = engine_with(tmp_path / "home", center.config())
        try:
            old = apply(cli, center.ticket("read", name="old"), "old")
            pending = center.ticket("read", name="pending")  # issued at generation 1, not applied yet
            center.generation = 2  # a standby was promoted
            assert call_error(cli, old["token"], op="list").code == "stale_generation"
            assert cli.err("center", "ticket", "apply", pending, "--name", "pending")["code"] == "stale_generation"
            new = apply(cli, center.ticket("read", name="new"), "new")
            call(cli, new["token"], op="list")
            # The device remembers the newest generation it has seen: even a Center that
            # answered as generation 1 again (the old primary) cannot bring a gen-1 ticket back.
            center.generation = 1
            assert cli.err("center", "ticket", "apply", center.ticket("read", name="x"), "--name", "x")["code"] == (
                "stale_generation"
            )
            assert call_error(cli, old["token"], op="list").code == "stale_generation"
            call(cli, new["token"], op="list")
        finally:
            cli.stop()
