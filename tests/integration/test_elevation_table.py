"""Exactly which operations need `memories sudo` (SPEC RN-1, CD-8, ID-3 …; issue 27).

One table, checked twice: against the registry (an op that gains or loses its
``needs_elevation`` flag fails here, so removing the flag from ``device_revoke`` is noticed)
and over the real socket of a real, unlocked but not elevated engine, where every op in the
table answers ``elevation_required`` to a well-formed request (so a flag the gate no longer
honours, or an in-handler check that was removed, is noticed too).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.service import handlers  # noqa: F401  (registers every op, as the daemon does)
from engine.service.registry import OPS
from tests.helpers import Cli, raw_error

USER = "0" * 64

# op -> a request that decodes (the gate runs after decoding); values name nothing that exists.
ELEVATED: dict[str, dict[str, Any]] = {
    "audit": {},
    "center_tickets": {},
    "backup_create": {"path": "/nonexistent/backup.mbak", "password": "x"},
    "cloud_login_begin": {"kind": "onedrive", "name": "a", "client_id": "x", "redirect_uri": "http://127.0.0.1:9/cb"},
    "cloud_remove": {"name": "a"},
    "credential_copy": {"ref": "some_label"},
    "credential_generate": {"kind": "ssh", "name": "key"},
    "device_request_show": {"request": "not-a-request"},
    "device_revoke": {"device": "nothing"},
    "export": {},
    "export_memories_json": {},
    "invite_new": {"owner": "ab" * 32},
    "job_run": {"digest": "0" * 64},
    "login_secret": {"id": "abcdef12", "what": "password"},
    "mcp_grant": {"name": "agent", "scope": "read"},
    "mcp_grants": {},
    "mcp_revoke": {"name": "agent"},
    "notebook_delete": {"name": "agent"},
    "quarantine_discard": {"id": "abcdef12"},
    "quarantine_reapply": {"id": "abcdef12"},
    "remote_approve": {"ticket": "0" * 16},
    "run_bound_prepare": {},
    "sync_token_new": {"device": "nothing"},
    "sync_token_revoke": {"token_id": "abcd"},
    "vault_fork_resolve": {"keep": "abcdef12"},
    "vault_member_add": {"user": USER, "role": "reader"},
    "vault_member_remove": {"user": USER},
    "vault_member_role": {"user": USER, "role": "reader"},
    "vault_rotate": {},
    "vault_transfer": {"user": USER},
}
# Lock-free ops that check elevation inside the handler (before any network or write).
# cloud_login_finish checks it too, but only after redeeming a one-time ticket that only the
# elevated cloud_login_begin can create, so a bare request is refused before that point.
ELEVATED_IN_HANDLER: dict[str, dict[str, Any]] = {
    "center_ticket_apply": {"ticket": "mct1.x.y"},
    "device_approve": {"request": "not-a-request"},  # lock-free: a device ticket is asked at the Center first
    "cloud_add": {
        "kind": "s3",
        "name": "a",
        "endpoint": "http://127.0.0.1:9",
        "bucket": "bucket",
        "access_key_id": "a",
        "secret_access_key": "b",
    },
}


def test_the_registry_flags_exactly_the_table() -> None:
    flagged = {name for name, spec in OPS.items() if spec.needs_elevation}
    assert flagged == set(ELEVATED)
    # The gate is skipped for lock-free ops: those check elevation themselves (the table below).
    assert not {name for name in flagged if OPS[name].lock_free}
    assert {name for name in ELEVATED_IN_HANDLER if OPS[name].lock_free} == set(ELEVATED_IN_HANDLER)


@pytest.mark.parametrize("op", sorted([*ELEVATED, *ELEVATED_IN_HANDLER]))
def test_each_elevated_op_is_refused_without_sudo(module_unlocked: Cli, op: str) -> None:
    body = {**ELEVATED.get(op, ELEVATED_IN_HANDLER.get(op, {})), "op": op}
    assert raw_error(module_unlocked, body).code == "elevation_required", op


def test_device_approve_needs_sudo_with_a_real_request(vault: Cli, tmp_path: Path) -> None:
    """ID-3: a genuine join request, `device approve --yes` without sudo: refused, the policy
    unchanged; after `memories sudo` the same command approves it."""
    # A vault of its own (`vault`, not the module's): the sudo below must not reach the table's.
    new = Cli(home=tmp_path / "new")
    approver = vault.ok("whoami")["device_id"]
    try:
        request = new.ok(
            "device", "request", "--approver", approver, "--name", "laptop", "--password-stdin", input="new device pw 42\n"
        )
    finally:
        new.stop()  # the request started the new device's engine: not left running after the test
    devices = len(vault.ok("devices")["devices"])
    assert vault.err("device", "approve", request["request"], "--yes")["code"] == "elevation_required"
    assert len(vault.ok("devices")["devices"]) == devices
    vault.sudo()
    approval = vault.ok("device", "approve", request["request"], "--yes")
    assert approval["fingerprint"] == request["fingerprint"]


@pytest.fixture(scope="module")
def module_unlocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    """Unlocked, never elevated."""
    cli = Cli(home=tmp_path_factory.mktemp("elevation") / "home")
    cli.init()
    yield cli
    cli.stop()
