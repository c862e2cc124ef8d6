"""What agents (the MCP surface) may and may not reach, on a real in-process Service (CD-7, CD-8, AG-2).

The Service, store and registry are the production ones; only the Caller differs, exactly
as the MCP server builds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import engine.service.handlers  # noqa: F401  (registers every op)
from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.registry import OPS
from engine.service.service import Service

LOCAL = Caller(namespace="cli:4242", surface="ipc")
AGENT = Caller(namespace="mcp:grant", surface="mcp")


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    os.environ.setdefault("MEMORIES_KDF_TARGET_MS", "10")
    svc = Service(Paths(tmp_path / "home"), EngineConfig())
    svc.dispatch({"op": "init", "password": "pw-for-tests"}, LOCAL)
    yield svc
    svc.lock_now("test")


def call(svc: Service, caller: Caller, **body: Any) -> dict[str, Any]:
    return svc.dispatch(body, caller)


def code_of(svc: Service, caller: Caller, **body: Any) -> str:
    with pytest.raises(MemoriesError) as caught:
        svc.dispatch(body, caller)
    return caught.value.code


def test_mcp_allowlist_of_card_ops() -> None:
    """AG-2, CD-8: graph/link ops are agent-reachable; secret-bearing ops never are."""
    allowed = {"card_write", "card_read", "card_link", "card_unlink", "graph", "connections", "recall_connected"}
    denied = {"protected_card", "otp_code", "protect_secret", "credential_copy"}
    assert all(OPS[name].mcp_allowed for name in allowed)
    assert not any(OPS[name].mcp_allowed for name in denied)
    assert OPS["credential_copy"].needs_elevation


def test_agents_cannot_protect_copy_or_read_secrets(service: Service) -> None:
    """CD-8: MCP rejects protect_secret and credential_copy, even for an elevated namespace."""
    card = call(service, LOCAL, op="card_write", type="knowledge", title="n", body="key sk-live-123456")
    call(service, LOCAL, op="protect_secret", id=card["id"], label="api", value="sk-live-123456")
    service.session.elevate(AGENT.namespace)
    assert code_of(service, AGENT, op="credential_copy", ref="api") == "permission_denied"
    assert code_of(service, AGENT, op="protect_secret", id=card["id"], label="b", value="n") == "permission_denied"
    assert code_of(service, AGENT, op="otp_code", id=card["id"]) == "permission_denied"
    read = call(service, AGENT, op="card_read", id=card["id"])
    assert "sk-live-123456" not in str(read) and read["secrets"]["api"].startswith("cred:")
    prot = call(service, LOCAL, op="protected_card", title="p", token="tok-agent-1")
    assert call(service, AGENT, op="card_read", id=prot["id"])["protected"]["credential"].startswith("cred:")
    assert code_of(service, AGENT, op="card_write", id=prot["id"], title="renamed") == "permission_denied"


def test_agent_update_of_a_card_with_secret_references_fails(service: Service) -> None:
    """CD-7: MCP card_write omits the map, so updating a card that has one fails validation."""
    card = call(service, LOCAL, op="card_write", type="brain", title="t", body="token abcd-9999")
    plain = call(service, LOCAL, op="card_write", type="brain", title="plain")
    call(service, AGENT, op="card_write", id=plain["id"], body="agents may edit this one")
    call(service, LOCAL, op="protect_secret", id=card["id"], label="tok", value="abcd-9999")
    assert code_of(service, AGENT, op="card_write", id=card["id"], body="x") == "secret_map_mismatch"
    assert code_of(service, AGENT, op="card_write", id=card["id"], body="x", secrets={}) == "secret_map_mismatch"
    head = call(service, LOCAL, op="get", id=card["id"])["revision"]
    assert code_of(service, AGENT, op="edit", id=card["id"], base=head, body="x") == "secret_map_mismatch"
    assert call(service, LOCAL, op="get", id=card["id"])["revision"] == head


def test_copy_is_only_for_the_local_cli_namespace(service: Service) -> None:
    """CD-8: an elevated remote namespace (ws:remote) never receives a secret."""
    call(service, LOCAL, op="protected_card", title="t", token="tok-remote-1")
    remote = Caller(namespace="ws:remote", surface="ipc")
    service.session.elevate(remote.namespace)
    assert code_of(service, remote, op="credential_copy", ref="t") == "permission_denied"


def test_lock_drops_the_link_index(service: Service) -> None:
    """ST-10: the adjacency index (plaintext IDs and relations) is wiped by lock and rebuilt on unlock."""
    from engine.service.handlers.cards import link_index

    a = call(service, LOCAL, op="card_write", type="persona", title="a")["id"]
    b = call(service, LOCAL, op="card_write", type="persona", title="b")["id"]
    call(service, LOCAL, op="card_link", src=a, dst=b, rel="knows")
    assert len(link_index(service)) == 1
    service.dispatch({"op": "lock"}, LOCAL)
    assert len(link_index(service)) == 0
    service.dispatch({"op": "unlock", "password": "pw-for-tests"}, LOCAL)
    assert len(link_index(service)) == 1


def test_local_config_lives_in_a_device_only_vault(service: Service) -> None:
    """CD-9: one device-only vault, marked in sealed local state, holds local_config; export skips it."""
    from engine.cards.device_vaults import device_only_vaults, is_device_only, refuse_if_device_only

    first = call(service, LOCAL, op="local_config", client_version="0.1.0", directories={"home": "/h", "log_dir": "/h/l"})
    second = call(service, LOCAL, op="local_config", client_version="0.2.0", directories={"home": "/h"})
    assert first["created_vault"] is True and second["created_vault"] is False
    assert code_of(service, AGENT, op="local_config_get") == "permission_denied"
    assert code_of(service, LOCAL, op="local_config", client_version="x", directories={"Bad-Key": "/"}) == "invalid_request"
    service.dispatch({"op": "lock"}, LOCAL)
    service.dispatch({"op": "unlock", "password": "pw-for-tests"}, LOCAL)
    got = call(service, LOCAL, op="local_config_get")
    assert got == {"device_only_vaults": 1, "client_version": "0.2.0", "directories": {"home": "/h"}}
    state = service.require_unlocked()
    (local,) = device_only_vaults(state)
    assert is_device_only(state, local) and not is_device_only(state, state.default_vault)
    with pytest.raises(MemoriesError):
        refuse_if_device_only(state, local, "synced")
    assert call(service, LOCAL, op="list")["items"] == []
    service.session.elevate(LOCAL.namespace)
    assert call(service, LOCAL, op="export")["items"] == []


def test_card_write_conflicts_and_resolution(service: Service) -> None:
    """HI-4: a stale base makes a conflict; card_write refuses to guess; resolve lists every head."""
    card = call(service, LOCAL, op="card_write", type="knowledge", title="t", body="v1")
    base = card["revision"]
    call(service, LOCAL, op="card_write", id=card["id"], base=base, body="left")
    assert call(service, LOCAL, op="card_write", id=card["id"], base=base, body="right")["conflict"] is True
    assert code_of(service, LOCAL, op="card_write", id=card["id"], body="x") == "conflict"
    read = call(service, LOCAL, op="card_read", id=card["id"])
    assert read["conflict"] is True and {v["body"] for v in read["head_contents"]} == {"left", "right"}
    resolved = call(service, LOCAL, op="card_write", id=card["id"], resolve=True, body="merged")
    assert resolved["conflict"] is False
    parents = call(service, LOCAL, op="history", id=card["id"])["revisions"][-1]["parents"]
    assert len(parents) == 2


def test_valid_till_edge_values_are_typed_errors(service: Service) -> None:
    """API-8: out-of-range dates never crash the op."""
    a = call(service, LOCAL, op="card_write", type="persona", title="a")["id"]
    b = call(service, LOCAL, op="card_write", type="persona", title="b")["id"]
    for when in ("9999-12-31", "0001-01-01T00:00:00", "2027-02-30", "tomorrow-ish"):
        assert code_of(service, LOCAL, op="card_link", src=a, dst=b, valid_till=when) == "invalid_input"
