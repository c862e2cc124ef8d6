"""Pure pieces of the desktop: states, menu rules, icons, the editor allowlist, lean CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from desktop.dashboard import cards
from desktop.prober import Probe, sanitize
from desktop.status import TrayState, attention_text, delivery_text, tooltip_text, tray_state
from desktop.tray.icons import PALETTE, render
from desktop.tray.menu import menu_entries
from engine.errors import MemoriesError


def test_each_state_has_a_distinct_icon() -> None:
    """DT-4: at least not running, locked, unlocked, busy, attention; drawn with Pillow."""
    images = {state: render(state).tobytes() for state in TrayState}
    assert len(set(images.values())) == len(TrayState)
    assert len(set(PALETTE.values())) == len(TrayState)
    assert render(TrayState.LOCKED).size == (64, 64)


@pytest.mark.parametrize(
    ("probe", "state"),
    [
        (Probe("not_running"), TrayState.NOT_RUNNING),
        (Probe("not_responding"), TrayState.NOT_RESPONDING),
        (Probe("locked", {"state": "locked"}), TrayState.LOCKED),
        (Probe("uninitialized"), TrayState.LOCKED),
        (Probe("unlocked", {"state": "unlocked"}), TrayState.UNLOCKED),
        (Probe("unlocked", {"busy": True}), TrayState.BUSY),
        # An outbox waiting for a peer is not work under way; merging received changes is.
        (Probe("unlocked", {"sync_queue": {"outbox": 2, "inbox": 0}}), TrayState.UNLOCKED),
        (Probe("unlocked", {"sync_queue": {"outbox": 0, "inbox": 3}}), TrayState.BUSY),
        (Probe("unlocked", {"attention": True, "busy": True}), TrayState.ATTENTION),
        (Probe("error", error="internal"), TrayState.ATTENTION),
    ],
)
def test_tray_state_from_probe(probe: Probe, state: TrayState) -> None:
    """DT-4: icon state derived from the probe."""
    assert tray_state(probe) is state


def test_cl5_cloud_delivery_is_an_attention_item_in_words() -> None:
    """CL-5: the status projection's two counts become the tray's attention text; anything that
    is not a plain positive count (a foreign engine's value) says nothing."""
    raw = {"state": "unlocked", "attention": True, "cloud_delivery": {"not_arriving": 1, "not_taken": 2}}
    probe = sanitize(raw)
    assert probe.status["cloud_delivery"] == {"not_arriving": 1, "not_taken": 2}
    assert tray_state(probe) is TrayState.ATTENTION
    assert delivery_text(probe) == "cloud: 1 device's writes not arriving, 2 devices have not taken ours"
    assert delivery_text(probe) in tooltip_text(TrayState.ATTENTION, probe)
    for odd in ({"not_arriving": 0, "not_taken": 0}, {"not_arriving": True}, {"not_arriving": -3}, "text", [1]):
        assert delivery_text(Probe("unlocked", {"cloud_delivery": odd})) == ""
    assert delivery_text(Probe("locked", {"cloud_delivery": {"not_arriving": 1}})) == ""
    assert "cloud_delivery" not in sanitize({"state": "unlocked", "cloud_delivery": {"not_arriving": "x" * 80}}).status


def test_menu_greys_out_what_does_not_apply() -> None:
    """DT-4: Open dashboard, Unlock…, Lock now, Start engine, Quit; enabled only where they apply."""

    def enabled(state: TrayState) -> dict[str, bool]:
        return {e.key: e.enabled for e in menu_entries(state)}

    assert [e.label for e in menu_entries(TrayState.UNLOCKED)] == [
        "Open dashboard",
        "Unlock…",
        "Lock now",
        "Start engine",
        "Quit",
    ]
    assert enabled(TrayState.NOT_RUNNING) == {"open": True, "unlock": False, "lock": False, "start": True, "quit": True}
    assert enabled(TrayState.LOCKED) == {"open": True, "unlock": True, "lock": False, "start": False, "quit": True}
    assert enabled(TrayState.UNLOCKED) == {"open": True, "unlock": False, "lock": True, "start": False, "quit": True}
    assert enabled(TrayState.NOT_RESPONDING)["lock"] is False
    assert [e.key for e in menu_entries(TrayState.LOCKED) if e.default] == ["open"]


def test_editor_allowlist_table() -> None:
    """DT-5: an explicit allowlist of kinds and fields; protected cards and credentials absent."""
    table = {k["kind"]: [f["name"] for f in k["fields"]] for k in cards.kind_table()}
    assert table["memory"] == ["title", "body", "tags"]
    assert "protected" not in table and "credential" not in table and "file" not in table
    with pytest.raises(MemoriesError):
        cards.project_card({"kind": "protected", "title": "x"})
    projected = cards.project_card(
        {"kind": "memory", "id": "ab" * 16, "title": "t", "body": "b", "tags": [], "meta": {"k": "secret"}}
    )
    assert "meta" not in projected and "secret" not in str(projected)
    assert cards.parse_save("memory", {"base": "ab" * 16, "fields": {"tags": [" a ", "a", "b"]}}) == (
        "ab" * 16,
        {"tags": ["a", "b"]},
    )


def test_cli_stays_lean() -> None:
    """The desktop command module imports no desktop code until `tray`/`dashboard` runs."""
    code = (
        "import sys, engine.cli.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('desktop', 'aiohttp', 'pystray', 'PIL')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_dt7_attention_names_its_reasons_in_fixed_words() -> None:
    """DT-7: the status's reason codes become the tray's words; a code the desktop does not know
    (a foreign engine's text) is dropped by the prober and never shown."""
    raw = {"state": "unlocked", "attention": True, "conflicts": 2, "attention_reasons": ["conflicts", "quarantine", "rm -rf"]}
    probe = sanitize(raw)
    assert probe.status["attention_reasons"] == ["conflicts", "quarantine"]
    assert attention_text(probe) == "2 items in conflict, revisions held back by a sync"
    assert attention_text(probe) in tooltip_text(TrayState.ATTENTION, probe)
    assert sanitize({"state": "unlocked", "attention_reasons": "conflicts"}).status.get("attention_reasons") in (None, [])
    assert attention_text(Probe("locked", {"attention_reasons": ["conflicts"]})) == ""
