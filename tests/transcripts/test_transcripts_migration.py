"""AG-8: a store written when a session was one item is migrated to turn items at first use.

tests/data/transcripts-v1/store.db was written by the code before this change (one transcript
item per session, every caveat or slash-command line counted as a turn): the shop and ledger
sample sessions of tests/data/agent-eval, imported with the fixture password.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import Cli
from tests.transcripts import agent_eval

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "transcripts-v1" / "store.db"
PASSWORD = "fixture password: not a secret"


def test_old_session_items_become_turns_once(tmp_path: Path) -> None:
    """AG-8: after unlock the sessions list their turns as the user saw them, search finds turns
    with handles, the old files count as already imported, and a second start migrates nothing."""
    cli = Cli(home=tmp_path / "home")
    cli.home.mkdir(mode=0o700)
    shutil.copyfile(FIXTURE, cli.home / "store.db")
    (cli.home / "store.db").chmod(0o600)
    try:
        cli.unlock(PASSWORD)
        sessions = {s["session_key"]: s for s in cli.ok("transcript", "list")["sessions"]}
        assert sessions["5b1e6a3c-2f40-4c8e-9d7a-61f0c2b4e8a1"]["main_turns"] == 12
        assert sessions["0199b7e2-41aa-7c3d-9e0f-5a6b7c8d9e10"]["main_turns"] == 6
        hits = cli.ok("search", "product catalogue redis cache", "--kind", "transcript")["results"]
        assert hits[0]["turn"]["seq"] == 11 and hits[0]["turn"]["handle"].startswith("[")
        again = cli.ok("transcript", "import", str(agent_eval.DATA / "claude" / "projects" / "-home-ana-shop"))
        assert again["unchanged"] == 1 and again["events_added"] == 0
        cli.stop()
        cli.unlock(PASSWORD)
        after = {s["session_key"]: s for s in cli.ok("transcript", "list")["sessions"]}
        assert {k: (s["main_turns"], s["events"]) for k, s in after.items()} == {
            k: (s["main_turns"], s["events"]) for k, s in sessions.items()
        }
    finally:
        cli.stop()
