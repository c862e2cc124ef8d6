"""DT-6 (issue 17): the one-folder app build, built with PyInstaller from packaging/memories-tray.spec
and run from the folder: `memories --version`, `memories status`, a vault made, searched and
locked by the bundled CLI (its engine started by the bundle itself), login and app-menu entries
that point at the bundle, and `memories-tray` docking under Xvfb with a real tray host.

The build takes about a minute, so it runs once per test session into the session's temp
root; a file lock makes pytest-xdist workers share that one build instead of racing.
"""

from __future__ import annotations

import fcntl
import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from desktop.status import TrayState
from desktop.tray.icons import PALETTE
from tests.desktop.support import XSession, children_of, stop_process
from tests.helpers import PASSWORD, TEST_ENV, in_ci, require
from tests.session_bus import run_session_prefix

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "packaging" / "memories-tray.spec"
TRAY_REGION_HEIGHT = 48  # trayer's panel (tests/desktop/support.py XSession)
# The first test to ask for the bundle builds it (or waits for another worker's build) in its
# setup, which pytest-timeout counts: room for a slow, loaded machine.
pytestmark = pytest.mark.timeout(900)


def _build(root: Path) -> Path:
    """Build once into ``root``; later callers (other workers too) reuse the result or its failure."""
    root.mkdir(parents=True, exist_ok=True)
    app, log, failed = root / "dist" / "memories", root / "build.log", root / "build.failed"
    with open(root / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the build is done; released on close
        if failed.exists():
            pytest.fail(f"the app bundle failed to build earlier in this session:\n{failed.read_text()[-4000:]}")
        if not (app / "memories").is_file():
            started = time.monotonic()
            with open(log, "wb") as out:
                code = subprocess.run(
                    [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                     "--distpath", str(root / "dist"), "--workpath", str(root / "work"), str(SPEC)],
                    cwd=root, stdout=out, stderr=subprocess.STDOUT, timeout=900,
                ).returncode  # fmt: skip
            if code != 0:
                failed.write_text(log.read_text(errors="replace"))
                pytest.fail(f"pyinstaller failed ({code}):\n{log.read_text(errors='replace')[-4000:]}")
            (root / "build.seconds").write_text(f"{time.monotonic() - started:.1f}\n")
    return app


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prebuilt = os.environ.get("MEMORIES_TEST_BUNDLE")  # a dist/memories folder, to iterate on the tests locally
    if prebuilt and not in_ci():
        return Path(prebuilt).resolve()
    require(importlib.util.find_spec("PyInstaller") is not None, "pyinstaller (pip install -e '.[dev]')")
    base = tmp_path_factory.getbasetemp()
    # Under pytest-xdist each worker has its own basetemp inside the session's: share that one.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return _build(shared / "app-bundle")


class Frozen:
    """The bundled `memories` with its own data home (like tests.helpers.Cli, for the bundle)."""

    def __init__(self, app: Path, home: Path, extra_env: dict[str, str] | None = None) -> None:
        self.app, self.home = app, home
        self.env = {k: v for k, v in os.environ.items() if k not in ("MEMORIES_HOME", "PYTHONPATH", "PYTHONHOME")}
        self.env.update(TEST_ENV)
        self.env.update(extra_env or {})

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.app / "memories"), "--home", str(self.home), *args],
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
            cwd=self.home.parent,  # not the checkout: nothing may come from the source tree
        )

    def ok(self, *args: str, input: str | None = None) -> dict[str, Any]:
        proc = self.run(*args, "--json", input=input)
        assert proc.returncode == 0, f"{args}: {proc.stdout} {proc.stderr}"
        result: dict[str, Any] = json.loads(proc.stdout)
        assert result.pop("v") == 1
        return result

    def stop(self) -> None:
        self.run("daemon", "stop")


