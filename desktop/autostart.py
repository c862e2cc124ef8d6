"""Autostart entries for the tray (SPEC DT-6): XDG autostart or a systemd user unit on
Linux, a LaunchAgent on macOS, the Startup folder on Windows.

Templates live in the top-level ``packaging/`` folder (found by
:mod:`desktop.packaging_files` in a checkout, a wheel or the app bundle); they are filled
with the command that starts this install's tray (and ``--home`` if one was given).
Installing twice is harmless; removing deletes only the file this module writes.
"""

from __future__ import annotations

import os
import plistlib
import sys
from importlib import resources
from pathlib import Path

from desktop.packaging_files import read_template
from engine.errors import MemoriesError
from engine.launch import python_command

__all__ = [
    "enable_entry",
    "disable_entry",
    "entries_status",
    "KINDS",
    "default_kind",
    "platform_kinds",
    "tray_command",
    "entry_path",
    "render_entry",
    "desktop_exec",
    "install",
    "remove",
    "installed",
]

KINDS = ("xdg", "systemd", "launchagent", "windows")
_TEMPLATES = {
    "xdg": "memories-tray.desktop",
    "systemd": "memories-tray.service",
    "launchagent": "com.memories.tray.plist",
    "windows": "memories-tray.cmd",
}


def default_kind() -> str:
    if sys.platform == "darwin":
        return "launchagent"
    if sys.platform == "win32":
        return "windows"
    return "xdg"


def platform_kinds() -> tuple[str, ...]:
    """The kinds of login entry this platform reads (Linux: XDG autostart or a systemd user unit)."""
    if sys.platform in ("darwin", "win32"):
        return (default_kind(),)
    return ("xdg", "systemd")


def tray_command(home: Path | None) -> list[str]:
    """This install's tray: ``python -P -m desktop.tray.launcher``, or in the app bundle the
    ``memories-tray`` executable beside whichever of the two is running (the CLI writes entries too)."""
    if getattr(sys, "frozen", False):
        name = "memories-tray.exe" if sys.platform == "win32" else "memories-tray"
        base = [str(Path(sys.executable).resolve().with_name(name))]
    else:
        # -P: the entry starts with the session's working directory (usually $HOME);
        # nothing from it may be imported (SPEC ST-11, engine/launch.py).
        base = python_command("desktop.tray.launcher")
    return base + (["--home", str(home)] if home is not None else [])


def entry_path(kind: str) -> Path:
    home = Path.home()
    if kind == "xdg":
        config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        return config / "autostart" / "memories-tray.desktop"
    if kind == "systemd":
        config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        return config / "systemd" / "user" / "memories-tray.service"
    if kind == "launchagent":
        return home / "Library" / "LaunchAgents" / "com.memories.tray.plist"
    if kind == "windows":
        appdata = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
        return appdata / "Microsoft" / "Windows" / "Start Menu" / "Programs" / "Startup" / "memories-tray.cmd"
    raise MemoriesError("invalid_input", f"Unknown autostart kind; use one of {', '.join(KINDS)}.")


def desktop_exec(args: list[str]) -> str:
    """An ``Exec=`` value by the Desktop Entry spec ("The Exec key").

    An argument with a reserved character is double-quoted with ``"`` `` ` `` ``$`` ``\\``
    backslash-escaped; the general string escaping (a backslash becomes ``\\\\``) applies on
    top of that, and a literal ``%`` is written ``%%`` (field codes).
    """
    out = []
    for arg in args:
        if arg and not any(c in arg for c in " \t\n\"'\\><~|&;$*?#()`%="):
            out.append(arg)
        else:
            out.append('"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"')
    # String escaping of the whole value: backslash first, then the control characters.
    value = " ".join(out).replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return value.replace("%", "%%")


def _systemd_exec(args: list[str]) -> str:
    """An ``ExecStart=`` value (systemd.service "Command lines"): every argument double-quoted
    with ``\\`` and ``"`` escaped; ``$`` would expand a variable and ``%`` a specifier, so both
    are doubled."""
    quoted = ('"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"' for arg in args)
    return " ".join(quoted).replace("$", "$$").replace("%", "%%")


def _icon_path() -> str:
    try:
        return str(resources.files("assets") / "icons" / "memories.png")
    except (ModuleNotFoundError, TypeError):
        return "memories"


def render_entry(kind: str, home: Path | None) -> str:
    template = read_template(_TEMPLATES[kind])
    command = tray_command(home)
    if kind == "launchagent":
        args = "\n".join(f"    <string>{_xml(a)}</string>" for a in command)
        text = template.replace("{program_arguments}", args)
        plistlib.loads(text.encode("utf-8"))  # never write a plist launchd cannot read
        return text
    if kind == "windows":
        return template.replace("{exec}", " ".join(f'"{a}"' for a in command)).replace("\n", "\r\n")
    exec_line = desktop_exec(command) if kind == "xdg" else _systemd_exec(command)
    return template.replace("{exec}", exec_line).replace("{icon}", _icon_path())


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def install(kind: str, home: Path | None) -> Path:
    path = entry_path(kind)
    text = render_entry(kind, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)  # never a half-written entry
    return path


def installed(kind: str) -> bool:
    return entry_path(kind).is_file()


def remove(kind: str) -> Path | None:
    path = entry_path(kind)
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path


# -- the answers the CLI (through desktop/tray/launcher.py) and the dashboard's Settings page give


def enable_entry(kind: str, home: Path | None) -> dict[str, object]:
    """Write the login entry of ``kind`` ("auto": this platform's) that starts this install's tray."""
    chosen = default_kind() if kind == "auto" else kind
    return {"kind": chosen, "path": str(install(chosen, home)), "enabled": True}


def disable_entry(kind: str) -> dict[str, object]:
    chosen = default_kind() if kind == "auto" else kind
    removed = remove(chosen)
    return {"kind": chosen, "path": str(entry_path(chosen)), "removed": removed is not None}


def entries_status() -> dict[str, list[dict[str, object]]]:
    """The entry path of each kind this platform reads, and whether it exists."""
    return {"entries": [{"kind": kind, "path": str(entry_path(kind)), "enabled": installed(kind)} for kind in platform_kinds()]}
