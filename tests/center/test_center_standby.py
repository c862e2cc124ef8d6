"""CT-4: a standby copies its primary by commit sequence, refuses to be promoted while behind,
takes over with a new credential generation, and the old primary's grants are refused after."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.center.tickets import verify_ticket
from tests.center.support import PASSWORD, Center, Tls, make_tls, pg_database, wait_for


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(params=["sqlite", "postgresql"])
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[str | None, str | None]]:
    if request.param == "sqlite":
        yield None, None
        return
    with pg_database() as primary, pg_database() as standby:
        yield primary, standby


def _standby_view(center: Center) -> dict[str, object]:
    status = center.admin("GET", "/v1/admin/status")
    assert status.status == 200, status.body
    view: dict[str, object] = status.body.get("standby") or {}
    return view


def test_ct4_standby_catch_up_refused_promotion_takeover_and_stale_primary(
    stores: tuple[str | None, str | None], tls: Tls, tmp_path: Path
) -> None:
    primary_store, standby_store = stores
    primary = Center(tmp_path / "primary", tls, primary_store).start()
    standby: Center | None = None
    try:
        assert primary.unlock().status == 200
        alice = primary.grant("alice", "read_write", ["team"])
        for n in range(5):
            assert primary.rpc(alice["token"], {"op": "put", "title": f"before {n}", "body": "b", "vault": "team"}).status == 200

        # A long interval: after its first copy the standby asks again only when woken.
        standby = Center(
            tmp_path / "standby",
            tls,
            standby_store,
            extra=("--primary", primary.url, "--ca", str(tls.ca), "--interval", "3600", "--batch", "7"),
            env={"MEMORIES_CENTER_PRIMARY_TOKEN": primary.admin_token},
        ).start("standby")
        wait_for(lambda: _standby_view(standby).get("caught_up") is True, "the standby to catch up")
        info = standby.request("GET", "/v1/info").body
        assert info["role"] == "standby" and info["key"] == primary.request("GET", "/v1/info").body["key"]
        assert standby.rpc(alice["token"], {"op": "list", "vault": "team"}).code == "center_unavailable"

        for n in range(3):
            assert primary.rpc(alice["token"], {"op": "put", "title": f"after {n}", "body": "a", "vault": "team"}).status == 200
        behind = standby.admin("POST", "/v1/admin/promote", {"password": PASSWORD})
        assert (behind.status, behind.code) == (409, "center_behind")
        assert standby.request("GET", "/v1/info").body["role"] == "standby"

        # The refusal woke the copier: it catches up, then a wrong password still cannot take over.
        wait_for(lambda: _standby_view(standby).get("caught_up") is True, "the standby to catch up again")
        wrong = standby.admin("POST", "/v1/admin/promote", {"password": "not it"})
        assert wrong.code == "wrong_password"
        assert standby.request("GET", "/v1/info").body["role"] == "standby"

        promoted = standby.cli("promote", "--password-stdin", input=PASSWORD + "\n")
        assert promoted.returncode == 0, promoted.stdout + promoted.stderr
        result = json.loads(promoted.stdout)
        assert result["generation"] == 2 and result["old_primary_fenced"] is True

        # The old primary's grant: refused by the new primary and by the fenced old one.
        stale = standby.rpc(alice["token"], {"op": "list", "vault": "team"})
        assert (stale.status, stale.code) == (403, "stale_generation")
        old = primary.rpc(alice["token"], {"op": "put", "title": "late write", "body": "x", "vault": "team"})
        assert (old.status, old.code) == (403, "stale_generation")
        assert standby.request("GET", f"/v1/tickets/{alice['ticket_id']}").body == {"status": "revoked", "generation": 2}

        # Everything acknowledged before the takeover is on the new primary, under a new grant.
        bob = standby.grant("bob", "read", ["team"])
        listed = standby.rpc(bob["token"], {"op": "list", "vault": "team"})
        assert listed.status == 200, listed.body
        titles = {item["title"] for item in listed.body["result"]["items"]}
        assert titles == {f"before {n}" for n in range(5)} | {f"after {n}" for n in range(3)}
        key = base64.b64decode(standby.request("GET", "/v1/info").body["key"])
        body = json.loads(base64.urlsafe_b64decode(bob["ticket"].split(".")[1] + "=="))
        assert verify_ticket(bob["ticket"], key, body["issued_ms"]).generation == 2
    finally:
        if standby is not None:
            standby.stop()
        with contextlib.suppress(Exception):
            primary.stop()


def test_ct4_a_primarys_data_directory_is_not_turned_into_a_standby(tls: Tls, tmp_path: Path) -> None:
    primary = Center(tmp_path / "primary", tls).start()
    try:
        assert primary.unlock().status == 200
        url, token = primary.url, primary.admin_token
    finally:
        primary.stop()
    again = Center(
        tmp_path / "primary",
        tls,
        extra=("--primary", url, "--ca", str(tls.ca)),
        env={"MEMORIES_CENTER_PRIMARY_TOKEN": token},
    )
    with pytest.raises(AssertionError, match="empty data directory"):
        again.start("standby")
