"""Where this install keeps its packaging files (SPEC DT-6): the autostart and app-menu
templates and the hicolor icons of the repository's top-level ``packaging/`` folder.

``packaging/`` is a folder, not a Python package (as one it would shadow PyPA's
``packaging``), so it is found by path, in whichever of three installs this is:

- the one-folder app build: ``packaging/`` inside the bundle (PyInstaller's ``sys._MEIPASS``);
- a source checkout or editable install: ``packaging/`` beside ``desktop/``;
- a wheel: the files travel as data files to ``<prefix>/share/memories/packaging`` (see
  ``[tool.setuptools.data-files]`` in pyproject.toml), under the venv's or system prefix
  or the user scheme (``pip install --user``).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["packaging_dir", "read_template", "ICON_SIZES", "hicolor_icons"]

# The file every location must hold to count (a stray empty folder is not an install).
_MARKER = "memories-tray.desktop"
_DATA_SUBDIR = Path("share") / "memories" / "packaging"

# Sizes of the app icon in packaging/icons/hicolor/<N>x<N>/apps/memories.png (the icon theme
# spec's usual set); packaging/make_icons.py draws them and scalable/ holds the SVG.
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256)


def _candidates() -> list[Path]:
    found: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and bundle:
        found.append(Path(bundle) / "packaging")
    found.append(Path(__file__).resolve().parent.parent / "packaging")
    for scheme in dict.fromkeys((sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user"))):
        try:
            found.append(Path(sysconfig.get_path("data", scheme)) / _DATA_SUBDIR)
        except KeyError:  # a scheme this Python does not define
            continue
    return found


def packaging_dir() -> Path:
    """The first location that holds the packaging files; a typed error when none does."""
    for candidate in _candidates():
        if (candidate / _MARKER).is_file():
            return candidate
    raise MemoriesError(
        "io_error", "This installation has no packaging files (autostart and app-menu templates); reinstall Memories."
    )


def read_template(name: str) -> str:
    return (packaging_dir() / name).read_text("utf-8")


def hicolor_icons() -> list[tuple[str, Path]]:
    """(theme size folder, file) for each app icon this install ships: ``48x48`` or ``scalable``."""
    root = packaging_dir() / "icons" / "hicolor"
    icons = [(f"{n}x{n}", root / f"{n}x{n}" / "apps" / "memories.png") for n in ICON_SIZES]
    icons.append(("scalable", root / "scalable" / "apps" / "memories.svg"))
    return [(size, path) for size, path in icons if path.is_file()]
