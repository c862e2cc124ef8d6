"""DT-6: autostart entries, the app-menu launcher and its icons, installed through the real CLI
(`memories autostart enable|disable`, `memories desktop install|uninstall`, and the older
`memories tray --install-autostart` spelling), checked with desktop-file-validate and
systemd-analyze; the packaging files are found from a checkout and from an installed wheel."""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from desktop import autostart
from desktop.packaging_files import ICON_SIZES
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
    """DT-6: a one-folder build spec, the .desktop templates and Pillow-drawn icons in assets/."""
    packaging = ROOT / "packaging"
    assert not (ROOT / "desktop" / "packaging").exists(), "packaging/ moved to the top level (issue 17)"
    for name in (
        "memories-tray.spec",
        "memories.desktop",
        "memories-tray.desktop",
        "memories-tray.service",
        "com.memories.tray.plist",
    ):
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
    assert _parse_desktop_exec(autostart.desktop_exec(command)) == command
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


# -- `memories autostart enable|disable` and `memories desktop install|uninstall` ---------------


def _memories(cli: Cli, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = _env(cli, tmp)
    env["XDG_DATA_HOME"] = str(tmp / "data")
    return subprocess.run(cli.command(*args), env=env, capture_output=True, text=True, timeout=60)


def _ok(cli: Cli, tmp: Path, *args: str) -> dict[str, Any]:
    proc = _memories(cli, tmp, *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    assert result.pop("v") == 1
    return result


def _validate(path: Path) -> None:
    """desktop-file-validate passes the file with nothing to say (no error, warning or hint)."""
    require(shutil.which("desktop-file-validate") is not None, "desktop-file-validate (apt: desktop-file-utils)")
    check = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    assert (check.returncode, check.stdout + check.stderr) == (0, ""), path.read_text()


def test_autostart_enable_and_disable_write_a_valid_xdg_entry(cli: Cli, tmp_path: Path) -> None:
    """DT-6: `memories autostart enable` writes an XDG autostart entry that desktop-file-validate
    accepts and that starts this install's tray with --home; `disable` removes exactly it."""
    entry = tmp_path / "cfg" / "autostart" / "memories-tray.desktop"
    done = _ok(cli, tmp_path, "autostart", "enable")
    assert done == {"kind": "xdg", "path": str(entry), "enabled": True}
    _validate(entry)
    exec_value = next(line.split("=", 1)[1] for line in entry.read_text().splitlines() if line.startswith("Exec="))
    assert _parse_desktop_exec(exec_value) == autostart.tray_command(cli.home)
    status = _ok(cli, tmp_path, "autostart", "status")
    assert {"kind": "xdg", "path": str(entry), "enabled": True} in status["entries"]
    assert _ok(cli, tmp_path, "autostart", "enable") == done  # again: same entry, still valid
    _validate(entry)
    assert _ok(cli, tmp_path, "autostart", "disable") == {"kind": "xdg", "path": str(entry), "removed": True}
    assert not entry.exists() and entry.parent.is_dir()
    assert _ok(cli, tmp_path, "autostart", "disable")["removed"] is False
    text = _memories(cli, tmp_path, "autostart", "disable")
    assert text.returncode == 0 and "No login entry to remove" in text.stdout


def test_autostart_systemd_unit_passes_systemd_analyze(cli: Cli, tmp_path: Path) -> None:
    """DT-6: `memories autostart enable --kind systemd` writes a user unit that `systemd-analyze
    verify` accepts, even for a --home with spaces, quotes, $ and %. systemd-analyze comes with
    systemd, which a CI container may lack: then this part skips (also under CI) and says so."""
    home = tmp_path / 'data $HOME 100% "q"'
    weird = Cli(home=home)
    unit = tmp_path / "cfg" / "systemd" / "user" / "memories-tray.service"
    assert _ok(weird, tmp_path, "autostart", "enable", "--kind", "systemd")["path"] == str(unit)
    assert "ExecStart=" in unit.read_text() and "WantedBy=graphical-session.target" in unit.read_text()
    exec_value = next(line.split("=", 1)[1] for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    assert _parse_systemd_exec(exec_value) == autostart.tray_command(home)
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (package systemd); the unit's quoting is checked above")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    check = subprocess.run([analyze, "verify", "--user", str(unit)], capture_output=True, text=True, env=env, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _ok(weird, tmp_path, "autostart", "disable", "--kind", "systemd")["removed"] is True


def test_desktop_install_adds_a_valid_launcher_and_icons_in_every_size(cli: Cli, tmp_path: Path) -> None:
    """DT-6: `memories desktop install` writes $XDG_DATA_HOME/applications/memories.desktop
    (valid, Icon=memories, starting this install's tray) and the hicolor icons in all sizes
    plus the SVG; `desktop uninstall` removes exactly those files; both can be repeated."""
    from PIL import Image

    data = tmp_path / "data"
    launcher = data / "applications" / "memories.desktop"
    done = _ok(cli, tmp_path, "desktop", "install")
    assert done["entry"] == str(launcher)
    _validate(launcher)
    fields = dict(line.split("=", 1) for line in launcher.read_text().splitlines() if "=" in line)
    assert fields["Icon"] == "memories" and fields["Terminal"] == "false"
    assert _parse_desktop_exec(fields["Exec"]) == autostart.tray_command(cli.home)
    assert Path(_parse_desktop_exec(fields["TryExec"])[0]).is_file()
    hicolor = data / "icons" / "hicolor"
    for size in ICON_SIZES:
        with Image.open(hicolor / f"{size}x{size}" / "apps" / "memories.png") as icon:
            assert (icon.format, icon.size, icon.mode) == ("PNG", (size, size), "RGBA")
    assert (hicolor / "scalable" / "apps" / "memories.svg").read_text().startswith("<?xml")
    assert sorted(done["icons"]) == sorted(str(p) for p in hicolor.rglob("memories.*"))
    if shutil.which("update-desktop-database"):
        assert "update-desktop-database" in done["refreshed"]
    assert not (hicolor / "icon-theme.cache").exists(), "a new icon cache would hide other apps' icons"
    assert _ok(cli, tmp_path, "desktop", "install")["entry"] == str(launcher)
    gone = _ok(cli, tmp_path, "desktop", "uninstall")
    assert gone["removed"] is True and len(gone["icons"]) == len(ICON_SIZES) + 1
    assert not launcher.exists() and not list(hicolor.rglob("memories.*"))
    assert _ok(cli, tmp_path, "desktop", "uninstall") == {"entry": str(launcher), "removed": False, "icons": []}


def test_committed_icons_are_the_drawing_at_each_size(tmp_path: Path) -> None:
    """DT-6: packaging/icons is what packaging/make_icons.py draws today (within a few levels
    per pixel, for Pillow's antialiasing between versions), so the icons cannot go stale."""
    from PIL import Image, ImageChops, ImageStat

    subprocess.run([sys.executable, str(ROOT / "packaging" / "make_icons.py"), str(tmp_path)], check=True, capture_output=True)
    committed = ROOT / "packaging" / "icons" / "hicolor"
    for size in ICON_SIZES:
        rel = Path(f"{size}x{size}") / "apps" / "memories.png"
        with Image.open(committed / rel) as old, Image.open(tmp_path / "hicolor" / rel) as new:
            assert old.size == new.size == (size, size)
            diff = ImageStat.Stat(ImageChops.difference(old.convert("RGBA"), new.convert("RGBA"))).mean
            assert max(diff) < 4, (size, diff)
    svg = (committed / "scalable" / "apps" / "memories.svg").read_text()
    assert svg == (tmp_path / "hicolor" / "scalable" / "apps" / "memories.svg").read_text()


def test_a_wheel_carries_the_templates_and_icons(tmp_path: Path) -> None:
    """DT-6: from an installed wheel (no checkout on the path), the desktop code finds the
    packaging files where the wheel put them (<prefix>/share/memories/packaging)."""
    # setuptools builds inside the source tree, so the wheel is built from a copy of it.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("engine", "desktop", "assets", "packaging"):
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    wheel = next(wheels.glob("memories-*.whl"))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # The desktop modules used here need only the standard library, so no dependency is installed.
    probe = (
        "import json, desktop; from desktop import app_menu, autostart, packaging_files as p;"
        "print(json.dumps([desktop.__file__, str(p.packaging_dir()), len(p.hicolor_icons()),"
        " autostart.render_entry('systemd', None), app_menu.render(None)]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    module, found, icons, unit, launcher = json.loads(out.stdout)
    assert module.startswith(str(venv)) and found == str(venv / "share" / "memories" / "packaging")
    assert icons == len(ICON_SIZES) + 1
    assert "ExecStart=" in unit and "Icon=memories" in launcher
    # Issue 32: the installed `memories` starts at the lean entry module and runs from the wheel.
    script = venv / "bin" / "memories"
    assert script.read_text().startswith(f"#!{venv}")
    assert "from engine.cli.entry import run" in script.read_text()
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("memories "), version.stderr


def test_json_shapes_of_the_install_commands_are_pinned(cli: Cli, tmp_path: Path) -> None:
    """Issue 19 for these commands: their --json key sets are the ones in tests/data/cli_json_shapes.json."""
    from tests.integration.test_cli_json_shapes import FIXTURE, shape

    pinned = json.loads(FIXTURE.read_text())["shapes"]
    for args in (
        ("autostart", "enable"),
        ("autostart", "status"),
        ("autostart", "disable"),
        ("desktop", "install"),
        ("desktop", "uninstall"),
    ):
        proc = _memories(cli, tmp_path, *args, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert shape(json.loads(proc.stdout)) == pinned[" ".join(args)], args


def test_an_install_without_packaging_files_gets_a_typed_error(tmp_path: Path) -> None:
    """API-8 for DT-6: desktop code with no packaging/ beside it and none in its prefix refuses
    with io_error and a sentence that says what to do, writing no launcher."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "desktop", source / "desktop", ignore=shutil.ignore_patterns("__pycache__"))
    (source / "engine").mkdir()
    for name in ("__init__.py", "errors.py", "launch.py"):  # what desktop imports from the engine package
        shutil.copy2(ROOT / "engine" / name, source / "engine" / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    probe = (
        "import json; from desktop import app_menu; from engine.errors import MemoriesError\n"
        "try:\n    app_menu.install(None)\nexcept MemoriesError as exc:\n    print(json.dumps([exc.code, exc.message]))\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(source), "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert out.returncode == 0, out.stderr
    code, message = json.loads(out.stdout)
    assert code == "io_error" and "reinstall Memories" in message
    assert not (tmp_path / "data").exists()


def test_autostart_status_lists_only_this_platforms_entries(cli: Cli, tmp_path: Path) -> None:
    """A Linux user asked for their login entries sees XDG and systemd, not a LaunchAgent
    path under ~/Library or a Windows Startup folder."""
    kinds = [e["kind"] for e in _ok(cli, tmp_path, "autostart", "status")["entries"]]
    assert kinds == list(autostart.platform_kinds())
    if sys.platform.startswith("linux"):
        assert kinds == ["xdg", "systemd"]
