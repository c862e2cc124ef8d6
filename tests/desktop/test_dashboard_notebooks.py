"""AG-13: the dashboard's Agents page shows each agent's private notebook, read-only (HTTP with
the token, and Debian's chromium): the user reads it; no route writes, exports or deletes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.desktop.support import save_artifact, start_dashboard, stop_process
from tests.desktop.test_dashboard_browser import run_in_browser
from tests.helpers import Cli


def _agent_call(cli: Cli, token: str, inner: dict[str, Any]) -> dict[str, Any]:
    with IpcClient(Paths(cli.home).socket, timeout=30) as client:
        result: dict[str, Any] = client.request({"op": "mcp_call", "token": token, "request": inner})["result"]
        return result


def test_agents_page_reads_notebooks(vault: Cli, tmp_path: Path) -> None:
    """AG-13 (the user reads it from the dashboard): /api/notebooks needs the token; the Agents tab
    lists the agent and opens its entries and scratch pad; markup an agent wrote stays text."""
    vault.sudo()
    token = vault.ok("mcp", "grant", "--name", "helper", "--scope", "read")["token"]
    _agent_call(vault, token, {"op": "notebook_write", "title": "Deploy plan", "body": "<b>step</b> one 部署"})
    _agent_call(vault, token, {"op": "scratch_write", "text": "where I stopped"})
    dash = start_dashboard(vault, tmp_path / "dashboard.log")
    try:
        dash.wait_state("unlocked")
        assert dash.request("GET", "/api/notebooks", token=None)[0] == 401
        assert dash.request("GET", "/api/notebooks/helper", token="wrong-token")[0] == 401
        code, _, listed = dash.request("GET", "/api/notebooks")
        assert code == 200 and [n["agent"] for n in listed["notebooks"]] == ["helper"]
        code, _, one = dash.request("GET", "/api/notebooks/helper")
        assert code == 200 and one["entries"][0]["body"] == "<b>step</b> one 部署"
        assert one["scratch"]["text"] == "where I stopped"
        assert dash.request("GET", "/api/notebooks/..%2Fetc")[0] in (400, 404)
        assert dash.request("GET", "/api/notebooks/nobody")[0] == 404
        for method in ("POST", "DELETE"):
            assert dash.request(method, "/api/notebooks/helper", {})[0] in (403, 404, 405)

        async def scenario(page: Any) -> None:
            await page.click("#nav-agents")
            await page.locator("#notebook-rows button", has_text="helper").click()
            entry = page.locator(".notebook-entry", has_text="Deploy plan")
            await entry.wait_for(timeout=15000)
            assert await entry.locator(".notebook-body").text_content() == "<b>step</b> one 部署"
            assert await page.locator(".notebook-entry b").count() == 0  # text, never markup
            assert "where I stopped" in (await page.locator(".notebook-scratch").text_content() or "")
            shot = tmp_path / "dashboard-agents.png"
            await page.screenshot(path=str(shot))
            save_artifact(shot)

        run_in_browser(dash.url, scenario)
    finally:
        stop_process(dash.proc)
    entries = vault.ok("audit", "--op", "notebook_show")["entries"]
    assert entries and entries[0]["phase"] == "intent"  # reading a notebook is recorded
    assert "部署" not in json.dumps(entries, ensure_ascii=False)
