"""DT-6: autostart entries, the .desktop file and icons, installed through the real CLI."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from desktop import autostart
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


def _parse_desktop_exec(value: str) -> list[str]:
    """Read an Exec= value back as the Desktop Entry spec says a launcher does."""
    unescaped, i = [], 0
    while i < len(value):  # general string escapes first
        if value[i] == "\\" and i + 1 < len(value):
            unescaped.append({"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(value[i + 1], "\\" + value[i + 1]))
            i += 2
        else:
            unescaped.append(value[i])
            i += 1
    text = "".join(unescaped)
    assert "%" not in text.replace("%%", ""), "a bare % would be read as a field code"
    # Then the quoting rule: inside double quotes, \\ escapes one of " ` $ \\.
    return _split_quoted(text.replace("%%", "%"), {c: c for c in '"`$\\'})


def _parse_systemd_exec(value: str) -> list[str]:
    """Read an ExecStart= value back (quotes with C escapes; $$ and %% are literal)."""
    assert "$" not in value.replace("$$", "") and "%" not in value.replace("%%", "")
    return _split_quoted(value.replace("$$", "$").replace("%%", "%"), {"\\": "\\", '"': '"', "n": "\n"})


def _split_quoted(text: str, escapes: dict[str, str]) -> list[str]:
    """Split on unquoted spaces; inside double quotes a backslash escape from ``escapes`` is one character."""
    args: list[str] = []
    current: list[str] | None = None
    quoted, i = False, 0
    while i < len(text):
        c = text[i]
        if quoted and c == "\\":
            assert text[i + 1] in escapes, f"undefined escape in {text!r}"
            current = (current or []) + [escapes[text[i + 1]]]
            i += 2
            continue
        if c == '"':
            quoted = not quoted
            current = current or []
        elif c == " " and not quoted:
            if current is not None:
                args.append("".join(current))
            current = None
        else:
            assert quoted or c not in '"`$\\', f"reserved character outside quotes in {text!r}"
            current = (current or []) + [c]
        i += 1
    assert not quoted, f"unterminated quote in {text!r}"
    if current is not None:
        args.append("".join(current))
    return args


_HOSTILE = ["/tmp/a b", '/tmp/q"uote', "/tmp/$HOME`id`", "/tmp/100%d %%", "/tmp/back\\slash", "/tmp/new\nline", "/tmp/t\tab'"]


@given(st.sampled_from(_HOSTILE) | st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30))
def test_exec_lines_carry_any_home_path_unchanged(home: str) -> None:
    """DT-6: a --home path with spaces, quotes, $, `, %, backslashes or newlines reaches the tray as one
    unchanged argument: nothing in it is expanded by the launcher or by systemd."""
    command = autostart.tray_command(Path(home))
    assert _parse_desktop_exec(autostart._desktop_exec(command)) == command
    assert _parse_systemd_exec(autostart._systemd_exec(command)) == command


def test_hostile_home_still_gives_a_valid_desktop_file(tmp_path: Path) -> None:
    require(shutil.which("desktop-file-validate") is not None, "desktop-file-validate (apt: desktop-file-utils)")
    for home in _HOSTILE:
        entry = tmp_path / "memories-tray.desktop"
        entry.write_text(autostart.render_entry("xdg", Path(home)))
        check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
        assert check.returncode == 0, (home, check.stdout + check.stderr)
        exec_value = next(line.split("=", 1)[1] for line in entry.read_text().splitlines() if line.startswith("Exec="))
        assert _parse_desktop_exec(exec_value)[-1] == str(Path(home))
