"""Note bodies compressed before their data key seals them (issue 32, revision format 2), through
the real CLI, daemon and store file: what is stored, that it reads back (get, history, diff, after
a lock, after a backup and restore), and which bodies are left as they were (ST-4, HI-2, BK-2).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.helpers import Cli

BACKUP_PW = "compressed bodies backup 3"
NEW_PW = "compressed bodies new device 5"
# ~1.9 KB, mixed English and Chinese like the benches' notes, repetitive enough to shrink well.
LONG = "\n".join(f"Line {i}: the harbor lantern at the Kyoto passport office. 港口的灯笼在京都。" for i in range(24))
SEALING = 40  # nonce and tag of one sealed chunk


def _content_sizes(home: Path) -> list[int]:
    conn = sqlite3.connect(f"file:{home / 'store.db'}?mode=ro", uri=True)
    try:
        return [int(n) for (n,) in conn.execute("SELECT length(blob) FROM content ORDER BY seq")]
    finally:
        conn.close()


def test_a_long_note_is_stored_compressed_and_reads_back_everywhere(tmp_path: Path) -> None:
    """A long note's sealed body is a fraction of its text; get, history and diff read it back
    exactly, also after a lock and an unlock; a short note and a login's secret are sealed as they
    are (their sealed size is their length plus the AEAD's overhead)."""
    cli = Cli(home=tmp_path / "home")
    cli.init()
    try:
        before = set(_content_sizes(cli.home))
        note = cli.put("long note", LONG, "travel")
        long_rows = [n for n in _content_sizes(cli.home) if n not in before]
        assert len(long_rows) == 1 and long_rows[0] < len(LONG.encode()) // 3, (long_rows, len(LONG.encode()))
        edited = LONG + "\nOne more line 再一行。"
        cli.ok("edit", note["id"], "--body", edited)
        short = cli.put("short", "x" * 50)
        secret = "correct-horse-" * 10  # compressible, but a secret: never compressed
        sizes = _content_sizes(cli.home)
        cli.ok("login", "new", "--title", "mail", "--username", "me", "--password-stdin", input=secret + "\n")
        added = _content_sizes(cli.home)[len(sizes) :]
        assert any(n >= len(secret) + SEALING for n in added), added  # the secret's body, as long as it is
        assert cli.ok("get", short["id"])["body"] == "x" * 50
        cli.ok("lock")
        cli.unlock()
        assert cli.ok("get", note["id"])["body"] == edited
        revisions = [r["revision"] for r in cli.ok("history", note["id"])["revisions"]]
        diff = cli.ok("diff", note["id"], revisions[0][:12], revisions[-1][:12])["diff"]  # oldest first
        assert "+One more line 再一行。" in diff and "-Line" not in diff
        found = cli.ok("search", "lantern", "--mode", "lexical", "--wait", "60")
        assert any(r["id"] == note["id"] for r in found["results"])
    finally:
        cli.stop()


def test_a_restored_compressed_note_reads_back_with_its_history(tmp_path: Path) -> None:
    """BK-2: a backup carries a compressed note as its sealed stream; the restore's new head names
    the same chunks and says they are compressed, so the note, its archived history and a diff
    between them read back exactly, also after a lock."""
    src = Cli(home=tmp_path / "src")
    src.init()
    try:
        note = src.put("long note", LONG)
        src.ok("edit", note["id"], "--body", LONG + "\nappended 追加")
        src.sudo()
        backup = tmp_path / "notes.backup"
        src.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
    finally:
        src.stop()
    dst = Cli(home=tmp_path / "dst")
    try:
        proc = dst.run("restore", str(backup), "--password-stdin", "--json", input=f"{BACKUP_PW}\n{NEW_PW}\n", timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert dst.ok("get", note["id"])["body"] == LONG + "\nappended 追加"
        dst.ok("lock")
        dst.unlock(NEW_PW)
        assert dst.ok("get", note["id"])["body"] == LONG + "\nappended 追加"
        archived = [r["revision"] for r in dst.ok("history", note["id"])["revisions"] if r.get("archived")]
        diff = dst.ok("diff", note["id"], archived[0][:12], archived[1][:12])["diff"]
        assert "+appended 追加" in diff
    finally:
        dst.stop()
