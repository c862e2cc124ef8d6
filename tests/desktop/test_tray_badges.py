"""Issue 17 (DT-4): the tray icon's badges for tickets waiting for approval and for a failed
sync: drawn distinctly (pixels), read from a real engine, and shown by the docked icon under
Xvfb with a real tray host."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from desktop.status import Badges, TrayState, sync_problem, tooltip_text
from desktop.tray.badges import read_badges
from desktop.tray.icons import BADGE_SYNC, BADGE_TICKET, PALETTE, render
from engine.config import Paths
from tests.desktop.support import XSession
from tests.desktop.test_tray_x11 import TRAY_REGION_HEIGHT, Tray
from tests.helpers import Cli


def _count(image: Any, colour: tuple[int, int, int], box: tuple[int, int, int, int], tolerance: int = 0) -> int:
    """Pixels of ``colour`` in ``box`` (each channel within ``tolerance``: the tray host scales the icon)."""
    rgb = image.convert("RGB")
    x0, y0, x1, y1 = box

    def near(p: tuple[int, int, int]) -> bool:
        return all(abs(a - b) <= tolerance for a, b in zip(p, colour, strict=True))

    return sum(1 for y in range(y0, y1) for x in range(x0, x1) if near(rgb.getpixel((x, y))))


def test_badges_are_drawn_distinctly() -> None:
    """Issue 17: a ticket badge (yellow disc, top right) and a sync badge (orange triangle,
    bottom right), each absent without its cause; the state's disc stays recognisable."""
    for state in TrayState:
        plain = render(state)
        both = render(state, badges=Badges(tickets=2, sync_problem=True))
        top_right, bottom_right = (40, 0, 64, 24), (40, 40, 64, 64)
        assert _count(plain, BADGE_TICKET, (0, 0, 64, 64)) == 0 and _count(plain, BADGE_SYNC, (0, 0, 64, 64)) == 0
        assert _count(both, BADGE_TICKET, top_right) > 100
        assert _count(both, BADGE_SYNC, bottom_right) > 60
        assert _count(both, BADGE_SYNC, top_right) == 0 and _count(both, BADGE_TICKET, bottom_right) == 0
        assert _count(both, PALETTE[state], (0, 0, 64, 64)) > 1000
    only_tickets = render(TrayState.ATTENTION, badges=Badges(tickets=1))
    assert _count(only_tickets, BADGE_SYNC, (0, 0, 64, 64)) == 0
    assert set(PALETTE.values()).isdisjoint({BADGE_TICKET, BADGE_SYNC})


def test_sync_problem_and_tooltip() -> None:
    """Issue 17: the last sync session decides; the tooltip says what the badges mean."""
    assert sync_problem({"recent": []}) is False
    assert sync_problem({"recent": [{"error": {"code": "sync_unreachable"}}]}) is True
    assert sync_problem({"recent": [{"error": {"code": "x"}}, {"merged": 3, "peer_error": None}]}) is False
    assert sync_problem({"recent": [{"peer_error": "busy"}]}) is True
    refused = {"code": "sync_rejected", "message": "…"}
    assert sync_problem({"recent": [{"vaults": [{"vault": "ab", "revisions_added": 1}, {"vault": "cd", "error": refused}]}]})
    assert sync_problem({"recent": [{"vaults": [], "peer_vaults": [{"vault": "cd", "error": refused}]}]})
    assert not sync_problem({"recent": [{"vaults": [{"vault": "ab", "revisions_added": 1}], "peer_vaults": []}]})
    text = tooltip_text(TrayState.ATTENTION, None, Badges(tickets=2, sync_problem=True))
    assert text == "Memories: needs attention; 2 tickets waiting, last sync failed"


DOCKED = 24  # colour tolerance in the docked (scaled) icon; the nearest palette colour is much further away


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _fail_a_sync(cli: Cli) -> None:
    proc = cli.run("sync", f"http://127.0.0.1:{_closed_port()}", "--token-stdin", "--json", input="not-a-real-token\n")
    assert proc.returncode != 0, proc.stdout


def _ticket(cli: Cli, port: int) -> str:
    cli.ok("credential", "new", "tcp", "--name", "echo", "--host", "127.0.0.1", "--port", str(port))
    session: str = cli.ok("remote", "open", "echo")["session"]
    cli.ok("remote", "propose", session, "uptime")
    return session


def test_badges_read_from_a_real_engine(vault: Cli) -> None:
    """Issue 17: read_badges asks the engine (no idle touch): nothing, then a failed sync, then a waiting ticket."""
    from tests.remote import fakes

    sock = Paths(vault.home).socket
    assert read_badges(sock) == Badges()
    _fail_a_sync(vault)
    assert read_badges(sock) == Badges(tickets=0, sync_problem=True)
    with fakes.serve(lambda reader, writer: _close(writer)) as port:
        session = _ticket(vault, port)
        assert read_badges(sock) == Badges(tickets=1, sync_problem=True)
        vault.ok("remote", "close", session)
    vault.ok("lock")
    assert read_badges(sock) is None, "locked: the engine says nothing, the tray drops the badges"


def test_docked_icon_shows_ticket_and_sync_badges(vault: Cli, xsession: XSession, tmp_path: Path) -> None:
    """Issue 17 (DT-4): under Xvfb with trayer, the docked icon gains the sync badge after a failed
    sync and the ticket badge while a ticket waits; locking drops both."""
    from tests.remote import fakes

    tray = Tray(vault, xsession, tmp_path, "xorg")
    try:
        tray.wait_icon(TrayState.UNLOCKED)
        panel = (0, 0, 640, TRAY_REGION_HEIGHT)
        assert _count(xsession.grab(), BADGE_SYNC, panel, DOCKED) == 0
        _fail_a_sync(vault)
        tray.wait_output(r"badges tickets=0 sync_problem=true")
        _wait_colour(xsession, BADGE_SYNC, panel)
        with fakes.serve(lambda reader, writer: _close(writer)) as port:
            session = _ticket(vault, port)
            tray.wait_output(r"badges tickets=1 sync_problem=true")
            tray.wait_icon(TrayState.ATTENTION)
            _wait_colour(xsession, BADGE_TICKET, panel)
            xsession.screenshot(tmp_path / "tray-badges.png")
            vault.ok("remote", "close", session)
        vault.ok("lock")
        tray.wait_icon(TrayState.LOCKED)
        shot = xsession.grab()
        assert _count(shot, BADGE_TICKET, panel, DOCKED) == 0 and _count(shot, BADGE_SYNC, panel, DOCKED) == 0
    finally:
        tray.stop()


def _wait_colour(x: XSession, colour: tuple[int, int, int], box: tuple[int, int, int, int], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if _count(x.grab(), colour, box, DOCKED) >= 5:
            return
        time.sleep(0.1)
    x.screenshot(x.tmp / "tray-badge-missing.png")
    raise AssertionError(f"the tray panel never showed {colour} (screenshot tray-badge-missing.png)")


async def _close(writer: Any) -> None:
    writer.close()
