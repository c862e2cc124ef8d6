"""MCP grants against a real daemon: elevation, storage as a hash, scopes, allowlist, revocation (AG-2)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.service import handlers  # noqa: F401  (registers every op, as the daemon does)
from engine.service.registry import OPS
from tests.helpers import Cli
from tests.mcp.support import grant, ipc


def call(cli: Cli, token: str, inner: dict[str, Any]) -> dict[str, Any]:
    with ipc(cli) as client:
        return client.request({"op": "mcp_call", "token": token, "request": inner})


def call_error(cli: Cli, token: str, inner: dict[str, Any]) -> str:
    with pytest.raises(MemoriesError) as caught:
        call(cli, token, inner)
    return caught.value.code


def test_grant_management_needs_local_elevation(vault: Cli) -> None:
    """AG-2: grants are created, listed and revoked only under `memories sudo`."""
    assert vault.err("mcp", "grant", "--name", "claude", "--scope", "read")["code"] == "elevation_required"
    assert vault.err("mcp", "grants")["code"] == "elevation_required"
    assert vault.err("mcp", "revoke", "claude")["code"] == "elevation_required"
    vault.sudo()
    grant(vault, "claude", "read")
    assert vault.err("mcp", "grant", "--name", "claude", "--scope", "read")["code"] == "grant_exists"
    assert vault.err("mcp", "grant", "--name", "x", "--scope", "read", "--vault", "nope")["code"] == "invalid_input"
    assert vault.err("mcp", "grant", "--name", "Bad Name!", "--scope", "read")["code"] == "invalid_request"
    assert vault.run("mcp", "grant", "--name", "x", "--scope", "everything", "--json").returncode == 2


def test_grant_is_stored_as_hash_with_masked_hint(vault: Cli) -> None:
    """AG-2: the token is shown once, stored only as a digest; list shows hint, created and last used."""
    vault.sudo()
    token = grant(vault, "claude", "read_write")
    assert re.fullmatch(r"mem_[A-Za-z0-9_-]{43}", token)
    listed = vault.ok("mcp", "grants")["grants"]
    assert len(listed) == 1
    item = listed[0]
    assert item["name"] == "claude" and item["scope"] == "read_write" and item["vaults"] == ["default"]
    assert item["hint"] == f"{token[:8]}…{token[-4:]}"
    assert item["created_ms"] > 0 and item["last_used_ms"] is None
    assert "token" not in item

    call(vault, token, {"op": "list"})
    used = vault.ok("mcp", "grants")["grants"][0]["last_used_ms"]
    assert used is not None and used >= item["created_ms"]

    text = vault.run("mcp", "grants").stdout
    assert item["hint"] in text and token not in text

    # Nothing on disk holds the token: the store, its WAL/journal, the logs.
    vault.ok("lock")
    for path in vault.home.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


def test_scope_matrix(vault: Cli) -> None:
    """AG-2: read cannot write or delete; write cannot read or delete; capabilities checked before dispatch."""
    vault.sudo()
    scopes = ("read", "write", "read_write", "read_write_delete", "allow_all")
    tokens = {scope: grant(vault, scope.replace("_", "-"), scope) for scope in scopes}
    allowed = {
        "read": {"read"},
        "write": {"write"},
        "read_write": {"read", "write"},
        "read_write_delete": {"read", "write", "delete"},
        "allow_all": {"read", "write", "delete"},
    }
    owner = ipc(vault)  # the local user, straight over IPC (fast; no CLI process per step)
    for scope, token in tokens.items():
        victim = owner.request({"op": "put", "title": f"victim of {scope}", "body": "body"})["id"]
        before = owner.request({"op": "list"})["total"]
        attempts = {
            "read": {"op": "get", "id": victim},
            "write": {"op": "put", "title": f"by {scope}", "body": "x"},
            "delete": {"op": "delete", "id": victim},
        }
        for capability, inner in attempts.items():
            if capability in allowed[scope]:
                call(vault, token, inner)
            else:
                assert call_error(vault, token, inner) == "scope_denied", (scope, capability)
        after = owner.request({"op": "list"})["total"]
        expected = before + ("write" in allowed[scope]) - ("delete" in allowed[scope])
        assert after == expected, scope  # a refused op changed nothing
    owner.close()


def test_allowlist_refuses_every_other_op_even_for_allow_all(vault: Cli) -> None:
    """AG-2, DT-1, CD-8, PX-4, JB-3: no scope reaches ops off the MCP allowlist."""
    vault.sudo()
    token = grant(vault, "root-ish", "allow_all")
    refused = sorted(name for name, spec in OPS.items() if not spec.mcp_allowed)
    for required in ("desktop_status", "credential_copy", "protect_secret", "mcp_grant", "mcp_call", "mcp_revoke", "lock"):
        assert required in refused
    for name in refused:
        assert call_error(vault, token, {"op": name}) == "permission_denied", name
    assert call_error(vault, token, {"op": "no_such_op"}) == "unknown_op"
    assert call_error(vault, token, {"op": "list", "surprise": 1}) == "unknown_field"
    # Still a working grant after all those refusals.
    assert call(vault, token, {"op": "list"})["result"]["total"] == 0


def test_wrong_and_revoked_tokens(vault: Cli) -> None:
    """AG-2: a wrong token says only `unauthorized`; a revoked grant fails on its next call."""
    vault.sudo()
    token = grant(vault, "claude", "read")
    for wrong in ("mem_" + "A" * 43, token[:-1] + ("A" if token[-1] != "A" else "B"), "not-a-token"):
        with pytest.raises(MemoriesError) as caught:
            call(vault, wrong, {"op": "list"})
        assert caught.value.code == "unauthorized"
        assert wrong not in caught.value.message
    assert call(vault, token, {"op": "list"})["op"] == "list"
    # A server started with a wrong token stops at once with the typed error (nothing served).
    started = Cli(home=vault.home, env={"MEMORIES_MCP_TOKEN": "mem_" + "B" * 43}).err("mcp")
    assert started["code"] == "unauthorized"
    vault.ok("mcp", "revoke", "claude")
    assert call_error(vault, token, {"op": "list"}) == "unauthorized"
    assert vault.ok("mcp", "grants")["grants"] == []
    revoked = vault.ok("mcp", "grants", "--all")["grants"]
    assert revoked[0]["active"] is False and revoked[0]["revoked_ms"] is not None
    # The name is free again; the new grant's token differs and the old one stays dead.
    fresh = grant(vault, "claude", "read")
    assert fresh != token
    assert call_error(vault, token, {"op": "list"}) == "unauthorized"
    assert call(vault, fresh, {"op": "list"})["result"]["total"] == 0


def test_grants_survive_lock_and_unlock(vault: Cli) -> None:
    """AG-2: grants are encrypted records in the store: they work again after lock/unlock."""
    vault.sudo()
    token = grant(vault, "claude", "read")
    vault.ok("lock")
    assert call_error(vault, token, {"op": "list"}) == "locked"
    vault.unlock()
    assert call(vault, token, {"op": "list"})["result"]["total"] == 0
