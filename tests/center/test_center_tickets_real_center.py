"""CT-1 against a real Center process: tickets its operator issues (`center admin grant new`)
become local grants on an engine in tickets mode, and its `grant revoke` reaches the engine on
the grant's next call; a device ticket from the Center approves a joining device."""

from __future__ import annotations

from pathlib import Path

from engine.crypto.keys import fingerprint
from tests.center.center_process import running
from tests.center.support_daemon import apply, call, call_error, engine_with
from tests.helpers import Cli


def test_ct1_center_issued_tickets_and_revocation(tmp_path: Path) -> None:
    with running(tmp_path / "center") as center:
        engines = [engine_with(tmp_path / name, center.config("tickets")) for name in ("a", "b", "c")]
        try:
            for i, (cli, scope) in enumerate(zip(engines, ("read", "read_write", "read_write_delete"), strict=True)):
                issued = center.grant(f"agent-{i}", scope, "default")
                granted = apply(cli, issued["ticket"], f"agent-{i}")
                assert (granted["scope"], granted["vaults"], granted["ticket_id"]) == (scope, ["default"], issued["ticket_id"])
                call(cli, granted["token"], op="list")
                # The same ticket twice on one device: replayed.
                assert cli.err("center", "ticket", "apply", issued["ticket"], "--name", "again")["code"] == "ticket_replayed"
            listed = engines[0].ok("center", "ticket", "list")
            assert [g["name"] for g in listed["grants"]] == ["agent-0"]
            assert listed["centers"][0]["url"] == center.url
        finally:
            for cli in engines:
                cli.stop()


def test_ct1_revoked_at_the_center_refused_on_next_call(tmp_path: Path) -> None:
    with running(tmp_path / "center") as center:
        cli = engine_with(tmp_path / "engine", center.config("tickets"))
        try:
            granted = apply(cli, center.grant("agent", "read_write", "default")["ticket"], "agent")
            call(cli, granted["token"], op="put", title="before")
            center.revoke("agent")
            assert call_error(cli, granted["token"], op="list").code == "ticket_revoked"
            assert cli.err("mcp", "grant", "--name", "local", "--scope", "read")["code"] == "center_managed"
        finally:
            cli.stop()


def test_ct1_a_center_device_ticket_approves_a_device(tmp_path: Path) -> None:
    """CT-1: a Center device ticket approves the device it names; one the Center revoked
    before it was used is refused at approval (the Center is asked then), changing nothing."""
    with running(tmp_path / "center") as center:
        approver = engine_with(tmp_path / "approver", center.config("tickets"))
        new = Cli(home=tmp_path / "new")
        try:
            device_id = approver.ok("whoami")["device_id"]
            request = new.ok("device", "request", "--approver", device_id, "--password-stdin", input="pw 12345\n")
            joining = fingerprint(bytes.fromhex(request["device_id"]))
            withdrawn = center.grant("stolen", "read", "default", device=joining)["ticket"]
            center.revoke("stolen")
            devices_before = approver.ok("devices")
            error = approver.err("device", "approve", request["request"], "--yes", "--ticket", withdrawn)
            assert error["code"] == "ticket_revoked", error
            assert approver.ok("devices") == devices_before
            ticket = center.grant("laptop", "read", "default", device=joining)["ticket"]
            approval = approver.ok("device", "approve", request["request"], "--yes", "--ticket", ticket)
            new.ok("device", "join", approval["approval"], "--password-stdin", input="pw 12345\n")
            assert new.ok("whoami")["device_id"] == request["device_id"]
        finally:
            new.stop()
            approver.stop()
