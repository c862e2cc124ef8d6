"""saas mode (issue 30): one `[[centers]] mode = "saas"` entry sends the daemon's content RPC to
a real Center process (`memories center serve`, TLS from a private CA pinned with `ca`) with
the bearer token from the environment variable `token_env` names.

Three engines with three Center grants check per-vault authorization; the local store is
never written by a content op; the content ops with no hosted form are refused; an agent's
MCP call is bounded by its local ticket-made grant and again by the Center.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.center.center_process import CenterProcess, running
from tests.center.support_daemon import apply, call, call_error, engine_with
from tests.helpers import Cli, raw_error

TOKEN_ENV = "MEMORIES_CENTER_TOKEN"


@pytest.fixture(scope="module")
def center(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CenterProcess]:
    with running(tmp_path_factory.mktemp("saas") / "center") as c:
        yield c


@pytest.fixture(scope="module")
def engines(center: CenterProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Cli]]:
    root = tmp_path_factory.mktemp("saas-engines")
    grants = {
        "alice": ("read_write", ("team",)),
        "bob": ("read", ("team", "ops")),
        "carol": ("read_write_delete", ("ops",)),
    }
    clis: dict[str, Cli] = {}
    try:
        for name, (scope, vaults) in grants.items():
            token = center.grant(name, scope, *vaults)["token"]
            clis[name] = engine_with(root / name, center.config("saas", TOKEN_ENV), env={TOKEN_ENV: token})
        yield clis
    finally:
        for cli in clis.values():
            cli.stop()


def _rows(cli: Cli) -> tuple[int, int]:
    """Rows of the local store's revision/record and content tables (sealed, but countable)."""
    with sqlite3.connect(f"file:{cli.home / 'store.db'}?mode=ro", uri=True) as db:
        state = db.execute("SELECT count(*) FROM state").fetchone()[0]
        content = db.execute("SELECT count(*) FROM content").fetchone()[0]
    return int(state), int(content)


def test_saas_content_rpc_per_vault_authorization(engines: dict[str, Cli]) -> None:
    alice, bob, carol = engines["alice"], engines["bob"], engines["carol"]
    note = alice.ok("put", "--title", "team plan", "--body", "hosted, not local", "--vault", "team")
    assert alice.err("put", "--title", "x", "--vault", "ops")["code"] == "scope_denied"
    # bob reads what alice wrote (the same hosted store), but may not write.
    assert [i["title"] for i in bob.ok("list", "--vault", "team")["items"]] == ["team plan"]
    assert bob.ok("get", note["id"], "--vault", "team")["body"] == "hosted, not local"
    assert bob.err("put", "--title", "nope", "--vault", "team")["code"] == "scope_denied"
    # carol's grant covers ops only: alice's team item is out of her reach.
    assert carol.err("get", note["id"])["code"] in ("scope_denied", "not_found")
    ops = carol.ok("put", "--title", "ops runbook", "--body", "restart twice", "--vault", "ops")
    assert [r["title"] for r in bob.ok("search", "runbook", "--vault", "ops")["results"]] == ["ops runbook"]
    carol.ok("delete", ops["id"])
    assert bob.ok("list", "--vault", "ops")["items"] == []


def test_saas_a_content_op_never_touches_the_local_store(engines: dict[str, Cli]) -> None:
    alice = engines["alice"]
    before = _rows(alice)
    written = alice.ok("put", "--title", "only on the Center", "--vault", "team")
    alice.ok("get", written["id"], "--vault", "team")
    alice.ok("edit", written["id"], "--title", "still only there")
    alice.ok("list", "--vault", "team")
    assert _rows(alice) == before
    # A content op with no hosted form does not fall back to the local store either.
    error = raw_error(alice, {"op": "import_batch", "items": [{"title": "local?", "body": "no"}]})
    assert error.code == "center_managed"
    assert _rows(alice) == before


def test_saas_mcp_has_no_capability_escalation(engines: dict[str, Cli], center: CenterProcess) -> None:
    """The agent's local ticket-made grant (read, team) bounds the call, though the daemon's
    Center grant (bob: read on team and ops) would allow more; the Center bounds it again."""
    bob, carol = engines["bob"], engines["carol"]
    bob.sudo()
    assert bob.err("mcp", "grant", "--name", "local", "--scope", "allow_all")["code"] == "center_managed"
    ticket = center.grant("bob-agent", "read", "team")["ticket"]
    agent = apply(bob, ticket, "bob-agent")["token"]
    assert agent.startswith("mem_")
    listed = call(bob, agent, op="list")  # the grant's one vault is filled in
    assert all(i["title"] != "ops secret plan" for i in listed["items"])
    hidden = carol.ok("put", "--title", "ops secret plan", "--vault", "ops")
    assert call_error(bob, agent, op="list", vault="ops").code == "scope_denied"
    assert call_error(bob, agent, op="get", id=hidden["id"], vault="ops").code == "scope_denied"
    assert call_error(bob, agent, op="history", id=hidden["id"]).code == "scope_denied"
    assert call_error(bob, agent, op="put", title="x", vault="team").code == "scope_denied"
    # Revoked at the Center: refused on the agent's next call.
    center.revoke("bob-agent")
    assert call_error(bob, agent, op="list").code == "ticket_revoked"


def test_saas_missing_or_wrong_token_is_a_typed_error(center: CenterProcess, tmp_path: Path) -> None:
    cli = engine_with(tmp_path / "none", center.config("saas", TOKEN_ENV), env={TOKEN_ENV: ""})
    try:
        error = cli.err("list", "--vault", "team")
        assert error["code"] == "unauthorized" and TOKEN_ENV in error["message"]
    finally:
        cli.stop()
    wrong = "mcg_" + "A" * 43
    cli = engine_with(tmp_path / "wrong", center.config("saas", TOKEN_ENV), env={TOKEN_ENV: wrong})
    try:
        error = cli.err("list", "--vault", "team")
        assert error["code"] == "unauthorized" and wrong not in error["message"]
    finally:
        cli.stop()


def test_saas_center_locked_then_down(tmp_path: Path) -> None:
    with running(tmp_path / "center") as center:
        token = center.grant("dave", "read_write", "team")["token"]
        cli = engine_with(tmp_path / "dave", center.config("saas", TOKEN_ENV), env={TOKEN_ENV: token})
        try:
            cli.ok("put", "--title", "up", "--vault", "team")
            center.lock()
            assert cli.err("list", "--vault", "team")["code"] == "center_locked"
            center.unlock()
            assert [i["title"] for i in cli.ok("list", "--vault", "team")["items"]] == ["up"]
            center.stop()
            assert cli.err("list", "--vault", "team")["code"] == "center_unavailable"
        finally:
            cli.stop()


def test_saas_a_locked_engine_sends_nothing(engines: dict[str, Cli]) -> None:
    alice = engines["alice"]
    alice.ok("lock")
    try:
        assert alice.err("list", "--vault", "team")["code"] == "locked"
    finally:
        alice.unlock()


def test_saas_a_certificate_outside_the_pinned_ca_is_refused(center: CenterProcess, tmp_path: Path) -> None:
    """Without `ca`, the private CA's certificate is not trusted: no content goes anywhere."""
    config = "\n".join(line for line in center.config("saas", TOKEN_ENV).splitlines() if not line.startswith("ca ="))
    cli = engine_with(tmp_path / "noca", config + "\n", env={TOKEN_ENV: "mcg_" + "B" * 43})
    try:
        error = cli.err("list", "--vault", "team")
        assert error["code"] == "center_unavailable" and "certificate" in error["message"]
    finally:
        cli.stop()
