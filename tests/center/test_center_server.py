"""The Center server (CT-2, CT-3) as real `memories center serve` processes over TLS.

One suite, run against both hosted stores: SQLite in DIR/store and PostgreSQL (a role and a
database of its own on 127.0.0.1:5432, created and dropped here).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.center.tickets import verify_ticket
from engine.errors import CODES
from tests.center.support import PASSWORD, Center, Tls, make_tls, pg_database, wait_for

SCOPE_OPS = {  # scope → (may read, may write, may delete)
    "read": (True, False, False),
    "write": (False, True, False),
    "read_write": (True, True, False),
    "read_write_delete": (True, True, True),
    "allow_all": (True, True, True),
}


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with pg_database() as url:
        yield url


@pytest.fixture(scope="module")
def center(store: str | None, tls: Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Center]:
    c = Center(tmp_path_factory.mktemp("center") / "data", tls, store).start()
    try:
        assert c.unlock().status == 200
        yield c
    finally:
        c.stop()


def test_ct2_info_and_status_say_server_side_encryption(center: Center) -> None:
    info = center.request("GET", "/v1/info")
    assert info.status == 200
    assert info.body["service"] == "memories-center" and info.body["encryption"] == "server-side"
    assert info.body["role"] == "primary" and info.body["generation"] == 1 and info.body["locked"] is False
    status = center.admin("GET", "/v1/admin/status")
    assert status.status == 200 and "can read hosted content" in status.body["encryption_note"]
    assert status.body["store"] == ("postgresql" if center.store else "sqlite")
    text = center.cli("admin", "status")
    assert text.returncode == 0, text.stderr
    human = center.command("admin", "status", "--data", str(center.data), "--ca", str(center.tls.ca))
    import subprocess

    out = subprocess.run(human, capture_output=True, text=True, env=center.environ(), timeout=120, stdin=subprocess.DEVNULL)
    assert "SERVER-SIDE" in out.stdout and "can read hosted content" in out.stdout


def test_ct1_grant_prints_token_once_and_a_ticket_signed_by_the_pinned_key(center: Center) -> None:
    made = center.grant("ticketed", "read", ["team"])
    key = base64.b64decode(center.request("GET", "/v1/info").body["key"])
    ticket = verify_ticket(made["ticket"], key, now_ms=made_ms(made))
    assert ticket.scope == "read" and ticket.vaults == ("team",) and ticket.generation == 1 and ticket.name == "ticketed"
    assert ticket.ticket_id == made["ticket_id"]
    listed = center.admin("GET", "/v1/admin/grants").body["grants"]
    assert made["token"] not in json.dumps(listed)
    assert center.request("GET", f"/v1/tickets/{made['ticket_id']}").body == {"status": "valid", "generation": 1}
    assert center.request("GET", "/v1/tickets/" + "0" * 32).body["status"] == "unknown"


def made_ms(made: dict[str, Any]) -> int:
    body = json.loads(base64.urlsafe_b64decode(made["ticket"].split(".")[1] + "=="))
    return int(body["issued_ms"])


@pytest.mark.parametrize("scope", list(SCOPE_OPS))
def test_ct2_each_scope_reaches_exactly_its_ops(center: Center, scope: str) -> None:
    may_read, may_write, may_delete = SCOPE_OPS[scope]
    token = center.grant(f"scope-{scope}", scope, ["team"])["token"]
    helper = center.grant(f"helper-{scope}", "read_write_delete", ["team"])["token"]
    seeded = center.rpc(helper, {"op": "put", "title": f"seed {scope}", "body": "b", "vault": "team"})
    assert seeded.status == 200, seeded.body

    read = center.rpc(token, {"op": "list", "vault": "team"})
    assert (read.status, read.code) == ((200, None) if may_read else (403, "scope_denied"))
    write = center.rpc(token, {"op": "put", "title": f"by {scope}", "body": "x", "vault": "team"})
    assert (write.status, write.code) == ((200, None) if may_write else (403, "scope_denied"))
    delete = center.rpc(token, {"op": "delete", "id": seeded.body["result"]["id"]})
    assert (delete.status, delete.code) == ((200, None) if may_delete else (403, "scope_denied"))
    # Off the MCP allowlist: no scope reaches it, not even allow_all.
    for op in ({"op": "lock"}, {"op": "mcp_grants"}, {"op": "sudo", "password": "x"}):
        refused = center.rpc(token, op)
        assert (refused.status, refused.code) == (403, "permission_denied"), op
    unknown = center.rpc(token, {"op": "no_such_op"})
    assert (unknown.status, unknown.code) == (400, "unknown_op")


def test_ct2_vault_set_bounds_every_op(center: Center) -> None:
    team = center.grant("team-only", "read_write", ["team"])["token"]
    other = center.grant("other-only", "read_write", ["other"])["token"]
    theirs = center.rpc(other, {"op": "put", "title": "not for team", "body": "secret plan", "vault": "other"})
    assert theirs.status == 200
    assert center.rpc(team, {"op": "list", "vault": "other"}).code == "scope_denied"
    assert center.rpc(team, {"op": "list"}).code == "scope_denied"  # the default vault is not in the set
    by_id = center.rpc(team, {"op": "get", "id": theirs.body["result"]["id"]})
    assert (by_id.status, by_id.code) == (403, "scope_denied")
    own = center.rpc(other, {"op": "get", "id": theirs.body["result"]["id"]})
    assert own.status == 200


def test_ct2_revoked_grant_is_refused_on_its_next_call(center: Center) -> None:
    made = center.grant("leaver", "read", ["team"])
    assert center.rpc(made["token"], {"op": "list", "vault": "team"}).status == 200
    assert center.admin("DELETE", "/v1/admin/grants/leaver").status == 200
    after = center.rpc(made["token"], {"op": "list", "vault": "team"})
    assert (after.status, after.code) == (401, "unauthorized")
    assert center.request("GET", f"/v1/tickets/{made['ticket_id']}").body["status"] == "revoked"


def test_bad_requests_get_typed_errors(center: Center) -> None:
    token = center.grant("bad-requests", "read", ["team"])["token"]
    assert center.rpc("mcg_wrong", {"op": "list"}).code == "unauthorized"
    assert center.request("POST", "/v1/rpc", {"op": "list"}).code == "unauthorized"
    assert center.request("POST", "/v1/rpc", b"{not json", token=token).code == "invalid_request"
    assert center.request("POST", "/v1/rpc", b"[1]", token=token).code == "invalid_request"
    big = center.request("POST", "/v1/rpc", b'{"op": "list", "x": "' + b"a" * (1024 * 1024 + 10) + b'"}', token=token)
    assert (big.status, big.code) == (413, "too_large")
    assert center.rpc(token, {"op": "list", "vault": "team", "surprise": 1}).code == "unknown_field"
    admin = center.request("GET", "/v1/admin/status", token="mca_wrong")
    assert (admin.status, admin.code) == (401, "unauthorized")
    for answer in (big, admin):
        assert answer.code in CODES


def test_ct2_host_and_origin_checked_like_the_dashboard(center: Center) -> None:
    token = center.grant("browser", "read", ["team"])["token"]
    evil_host = center.request("POST", "/v1/rpc", {"op": "list", "vault": "team"}, token=token, headers={"Host": "evil.example"})
    assert evil_host.status == 403
    evil_origin = center.request(
        "POST", "/v1/rpc", {"op": "list", "vault": "team"}, token=token, headers={"Origin": "https://evil.example"}
    )
    assert evil_origin.status == 403
    cross = center.request(
        "POST", "/v1/rpc", {"op": "list", "vault": "team"}, token=token, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status == 403
    assert center.request("POST", "/v1/rpc", {"op": "list", "vault": "team"}, token=token).status == 200


def test_ct2_access_log_names_grant_route_status_never_content(center: Center) -> None:
    made = center.grant("logged", "read_write", ["team"])
    canary_title, canary_body = "CANARY-TITLE-8f3a", "CANARY-BODY-c91e"
    assert center.rpc(made["token"], {"op": "put", "title": canary_title, "body": canary_body, "vault": "team"}).status == 200
    assert center.rpc(made["token"], {"op": "list", "vault": "nope"}).status in (403, 404)
    center.unlock()
    text = (center.data / "access.log").read_text()
    assert (center.data / "access.log").stat().st_mode & 0o077 == 0
    for secret in (canary_title, canary_body, made["token"], PASSWORD, center.admin_token):
        assert secret not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert any(e["grant"] == "logged" and e["route"] == "/v1/rpc" and e["op"] == "put" and e["status"] == 200 for e in lines)
    assert any(e["grant"] == "logged" and e["status"] >= 400 and e["code"] for e in lines)
    assert any(e["grant"] == "admin" and e["route"] == "/v1/admin/unlock" for e in lines)


def test_ct2_lock_refuses_content_with_423_and_unlock_brings_it_back(center: Center) -> None:
    token = center.grant("locker", "read", ["team"])["token"]
    assert center.admin("POST", "/v1/admin/lock").body == {"locked": True}
    locked = center.rpc(token, {"op": "list", "vault": "team"})
    assert (locked.status, locked.code) == (423, "center_locked")
    assert center.request("GET", "/v1/info").body["locked"] is True
    assert center.admin("POST", "/v1/admin/grants", {"name": "x", "scope": "read", "vaults": ["team"]}).status == 423
    wrong = center.unlock("not the password")
    assert wrong.code == "wrong_password" and "not the password" not in json.dumps(wrong.body)
    assert center.rpc(token, {"op": "list", "vault": "team"}).status == 423
    assert center.unlock().status == 200
    assert center.rpc(token, {"op": "list", "vault": "team"}).status == 200


def test_ct2_grant_cli_prints_token_and_ticket(center: Center) -> None:
    made = center.cli("admin", "grant", "new", "from-cli", "--scope", "read_write", "--vault", "team", "--expires", "1d")
    assert made.returncode == 0, made.stderr
    result = json.loads(made.stdout)
    assert result["token"].startswith("mcg_") and result["ticket"].startswith("mct1.")
    listed = json.loads(center.cli("admin", "grant", "list").stdout)
    entry = next(g for g in listed["grants"] if g["name"] == "from-cli")
    assert entry["expires_ms"] is not None and result["token"] not in json.dumps(listed)
    assert center.cli("admin", "grant", "revoke", "from-cli").returncode == 0
    again = center.cli("admin", "grant", "revoke", "from-cli")
    assert again.returncode != 0 and json.loads(again.stdout)["error"]["code"] == "not_found"


# -- one-off Centers ------------------------------------------------------------------------------
def test_ct2_members_json_readable_by_others_is_refused_at_start(tls: Tls, tmp_path: Path) -> None:
    data = tmp_path / "data"
    center = Center(data, tls).start()
    center.stop()
    os.chmod(data / "members.json", 0o644)
    with pytest.raises(AssertionError, match=r"members\.json"):
        Center(data, tls).start()
    assert "owner-only" in Center(data, tls).stderr()
    os.chmod(data / "members.json", 0o600)
    os.chmod(data / "admin.token", 0o640)
    with pytest.raises(AssertionError, match=r"admin\.token"):
        Center(data, tls).start()


def test_ct2_rate_limit_answers_429_with_retry_after(tls: Tls, tmp_path: Path) -> None:
    center = Center(tmp_path / "data", tls, extra=("--rate", "0.2", "--burst", "3")).start()
    try:
        center.unlock()
        token = center.grant("chatty", "read", ["team"])["token"]
        quiet = center.grant("quiet", "read", ["team"])["token"]
        statuses = [center.rpc(token, {"op": "list", "vault": "team"}) for _ in range(5)]
        assert [a.status for a in statuses[:3]] == [200, 200, 200]
        limited = statuses[3]
        assert (limited.status, limited.code) == (429, "rate_limited") and int(limited.headers["Retry-After"]) >= 1
        # Per grant: another grant is not slowed by this one.
        assert center.rpc(quiet, {"op": "list", "vault": "team"}).status == 200
    finally:
        center.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def own_store(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """A store of this test alone (the module's Center holds the shared one's writer lock)."""
    if request.param == "sqlite":
        yield None
        return
    with pg_database() as url:
        yield url


def test_ct3_kill_9_mid_write_loses_no_acknowledged_write(own_store: str | None, tls: Tls, tmp_path: Path) -> None:
    """CT-3: every write the Center acknowledged is there after a kill -9 and a restart."""
    center = Center(tmp_path / "data", tls, own_store).start()
    acked: list[str] = []
    try:
        center.unlock()
        token = center.grant("writer", "read_write", ["team"])["token"]
        stop = threading.Event()

        def write(worker: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    answer = center.rpc(token, {"op": "put", "title": f"w{worker}-{n}", "body": "x" * 200, "vault": "team"})
                except OSError:
                    return  # the connection died with the process: not acknowledged
                if answer.status == 200:
                    acked.append(answer.body["result"]["id"])

        threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        wait_for(lambda: len(acked) >= 40, "forty acknowledged writes", deadline=120)
        center.kill9()
        stop.set()
        for thread in threads:
            thread.join(60)
        center.start()
        assert center.unlock().status == 200
        reader = center.grant("reader", "read", ["team"])["token"]
        listed = center.rpc(reader, {"op": "list", "vault": "team", "limit": 100000})
        assert listed.status == 200, listed.body
        present = {item["id"] for item in listed.body["result"]["items"]}
        assert set(acked) <= present and len(acked) >= 40
    finally:
        center.stop()


def test_ct1_device_ticket_names_its_device_and_info_cli_prints_the_pin(center: Center) -> None:
    device = "ab" * 32
    made = center.grant("laptop", "read_write", ["team"], kind="device", device=device)
    key = base64.b64decode(center.request("GET", "/v1/info").body["key"])
    ticket = verify_ticket(made["ticket"], key, now_ms=made_ms(made))
    assert ticket.kind == "device" and ticket.device == device
    refused = center.admin(
        "POST", "/v1/admin/grants", {"name": "nodevice", "scope": "read", "vaults": ["team"], "kind": "device"}
    )
    assert (refused.status, refused.code) == (400, "invalid_request")
    import subprocess

    shown = subprocess.run(
        center.command("info", center.url, "--ca", str(center.tls.ca), "--json"),
        capture_output=True,
        text=True,
        env=center.environ(),
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert shown.returncode == 0, shown.stderr
    info = json.loads(shown.stdout)
    assert info["key"] == base64.b64encode(key).decode() and len(info["fingerprint"]) == 64


def test_ct2_expired_grant_is_refused(center: Center) -> None:
    import time

    made = center.grant("brief", "read", ["team"], expires_ms=int(time.time() * 1000) + 1500)
    wait_for(
        lambda: center.rpc(made["token"], {"op": "list", "vault": "team"}).code == "unauthorized",
        "the grant to expire",
    )
    assert center.request("GET", f"/v1/tickets/{made['ticket_id']}").body["status"] == "expired"


def test_ct2_plain_http_only_on_loopback(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers import TEST_ENV

    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "center", "serve", "--data", str(tmp_path / "d"), "--listen", "0.0.0.0:0", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **TEST_ENV},
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_input" and "HTTPS" in error["message"]
    assert not (tmp_path / "d").exists()
