"""The app-menu launcher (SPEC DT-6): ``memories.desktop`` and the hicolor app icons,
installed for this user the freedesktop way.

``install`` writes ``$XDG_DATA_HOME/applications/memories.desktop`` (default
``~/.local/share``), filled with the command that starts this install's tray, and copies
``icons/hicolor/<size>/apps/memories.*`` from ``packaging/`` into
``$XDG_DATA_HOME/icons/hicolor/``; then it refreshes the menu cache with
``update-desktop-database`` and an existing icon cache with ``gtk-update-icon-cache``
where those tools exist (a desktop without them rescans on its own). ``uninstall`` removes exactly those files. Both may be
run again at any time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from desktop.autostart import desktop_exec, tray_command
from desktop.packaging_files import hicolor_icons, read_template
from engine.errors import MemoriesError

__all__ = ["MenuEntry", "data_home", "entry_path", "render", "install", "uninstall", "installed"]

ENTRY_NAME = "memories.desktop"


@dataclass
class MenuEntry:
    """What install or uninstall touched: the launcher, the icon files, the caches refreshed."""

    entry: Path
    icons: list[Path] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)


def _check_platform() -> None:
    if sys.platform in ("win32", "darwin"):
        raise MemoriesError(
            "unsupported_platform",
            "An app-menu launcher is a Linux desktop (freedesktop) thing; on this system use the app bundle or "
            "`memories autostart enable`.",
        )


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def entry_path() -> Path:
    return data_home() / "applications" / ENTRY_NAME


def render(home: Path | None) -> str:
    command = tray_command(home)
    text = read_template(ENTRY_NAME)
    # TryExec hides the launcher once this install is gone (a deleted venv or bundle).
    return text.replace("{exec}", desktop_exec(command)).replace("{tryexec}", desktop_exec(command[:1]))


def _icon_targets() -> list[tuple[Path, Path]]:
    theme = data_home() / "icons" / "hicolor"
    return [(source, theme / size / "apps" / source.name) for size, source in hicolor_icons()]


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # never a half-written file where the desktop reads it


def _refresh_caches() -> list[str]:
    """Run the cache tools that exist; a missing or failing one is not an error (menus rescan).

    The icon cache is rebuilt only where one already exists: a new ``icon-theme.cache`` in
    the user's hicolor folder would hide the icons other apps add later without updating it,
    and without a cache GTK reads the folder itself.
    """
    ran = []
    hicolor = data_home() / "icons" / "hicolor"
    tools = [("update-desktop-database", [str(data_home() / "applications")])]
    if (hicolor / "icon-theme.cache").is_file():
        tools.append(("gtk-update-icon-cache", ["--quiet", "--force", "--ignore-theme-index", str(hicolor)]))
    for tool, args in tools:
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            done = subprocess.run([exe, *args], capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            ran.append(tool)
    return ran


def install(home: Path | None) -> MenuEntry:
    _check_platform()
    text = render(home)
    targets = _icon_targets()
    if not targets:
        raise MemoriesError("io_error", "This installation ships no app icons; reinstall Memories.")
    result = MenuEntry(entry_path())
    for source, target in targets:
        _write(target, source.read_bytes())
        result.icons.append(target)
    _write(result.entry, text.encode("utf-8"))  # last: the launcher appears with its icon in place
    result.refreshed = _refresh_caches()
    return result


def installed() -> bool:
    return entry_path().is_file()


def uninstall() -> MenuEntry | None:
    """Remove the launcher and the icons install wrote; None when there was no launcher."""
    _check_platform()
    entry = entry_path()
    had_entry = entry.is_file()
    entry.unlink(missing_ok=True)
    removed = MenuEntry(entry)
    for _source, target in _icon_targets():
        if target.is_file():
            target.unlink()
            removed.icons.append(target)
    if not had_entry and not removed.icons:
        return None
    removed.refreshed = _refresh_caches()
    return removed
