"""Issue 17: `dashboard_activity`, the activity view's engine op for a page that never elevates:
the last 24 hours of the audit log as time, actor, op and item titles only, against a real engine;
and the dashboard's Activity page over it (HTTP with the token, and Debian's chromium)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.config import Paths
from engine.errors import MemoriesError
from engine.ipc.client import IpcClient
from tests.desktop.support import save_artifact, start_dashboard, stop_process
from tests.desktop.test_dashboard_browser import run_in_browser
from tests.helpers import Cli

BODY = "activity-body-never-shown"


def _call(cli: Cli, body: dict[str, Any]) -> dict[str, Any]:
    with IpcClient(Paths(cli.home).socket, timeout=30) as client:
        return client.request(body)


def test_activity_without_elevation_shows_titles_never_content(vault: Cli) -> None:
    """Issue 17 (activity view): no elevation needed (where `audit` needs it); each entry is time,
    who, op and the kinds and titles of its items; no IDs, no body; the read is itself audited."""
    vault.put("Activity title", BODY)
    with pytest.raises(MemoriesError) as refused:
        _call(vault, {"op": "audit"})
    assert refused.value.code == "elevation_required"
    answer = _call(vault, {"op": "dashboard_activity"})
    assert answer["hours"] == 24 and answer["more"] is False
    entries = answer["entries"]
    assert all(set(e) == {"ts_ms", "who", "op", "items"} for e in entries), entries
    assert [e["ts_ms"] for e in entries] == sorted((e["ts_ms"] for e in entries), reverse=True)
    put = next(e for e in entries if e["op"] == "put")
    assert put["who"] == "you (cli)"
    assert put["items"] == [{"kind": "memory", "title": "Activity title"}]
    text = json.dumps(answer)
    assert BODY not in text
    created = vault.ok("list")["items"][0]["id"]
    assert created not in text and created[:12] not in text, "no IDs leave the op"
    vault.sudo()
    logged = vault.ok("audit", "--op", "dashboard_activity")["entries"]
    assert logged and logged[0]["phase"] == "intent", "reading the activity is itself audited"


def test_activity_refuses_more_than_a_day_and_a_locked_vault(vault: Cli) -> None:
    """Issue 17: a wider window is a typed error and changes nothing; locked answers `locked`."""
    before = _call(vault, {"op": "dashboard_activity", "hours": 24})["entries"]
    for bad in ({"hours": 25}, {"hours": 0}, {"limit": 0}, {"limit": 501}):
        with pytest.raises(MemoriesError) as refused:
            _call(vault, {"op": "dashboard_activity", **bad})
        assert refused.value.code in ("invalid_request", "invalid_input"), refused.value.code
    after = _call(vault, {"op": "dashboard_activity", "hours": 24, "limit": 500})["entries"]
    assert len(after) == len(before) + 1, "only the one good read before was recorded, not the refusals"
    vault.ok("lock")
    with pytest.raises(MemoriesError) as locked:
        _call(vault, {"op": "dashboard_activity"})
    assert locked.value.code == "locked"


def test_activity_page_over_http_and_in_the_browser(vault: Cli, tmp_path: Path) -> None:
    """Issue 17 (activity view, API-6): /api/activity needs the token and answers only time, who,
    op and item titles; the Activity tab lists the put of a card by its title, never its body."""
    vault.put("Activity title", BODY)
    dash = start_dashboard(vault, tmp_path / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        assert dash.request("GET", "/api/activity", token=None)[0] == 401
        assert dash.request("GET", "/api/activity", token="wrong-token")[0] == 401
        code, _, data = dash.request("GET", "/api/activity")
        assert code == 200 and set(data) == {"entries", "hours", "more"}
        assert any(e["op"] == "put" and e["items"] == [{"kind": "memory", "title": "Activity title"}] for e in data["entries"])
        assert BODY not in json.dumps(data)

        async def scenario(page: Any) -> None:
            await page.click("#nav-activity")
            row = page.locator("#activity-rows tr", has_text="Activity title")
            await row.first.wait_for(timeout=15000)
            op = row.first.locator(".activity-op")
            assert await op.text_content() == "Added"  # said for a person; the engine's name stays in data-op
            assert await op.get_attribute("data-op") == "put"
            assert await row.first.locator(".activity-who").text_content() == "you (cli)"
            assert BODY not in await page.content()
            shot = tmp_path / "dashboard-activity.png"
            await page.screenshot(path=str(shot))
            save_artifact(shot)

        run_in_browser(dash.url, scenario)
    finally:
        stop_process(dash.proc)


def test_dashboard_requests_are_audited_as_the_dashboard(vault: Cli, tmp_path: Path) -> None:
    """Issue 17, API-3: what the dashboard does shows as "Dashboard" in the Activity view, not
    "you (cli)"; the audit still records the kernel's namespace and surface beside the label."""
    dash = start_dashboard(vault, tmp_path / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        code, _, made = dash.request("POST", "/api/cards", {"kind": "memory", "fields": {"title": "Made in the page"}})
        assert code == 200, made
        code, _, data = dash.request("GET", "/api/activity")
        assert code == 200
        (put,) = [e for e in data["entries"] if e["op"] == "put" and e["items"][0]["title"] == "Made in the page"]
        assert put["who"] == "dashboard"

        async def scenario(page: Any) -> None:
            await page.click("#nav-activity")
            row = page.locator("#activity-rows tr", has_text="Made in the page")
            await row.first.wait_for(timeout=15000)
            assert await row.first.locator(".activity-who").text_content() == "Dashboard"

        run_in_browser(dash.url, scenario)
    finally:
        stop_process(dash.proc)
    vault.sudo()
    entries = vault.ok("audit")["entries"]
    (entry,) = [e for e in entries if e["op"] == "put" and [a["id"] for a in e["assets"]] == [made["id"]]]
    assert entry["who"] == "dashboard"
    assert entry["surface"] == "ipc" and entry["actor"].startswith("cli:"), entry  # the kernel's word stays


def test_a_client_label_grants_nothing_and_cannot_pose_as_an_agent(vault: Cli) -> None:
    """Issue 17, API-3: the label is the program's word, so it only names a local IPC caller: it
    does not elevate (audit still needs `memories sudo`) and a label other than the desktop's
    own ("mcp", an agent's words, a long string) is refused with a typed error, nothing done."""
    socket = Paths(vault.home).socket
    with IpcClient(socket, timeout=30) as plain, IpcClient(socket, timeout=30, client_label="dashboard") as labelled:
        with pytest.raises(MemoriesError) as unlabelled_refusal:
            plain.request({"op": "audit"})
        with pytest.raises(MemoriesError) as labelled_refusal:
            labelled.request({"op": "audit"})
        assert labelled_refusal.value.code == unlabelled_refusal.value.code != "invalid_input"
    for label in ("mcp", "agent claude (mcp)", "remote (ws)", "x" * 5000, 7):
        with IpcClient(socket, timeout=30) as client:
            with pytest.raises(MemoriesError) as refused:
                client.request({"op": "put", "title": "posed", "client_label": label})
        assert refused.value.code == "invalid_input"
    assert vault.ok("search", "posed")["results"] == []
