"""DT-9 (issue 31): import and export from the window. The page's Export asks the tray; the tray's own window
takes the folder and the vault password, runs `memories sudo` and `memories export` as its
children, and the page follows the job in /api/status. The password never crosses the page.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from pathlib import Path
from typing import Any

import pytest

from desktop.tray.export_dialog import TITLE_EXPORT
from desktop.tray.import_dialog import TITLE_IMPORT
from desktop.tray.transfer import TransferJobs
from tests.desktop.browser import run_in_browser
from tests.desktop.support import XSession
from tests.desktop.test_tray_approval import _gone
from tests.desktop.test_tray_unlock import _require_toolkit, _type_into, _visible, _window
from tests.desktop.test_tray_x11 import Tray
from tests.helpers import PASSWORD, Cli

WRONG = "not the vault password 5678"


def _request(url: str, path: str, body: bytes | None) -> tuple[int, dict[str, Any]]:
    port = int(url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    headers = {"Authorization": f"Bearer {url.split('#', 1)[1]}", "Origin": f"http://127.0.0.1:{port}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request("POST" if body is not None else "GET", path, body=body, headers=headers)
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def _seed(vault: Cli, n: int) -> None:
    for i in range(n):
        vault.ok("put", "--title", f"export note {i}", "--body", f"body {i}", "--tag", "exported")


def test_dt9_tray_job_elevates_only_itself_and_exports(vault: Cli, tmp_path: Path) -> None:
    """DT-9, API-3: the tray's export job runs `memories sudo --password-stdin` and `memories export`
    in one child shell: a wrong password stops it before anything is written; the right one
    exports every note; the elevation stays that job's (a later `memories export` from another
    process is still refused with elevation_required)."""
    _seed(vault, 3)
    said: list[str] = []
    jobs = TransferJobs(vault.home, said.append, env=vault.environ())
    target = tmp_path / "out"
    assert jobs.export("markdown", target, WRONG) == "wrong_password"
    assert not target.exists() and jobs.state()["state"] == "idle"
    assert jobs.export("markdown", target, PASSWORD) is None
    assert jobs.state()["state"] in ("running", "done")
    state = _wait_job(jobs)
    assert (state["state"], state["exported"], state["dir"]) == ("done", 3, str(target)), state
    assert len(list(target.glob("*.md"))) == 3
    assert "body 1" in "".join(p.read_text() for p in target.glob("*.md"))
    assert PASSWORD not in json.dumps(state) and not any(PASSWORD in line for line in said)
    refused = vault.run("export", "--format", "jsonl", str(tmp_path / "other"), "--json")
    assert refused.returncode != 0 and json.loads(refused.stdout)["error"]["code"] == "elevation_required"


def _wait_job(jobs: TransferJobs) -> dict[str, Any]:
    end = time.monotonic() + 180  # the job ends on its own; its state says so
    while jobs.state()["state"] == "running" and time.monotonic() < end:
        time.sleep(0.05)
    return jobs.state()


def test_dt9_tray_import_job_reports_counts_and_typed_errors(vault: Cli, tmp_path: Path) -> None:
    """DT-9: the tray's import job runs `memories import SOURCE` (no elevation, as in a terminal):
    a folder imports its notes and says how many; a file that is not valid JSONL fails with the
    CLI's typed error and imports nothing; a relative or missing path is refused before anything runs."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in ("one", "two"):
        (notes / f"{name}.md").write_text(f"---\ntitle: {name}\n---\nthe {name} note\n")
    jobs = TransferJobs(vault.home, lambda _: None, env=vault.environ())
    assert jobs.import_notes(notes) is None
    state = _wait_job(jobs)
    assert (state["state"], state["kind"], state["created"], state["skipped"], state["total"]) == ("done", "import", 2, 0, 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert jobs.import_notes(bad) is None
    state = _wait_job(jobs)
    assert (state["state"], state["error"]["code"]) == ("failed", "invalid_input"), state
    assert jobs.import_notes(Path("notes")) == "invalid_input"
    assert jobs.import_notes(tmp_path / "missing") == "invalid_input"
    assert vault.ok("list")["total"] == 2


@pytest.mark.parametrize("backend", ["gtk", "xorg"])  # GTK windows; the xorg backend's tkinter windows
def test_dt9_import_and_export_from_the_page_through_the_tray_windows(
    vault: Cli, xsession: XSession, tmp_path: Path, backend: str
) -> None:
    """DT-9: Export on the Settings page → the tray's window (GTK, or tkinter on the xorg backend;
    folder prefilled, password typed there with xdotool): a wrong password shows in the window,
    the right one starts the job; the page shows its outcome under the button and on the Status
    page; the folder holds every note. Import → the tray's window takes the path (a missing one
    is refused there), no password; the page shows the counts. No request or response of the
    page carries the password; bad requests (a password or a path from the page, a wrong
    format, not JSON) are typed 400s (API-8)."""
    _require_toolkit(backend)
    _seed(vault, 4)
    notes = tmp_path / "notes to import"
    notes.mkdir()
    for name in ("alpha", "beta"):
        (notes / f"{name}.md").write_text(f"---\ntitle: {name}\n---\nthe {name} note\n")
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    tray = Tray(vault, xsession, tmp_path, backend, extra_env={"HOME": str(user_home)})
    traffic: list[str] = []
    select_all = "ctrl+a" if backend == "gtk" else "ctrl+slash"  # Tk's entry: Ctrl+A goes to the line start
    try:
        url = tray.wait_output(r"memories tray: dashboard (http://127\.0\.0\.1:\d+/#\S+)").group(1)

        async def scenario(page: Any) -> None:
            page.on("request", lambda r: traffic.append(f"{r.url} {r.post_data or ''}"))

            async def body_of(response: Any) -> None:
                try:
                    traffic.append(await response.text())
                except Exception:  # an event stream or a redirect has no body to read
                    traffic.append(response.url)

            page.on("response", lambda r: asyncio.ensure_future(body_of(r)))
            await page.click("#nav-settings")
            await page.wait_for_selector("#export-start:not([hidden])")
            await page.select_option("#export-format", "markdown")
            await page.click("#export-start")
            window = await asyncio.to_thread(_window, xsession, TITLE_EXPORT)
            await asyncio.to_thread(xsession.screenshot, tmp_path / f"tray-export-window-{backend}.png")
            await asyncio.to_thread(_type_into, xsession, window, ("type", WRONG), ("key", "Return"))
            await asyncio.to_thread(tray.wait_output, r"export dialog shows wrong_password")
            assert await page.locator("input[type=password]").count() == 0
            await asyncio.to_thread(_type_into, xsession, window, ("type", PASSWORD), ("key", "Return"))
            await page.wait_for_selector("#export-result.saved")
            assert "Started" in (await page.text_content("#export-result") or "")
            await page.wait_for_selector("#export-progress[data-state='done']", timeout=180_000)
            assert "4 item(s) written to" in (await page.text_content("#export-progress") or "")
            assert await asyncio.to_thread(_gone, xsession, TITLE_EXPORT), "the window closes once the export runs"
            await page.locator("[data-setting='export']").screenshot(path=str(tmp_path / f"settings-data-{backend}.png"))
            await page.click("#nav-status")
            assert "done: 4 item(s)" in (await page.text_content("#status-transfer") or "")

            # Import: the page names nothing; the tray's window takes the path (no password).
            await page.click("#nav-settings")
            await page.click("#import-start")
            window = await asyncio.to_thread(_window, xsession, TITLE_IMPORT)
            missing = str(tmp_path / "no such folder")
            await asyncio.to_thread(_type_into, xsession, window, ("type", missing), ("key", "Return"))
            await asyncio.to_thread(tray.wait_output, r"import dialog shows missing")
            await asyncio.to_thread(_type_into, xsession, window, ("key", select_all), ("type", str(notes)), ("key", "Return"))
            await page.wait_for_selector("#export-result.saved")
            done = "#export-progress[data-state='done']:has-text('Import from')"
            await page.wait_for_selector(done, timeout=180_000)
            assert "done: 2 new, 0 already present" in (await page.text_content("#export-progress") or "")
            assert await asyncio.to_thread(_gone, xsession, TITLE_IMPORT), "the window closes once the import runs"

        run_in_browser(url, scenario)
        folders = list(user_home.glob("Memories export *"))
        assert len(folders) == 1 and len(list(folders[0].glob("*.md"))) == 4
        out = tray.output()
        assert "export dialog ends with started" in out and "export done (exported 4)" in out
        assert "import dialog ends with started" in out and "import done (created 2, skipped 0, total 2, warnings 0)" in out
        assert vault.ok("list")["total"] == 6
        assert PASSWORD not in out and WRONG not in out
        assert traffic and not any(PASSWORD in t or WRONG in t for t in traffic), "the page never sees the password"

        # API-8: the page names a format and nothing else; anything more is a typed 400.
        code, data = _request(url, "/api/export", json.dumps({"format": "markdown", "password": PASSWORD}).encode())
        assert (code, data["error"]["code"]) == (400, "invalid_input") and PASSWORD not in json.dumps(data)
        code, data = _request(url, "/api/export", json.dumps({"format": "pdf"}).encode())
        assert (code, data["error"]["code"]) == (400, "invalid_input")
        code, data = _request(url, "/api/export", b"not json")
        assert (code, data["error"]["code"]) == (400, "invalid_input")
        code, data = _request(url, "/api/import", json.dumps({"path": str(notes)}).encode())
        assert (code, data["error"]["code"]) == (400, "invalid_input"), "a page cannot name a local path"
        code, status = _request(url, "/api/status", None)
        assert status["transfer"]["state"] == "done" and status["transfer"]["kind"] == "import"
        assert status["desktop"]["can_export"] is True and status["desktop"]["can_import"] is True
        assert not _window_open(xsession), "a refused request opens no window"
    finally:
        tray.stop()


def _window_open(x: XSession) -> bool:
    return bool(_visible(x, TITLE_EXPORT) or _visible(x, TITLE_IMPORT))
