"""Issue 17 (DT-4): a badge read that the engine answered while unlocked but that lands after the
tray saw the lock must not badge the locked icon. On a loaded machine the docked-icon test met
exactly this order; here it is forced, against a real engine, without threads or timing."""

from __future__ import annotations

from desktop.prober import Probe
from desktop.status import Badges
from desktop.tray.app import TrayApp, TrayOptions
from tests.helpers import Cli, free_port


def test_a_badge_read_from_before_a_lock_is_dropped(vault: Cli) -> None:
    """DT-4: the lock clears the badges; a read asked before it (answered with a failed sync) changes
    nothing; a read asked after it is applied as usual."""
    proc = vault.run("sync", f"http://127.0.0.1:{free_port()}", "--token-stdin", "--json", input="not-a-real-token\n")
    assert proc.returncode != 0, proc.stdout  # the engine now reports a sync problem
    app = TrayApp(TrayOptions(home=vault.home))  # never run: no icon, no prober thread

    asked_before_lock = app._badge_epoch
    assert app._badge_read.acquire(blocking=False)  # as _on_probe does before starting a read
    app._on_probe(Probe("locked"))  # the tray sees the lock first ...
    app._read_badges(asked_before_lock)  # ... then the earlier read answers (the engine is still unlocked)
    assert app.badges == Badges(), "a stale read put a badge on the locked icon"

    app._on_probe(Probe("unlocked"))  # starts its own read in the background; wait for it by taking its slot
    assert app._badge_read.acquire(timeout=30)
    app._read_badges(app._badge_epoch)
    assert app.badges == Badges(tickets=0, sync_problem=True)