@pytest.fixture
def frozen(bundle: Path, tmp_path: Path) -> Iterator[Frozen]:
    cli = Frozen(bundle, tmp_path / "home", {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    try:
        yield cli
    finally:
        cli.stop()


def test_bundle_runs_the_cli_and_its_engine(frozen: Frozen) -> None:
    """DT-6: from the folder alone, `memories --version` and `status` answer; `init` starts the
    bundled engine (the frozen `memories` honours `-m engine.cli`), and search finds a Chinese
    title (jieba's dictionary is in the bundle)."""
    version = frozen.run("--version")
    assert (version.returncode, version.stdout.strip()) == (0, "memories 0.1.0"), version.stderr
    assert frozen.ok("status") == {"state": "not_running"}
    assert frozen.ok("init", "--password-stdin", input=PASSWORD + "\n")["initialized"] is True
    assert frozen.ok("status")["state"] == "unlocked"
    daemon = frozen.ok("daemon", "status")
    exe = Path(os.readlink(f"/proc/{daemon['pid']}/exe"))
    assert exe == frozen.app / "memories", "the engine runs from the bundle, not from a Python elsewhere"
    put = frozen.ok("put", "--title", "咖啡 flat white", "--body", "Ana takes it without sugar")
    found = frozen.ok("search", "咖啡")
    assert [r["id"] for r in found["results"]] == [put["id"]]
    assert len(frozen.ok("password", "generate", "--words", "5")["password"].split()) >= 1  # the EFF wordlist is bundled
    frozen.ok("lock")
    assert frozen.ok("status") == {"state": "locked"}


def test_bundle_writes_entries_that_start_the_bundled_tray(frozen: Frozen, tmp_path: Path) -> None:
    """DT-6: `memories autostart enable` and `desktop install` run from the bundle write entries
    whose Exec is the bundle's own `memories-tray`, with the templates and icons the bundle carries."""
    require(shutil.which("desktop-file-validate") is not None, "desktop-file-validate (apt: desktop-file-utils)")
    frozen.env["XDG_DATA_HOME"] = str(tmp_path / "data")
    entry = Path(frozen.ok("autostart", "enable")["path"])
    launcher = Path(frozen.ok("desktop", "install")["entry"])
    tray = str(frozen.app / "memories-tray")
    for path in (entry, launcher):
        check = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
        assert (check.returncode, check.stdout + check.stderr) == (0, ""), path.read_text()
        fields = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        assert fields["Exec"].startswith(tray + " --home "), fields["Exec"]
    assert (tmp_path / "data" / "icons" / "hicolor" / "16x16" / "apps" / "memories.png").is_file()
    assert frozen.ok("autostart", "disable")["removed"] is True
    assert frozen.ok("desktop", "uninstall")["removed"] is True


def _find_icon(x: XSession, state: TrayState) -> tuple[int, int] | None:
    image = x.grab()
    colour = PALETTE[state]
    points = [(px, py) for py in range(TRAY_REGION_HEIGHT) for px in range(image.size[0]) if image.getpixel((px, py)) == colour]
    if len(points) < 30:
        return None
    return sum(p[0] for p in points) // len(points), sum(p[1] for p in points) // len(points)


def _wait(what: str, probe: Any, proc: subprocess.Popen[bytes], out: Path, timeout: float = 60) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = probe()
        if found:
            return found
        assert proc.poll() is None, f"the bundled tray exited: {out.read_text(errors='replace')}"
        time.sleep(0.1)
    raise AssertionError(f"{what} never happened: {out.read_text(errors='replace')}")


def test_bundled_tray_docks_under_xvfb_and_quits(frozen: Frozen, tmp_path: Path) -> None:
    """DT-2, DT-6: the bundle's `memories-tray` starts the bundle's engine, docks in a real tray
    host (trayer on Xvfb), shows locked then unlocked as the bundled CLI unlocks, and quits
    (locking the vault) from its dashboard."""
    XSession.require_tools()
    frozen.ok("init", "--password-stdin", input=PASSWORD + "\n")
    frozen.stop()  # the tray must start the engine itself
    x = XSession(tmp_path).start()
    out = tmp_path / "tray.out"
    options = ["--backend", "xorg", "--verbose", "--probe-interval", "0.3", "--probe-deadline", "2"]
    tray = subprocess.Popen(
        [str(frozen.app / "memories-tray"), "--home", str(frozen.home), *options],
        env=x.env(frozen.env),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=open(out, "wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        url = _wait(
            "the dashboard link", lambda: re.search(r"dashboard (http://127\.0\.0\.1:\d+/#\S+)", out.read_text()), tray, out
        )
        assert "memories tray: backend xorg" in out.read_text()
        _wait("the locked icon docked", lambda: _find_icon(x, TrayState.LOCKED), tray, out)
        assert frozen.ok("daemon", "status")["running"] is True, "the bundled tray started the engine"
        frozen.ok("unlock", "--password-stdin", input=PASSWORD + "\n")
        _wait("the unlocked icon", lambda: _find_icon(x, TrayState.UNLOCKED), tray, out)
        x.screenshot(tmp_path / "bundle-tray-unlocked.png")
        port, token = int(url.group(1).split(":")[2].split("/")[0]), url.group(1).split("#", 1)[1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {token}", "Origin": f"http://127.0.0.1:{port}"}
        conn.request("GET", "/api/status", headers=headers)
        status = json.loads(conn.getresponse().read())
        assert status["tray_state"] == "unlocked" and status["desktop"]["backend"] == "xorg"
        conn.request("POST", "/api/quit", body=b"{}", headers=headers)
        assert json.loads(conn.getresponse().read()) == {"quitting": True, "locks": True}
        conn.close()
        assert tray.wait(30) == 0, out.read_text(errors="replace")
        assert frozen.ok("status") == {"state": "locked"}, "quitting the tray locks the vault"
    finally:
        stop_process(tray)
        x.stop()


def test_bundled_gtk_tray_docks_and_logout_locks(frozen: Frozen, tmp_path: Path) -> None:
    """DT-6, DT-4: the GTK backend (with a menu) works from the bundle: its typelibs and GTK's
    own files travel in the folder. The icon docks in trayer, and a logout's SIGTERM quits the
    tray and locks the vault."""
    import signal

    XSession.require_tools()
    require(importlib.util.find_spec("gi") is not None, "PyGObject in the venv when the bundle is built (pip install '.[gtk]')")
    require(shutil.which("dbus-run-session") is not None, "dbus-run-session (apt: dbus)")
    require(shutil.which("dunst") is not None, "a notification daemon (apt: dunst)")
    frozen.ok("init", "--password-stdin", input=PASSWORD + "\n")
    x = XSession(tmp_path).start()
    out = tmp_path / "tray-gtk.out"
    tray = subprocess.Popen(
        [
            *run_session_prefix(tmp_path),
            str(frozen.app / "memories-tray"),
            "--home",
            str(frozen.home),
            "--backend",
            "gtk",
            "--verbose",
        ],
        env=x.env(frozen.env),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=open(out, "wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait("the GTK backend", lambda: "memories tray: backend gtk" in out.read_text(errors="replace"), tray, out)
        _wait("the unlocked icon docked", lambda: _find_icon(x, TrayState.UNLOCKED), tray, out)
        x.screenshot(tmp_path / "bundle-tray-gtk.png")
        # A logout's SIGTERM, to the tray itself (dbus-run-session does not pass signals on).
        pids = [pid for pid, cmd in children_of(tray.pid) if "memories-tray" in cmd]
        assert len(pids) == 1, children_of(tray.pid)
        os.kill(pids[0], signal.SIGTERM)
        tray.wait(30)
        end = time.monotonic() + 30
        while time.monotonic() < end and frozen.ok("status") != {"state": "locked"}:
            time.sleep(0.1)
        assert frozen.ok("status") == {"state": "locked"}, out.read_text(errors="replace")
    finally:
        stop_process(tray)
        x.stop()


def test_bundled_mcp_server_answers_the_official_client(frozen: Frozen) -> None:
    """DT-6, AG-1: `memories mcp` from the bundle (the MCP SDK and its dependencies travel in the
    folder) serves the official MCP client over stdio: tools listed, a write found by search."""
    import asyncio

    from mcp import Client, StdioServerParameters

    from tests.mcp.support import READ_WRITE_TOOLS, result_of

    frozen.ok("init", "--password-stdin", input=PASSWORD + "\n")
    frozen.ok("sudo", "--password-stdin", input=PASSWORD + "\n")
    token = frozen.ok("mcp", "grant", "--name", "bundle-agent", "--scope", "read_write")["token"]
    env = {**frozen.env, "MEMORIES_MCP_TOKEN": token}
    params = StdioServerParameters(
        command=str(frozen.app / "memories"), args=["--home", str(frozen.home), "mcp"], env=env, cwd=str(frozen.home.parent)
    )

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READ_WRITE_TOOLS
            written = result_of(await client.call_tool("memory_write", {"title": "Bundle note", "body": "from the app folder"}))
            found = result_of(await client.call_tool("search", {"query": "bundle"}))
            assert written["id"] in {hit["id"] for hit in found["results"]}

    asyncio.run(scenario())
