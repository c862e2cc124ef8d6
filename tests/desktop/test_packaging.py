"""DT-6: autostart entries, the .desktop file and icons, installed through the real CLI."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
from pathlib import Path

from tests.helpers import Cli, require

ROOT = Path(__file__).resolve().parents[2]


def _env(cli: Cli, tmp: Path) -> dict[str, str]:
    env = cli.environ()
    env.update({"HOME": str(tmp), "XDG_CONFIG_HOME": str(tmp / "cfg"), "APPDATA": str(tmp / "appdata")})
    return env


def _run(cli: Cli, tmp: Path, *args: str) -> str:
    proc = subprocess.run(cli.command("tray", *args), env=_env(cli, tmp), capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


def test_xdg_autostart_entry_round_trip(cli: Cli, tmp_path: Path) -> None:
    """DT-6: XDG autostart entry: valid desktop file, runs this install's tray with --home."""
    out = _run(cli, tmp_path, "--install-autostart", "xdg")
    entry = tmp_path / "cfg" / "autostart" / "memories-tray.desktop"
    assert str(entry) in out
    text = entry.read_text()
    assert "-m desktop.tray.launcher --home" in text and str(cli.home) in text
    icon = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("Icon="))
    assert Path(icon).is_file()
    require(shutil.which("desktop-file-validate") is not None, "desktop-file-validate (apt: desktop-file-utils)")
    check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    _run(cli, tmp_path, "--install-autostart", "xdg")  # idempotent
    assert "removed" in _run(cli, tmp_path, "--remove-autostart", "xdg")
    assert not entry.exists()
    assert "no autostart entry" in _run(cli, tmp_path, "--remove-autostart", "xdg")


def test_systemd_launchagent_and_windows_entries(cli: Cli, tmp_path: Path) -> None:
    """DT-6: systemd user unit, macOS LaunchAgent and Windows Startup entries render correctly."""
    _run(cli, tmp_path, "--install-autostart", "systemd")
    unit = (tmp_path / "cfg" / "systemd" / "user" / "memories-tray.service").read_text()
    assert "ExecStart=" in unit and "desktop.tray.launcher" in unit and "WantedBy=graphical-session.target" in unit
    _run(cli, tmp_path, "--install-autostart", "launchagent")
    plist = plistlib.loads((tmp_path / "Library" / "LaunchAgents" / "com.memories.tray.plist").read_bytes())
    assert plist["RunAtLoad"] is True and plist["ProgramArguments"][-2:] == ["--home", str(cli.home)]
    _run(cli, tmp_path, "--install-autostart", "windows")
    startup = tmp_path / "appdata" / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup"
    assert "desktop.tray.launcher" in (startup / "memories-tray.cmd").read_text()


def test_packaging_files_and_icons_exist() -> None:
    """DT-6: a one-folder build spec, a .desktop template and Pillow-drawn icons in assets/."""
    packaging = ROOT / "desktop" / "packaging"
    for name in ("memories-tray.spec", "memories-tray.desktop", "memories-tray.service", "com.memories.tray.plist"):
        assert (packaging / name).is_file(), name
    icons = sorted(p.name for p in (ROOT / "assets" / "icons").glob("memories*.png"))
    assert "memories.png" in icons and "memories-locked.png" in icons
    assert os.access(packaging / "memories-tray.spec", os.R_OK)
