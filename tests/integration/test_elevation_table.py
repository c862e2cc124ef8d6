"""Which operations need `memories sudo` (SPEC API-3; issue 27).

One table pins every operation that needs elevation. Each is sent to a real, unlocked but
not elevated daemon over its real socket (with a well-formed request, so only the elevation
check can refuse it) and must answer ``elevation_required``; the registry's own list must equal
the table, so an operation that loses (or gains) its ``needs_elevation`` fails here. `device
approve` is also tried the way a user runs it, with a real pending join request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.registry import OPS
from tests.helpers import PASSWORD, Cli, raw_error

USER = "ab" * 32  # another user's ID
# op -> a well-formed request body (its values need not name anything that exists).
NEEDS_SUDO: dict[str, dict[str, Any]] = {
    "audit": {},
    "backup_create": {"path": "/nonexistent/x.backup", "password": "x"},
    "cloud_login_begin": {"kind": "onedrive", "name": "x", "client_id": "x", "redirect_uri": "x"},
    "cloud_remove": {"name": "x"},
    "credential_copy": {"ref": "x"},
    "credential_generate": {"kind": "ssh", "name": "x"},
    "device_approve": {"request": "x"},
    "device_request_show": {"request": "x"},
    "device_revoke": {"device": "x"},
    "export": {},
    "export_memories_json": {},
    "job_run": {"digest": "ab" * 32},
    "login_secret": {"id": "x", "what": "password"},
    "mcp_grant": {"name": "x", "scope": "read"},
    "mcp_grants": {},
    "mcp_revoke": {"name": "x"},
    "quarantine_discard": {"id": "x"},
    "quarantine_reapply": {"id": "x"},
    "remote_approve": {"ticket": "abcdef12"},
    "run_bound_prepare": {},
    "sync_token_new": {"device": "x"},
    "sync_token_revoke": {"token_id": "abcd"},
    "vault_fork_resolve": {"keep": "x"},
    "vault_member_add": {"user": USER, "role": "reader"},
    "vault_member_remove": {"user": USER},
    "vault_member_role": {"user": USER, "role": "reader"},
    "vault_rotate": {},
    "vault_transfer": {"user": USER},
}


def test_the_registry_elevates_exactly_the_table() -> None:
    elevated = {tag for tag, spec in OPS.items() if spec.needs_elevation}
    assert sorted(elevated - NEEDS_SUDO.keys()) == [], "newly elevated: add them to the table"
    assert sorted(NEEDS_SUDO.keys() - elevated) == [], "no longer elevated: a dangerous operation lost its sudo"


@pytest.fixture(scope="module")
def unelevated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cli = Cli(home=tmp_path_factory.mktemp("elevation") / "home")
    cli.init()
    cli.stop()
    cli.unlock()  # a fresh engine: the elevation init left behind is gone
    yield cli
    cli.stop()


@pytest.mark.parametrize("op", sorted(NEEDS_SUDO))
def test_each_elevated_operation_is_refused_without_sudo(unelevated: Cli, op: str) -> None:
    """API-3: refused before the operation runs (its bogus arguments are never looked at)."""
    err = raw_error(unelevated, {"op": op, **NEEDS_SUDO[op]})
    assert err.code == "elevation_required", (op, err.code, err.message)


def test_device_approve_needs_sudo(tmp_path: Path) -> None:
    """API-3, ID-5: a real pending join request is not approved without sudo (B cannot join); after
    `memories sudo` the same request is approved and B joins."""
    a, b = Cli(home=tmp_path / "a"), Cli(home=tmp_path / "b")
    try:
        a.init()
        a.stop()
        a.unlock()
        approver = str(a.ok("whoami")["device_id"])
        request = b.ok("device", "request", "--approver", approver, "--name", "laptop", "--password-stdin", input="b pw 12345\n")
        refused = a.err("device", "approve", request["request"], "--yes")
        assert refused["code"] == "elevation_required", refused
        assert [d["device_id"] for d in a.ok("devices")["devices"]] == [approver]
        a.sudo(PASSWORD)
        approval = a.ok("device", "approve", request["request"], "--yes")
        b.ok("device", "join", approval["approval"], "--password-stdin", input="b pw 12345\n")
        assert len(a.ok("devices")["devices"]) == 2
    finally:
        a.stop()
        b.stop()
