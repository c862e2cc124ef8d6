"""Draw the app icon of the app menu into a hicolor icon-theme tree (SPEC DT-6).

    .venv/bin/python packaging/make_icons.py [OUT]      (default: packaging/icons)

writes OUT/hicolor/<N>x<N>/apps/memories.png for every size in
desktop.packaging_files.ICON_SIZES and OUT/hicolor/scalable/apps/memories.svg. The PNGs are
the tray's own "unlocked" icon (desktop/tray/icons.py) drawn with Pillow at each size
rather than scaled from one picture, so a 16 px icon stays sharp; the SVG is the same
drawing written as vector shapes. The results are committed; tests/desktop/test_packaging.py
redraws them and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from desktop.packaging_files import ICON_SIZES  # noqa: E402
from desktop.status import TrayState  # noqa: E402
from desktop.tray.icons import PALETTE, render  # noqa: E402


def svg() -> str:
    """The 64-unit drawing of desktop/tray/icons.py (disc, open padlock) as SVG shapes."""
    s = 64.0
    red, green, blue = PALETTE[TrayState.UNLOCKED]
    shift = s * 0.12  # the open shackle sits to the right, as in _padlock(open_=True)
    left, right, top, bottom = s * 0.36 + shift, s * 0.64 + shift, s * 0.22, s * 0.56
    cy, rx, ry = (top + bottom) / 2, (right - left) / 2, (bottom - top) / 2
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">\n'
        f'  <circle cx="32" cy="32" r="30" fill="rgb({red},{green},{blue})"/>\n'
        f'  <rect x="{s * 0.30:g}" y="{s * 0.46:g}" width="{s * 0.40:g}" height="{s * 0.30:g}" fill="#fff"/>\n'
        f'  <path d="M {left:g} {cy:g} A {rx:g} {ry:g} 0 0 1 {right:g} {cy:g}" fill="none" stroke="#fff" stroke-width="4"/>\n'
        f'  <line x1="{left:g}" y1="{s * 0.39:g}" x2="{left:g}" y2="{s * 0.47:g}" stroke="#fff" stroke-width="4"/>\n'
        "</svg>\n"
    )


def write(out: Path) -> list[Path]:
    written = []
    for size in ICON_SIZES:
        path = out / "hicolor" / f"{size}x{size}" / "apps" / "memories.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        render(TrayState.UNLOCKED, size).save(path, optimize=True)
        written.append(path)
    path = out / "hicolor" / "scalable" / "apps" / "memories.svg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg(), "utf-8")
    written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "packaging" / "icons"):
        print(written_path)
