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
            assert await row.first.locator(".activity-op").text_content() == "put"
            assert await row.first.locator(".activity-who").text_content() == "you (cli)"
            assert BODY not in await page.content()
            shot = tmp_path / "dashboard-activity.png"
            await page.screenshot(path=str(shot))
            save_artifact(shot)

        run_in_browser(dash.url, scenario)
    finally:
        stop_process(dash.proc)
