"""Tray icons drawn with Pillow, one per state (SPEC DT-4).

Each state has a distinct colour *and* a distinct glyph, so the states differ for
colour-blind users and in monochrome panels too. The same drawing produces the PNGs in
``assets/icons/`` (``python -m desktop.tray.icons assets/icons``) used by packaging.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

from desktop.status import Badges, TrayState

__all__ = ["render", "PALETTE", "BADGE_TICKET", "BADGE_SYNC", "write_assets"]

SIZE = 64

# state -> RGB fill of the disc. Tests locate the docked icon by these exact colours.
PALETTE: dict[TrayState, tuple[int, int, int]] = {
    TrayState.NOT_RUNNING: (120, 120, 120),
    TrayState.NOT_RESPONDING: (200, 40, 40),
    TrayState.LOCKED: (40, 90, 200),
    TrayState.UNLOCKED: (30, 160, 70),
    TrayState.BUSY: (230, 160, 20),
    TrayState.ATTENTION: (220, 60, 160),
}
_INK = (255, 255, 255, 255)
# Badges (issue 17), each its own colour *and* shape and corner: tests look for these exact colours.
BADGE_TICKET: tuple[int, int, int] = (255, 204, 0)  # yellow disc, top right: tickets wait for approval
BADGE_SYNC: tuple[int, int, int] = (255, 96, 0)  # orange triangle, bottom right: the last sync failed
_OUTLINE = (20, 20, 20, 255)


def render(state: TrayState, size: int = SIZE, badges: Badges | None = None) -> Image.Image:
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    pad = max(1, size // 32)
    draw.ellipse((pad, pad, size - pad - 1, size - pad - 1), fill=(*PALETTE[state], 255))
    _GLYPHS[state](draw, size)
    if badges is not None and badges.tickets:
        r = size * 0.17
        cx, cy = size - r - 1, r + 1
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=(*BADGE_TICKET, 255), outline=_OUTLINE, width=max(1, size // 64))
    if badges is not None and badges.sync_problem:
        s = size
        draw.polygon([(s * 0.64, s - 1), (s - 1, s - 1), (s * 0.82, s * 0.64)], fill=(*BADGE_SYNC, 255), outline=_OUTLINE)
    return img


def _padlock(draw: ImageDraw.ImageDraw, s: int, open_: bool) -> None:
    w = max(2, s // 16)
    body = (s * 0.30, s * 0.46, s * 0.70, s * 0.76)
    draw.rectangle(body, fill=_INK)
    shift = s * 0.12 if open_ else 0
    draw.arc((s * 0.36 + shift, s * 0.22, s * 0.64 + shift, s * 0.56), 180, 360, fill=_INK, width=w)
    draw.line((s * 0.36 + shift, s * 0.39, s * 0.36 + shift, s * 0.47), fill=_INK, width=w)
    if not open_:
        draw.line((s * 0.64, s * 0.39, s * 0.64, s * 0.47), fill=_INK, width=w)


def _cross(draw: ImageDraw.ImageDraw, s: int) -> None:
    w = max(2, s // 10)
    draw.line((s * 0.32, s * 0.32, s * 0.68, s * 0.68), fill=_INK, width=w)
    draw.line((s * 0.68, s * 0.32, s * 0.32, s * 0.68), fill=_INK, width=w)


def _pause(draw: ImageDraw.ImageDraw, s: int) -> None:
    draw.rectangle((s * 0.34, s * 0.30, s * 0.44, s * 0.70), fill=_INK)
    draw.rectangle((s * 0.56, s * 0.30, s * 0.66, s * 0.70), fill=_INK)


def _dots(draw: ImageDraw.ImageDraw, s: int) -> None:
    r = s * 0.06
    for cx in (0.30, 0.50, 0.70):
        draw.ellipse((s * cx - r, s * 0.5 - r, s * cx + r, s * 0.5 + r), fill=_INK)


def _bang(draw: ImageDraw.ImageDraw, s: int) -> None:
    draw.rectangle((s * 0.45, s * 0.24, s * 0.55, s * 0.60), fill=_INK)
    draw.rectangle((s * 0.45, s * 0.66, s * 0.55, s * 0.76), fill=_INK)


_GLYPHS = {
    TrayState.NOT_RUNNING: _pause,
    TrayState.NOT_RESPONDING: _cross,
    TrayState.LOCKED: lambda d, s: _padlock(d, s, open_=False),
    TrayState.UNLOCKED: lambda d, s: _padlock(d, s, open_=True),
    TrayState.BUSY: _dots,
    TrayState.ATTENTION: _bang,
}


def write_assets(directory: Path) -> list[Path]:
    """Write ``memories-<state>.png`` (64 px) and ``memories.png`` (256 px, the app icon)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for state in TrayState:
        path = directory / f"memories-{state.value}.png"
        render(state).save(path)
        written.append(path)
    app = directory / "memories.png"
    render(TrayState.UNLOCKED, 256).save(app)
    written.append(app)
    return written


if __name__ == "__main__":
    for p in write_assets(Path(sys.argv[1] if len(sys.argv) > 1 else "assets/icons")):
        print(p)
