"""A device whose own offline writes sync quarantined backs up and restores (BK-1, BK-2, SY-2).

Quarantine hides this device's own offline writes (stored revisions, out of every head) when a
newer policy no longer lets it write. A backup holds the visible picture, not the quarantine:
the hidden revisions used to go into the file without being heads, and every restore or
`backup verify` of it failed ("the marked heads are not the heads of the history").
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, make_pair, step_down_to_reader
from tests.sync.test_sync_quarantine_agree import _offline_writes

BACKUP_PW = "backup horse staple 42"
NEW_PW = "new device password 7"


def _items(cli: Cli) -> list[tuple[str, str, str]]:
    return sorted((str(i["id"]), str(i["title"]), str(cli.ok("get", i["id"])["body"])) for i in cli.ok("list", "--all")["items"])


def test_a_device_with_quarantined_offline_writes_backs_up_and_restores(tmp_path: Path) -> None:
    """BK-1, BK-2, SY-2: B's offline note (two revisions) and its offline edit of A's note are
    quarantined on B. B's backup verifies and restores into a new home that lists, gets and
    shows exactly what B shows (A's note with A's body, no offline note) and holds no quarantine."""
    a, b = make_pair(tmp_path)
    restored = Cli(home=tmp_path / "restored")
    try:
        run = _offline_writes(a, b, step_down_to_reader(a))
        assert len(b.ok("quarantine", "list")["entries"]) == 3
        backup = tmp_path / "b.backup"
        b.sudo(B_PASSWORD)
        b.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
        assert b.ok("backup", "verify", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
        proc = restored.run("restore", str(backup), "--password-stdin", "--json", input=f"{BACKUP_PW}\n{NEW_PW}\n", timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _items(restored) == _items(b) == [(run.shared, "shared note", "shared zebrafirst body")]
        assert restored.err("get", run.offline)["code"] == "not_found"
        assert restored.ok("quarantine", "list")["entries"] == []
    finally:
        a.stop()
        b.stop()
        restored.stop()
