"""Build tests/data/store-files-v1/store.db: a store with a text file, written by the code of
before issue 27, when the first 64 KiB of every text file was indexed by search.

Its search-token cache (SR-6) holds the file's text. Today's code must not index it: a file
written before the per-file setting existed is found by its title and tags only
(tests/integration/test_files_search.py). Made once, by running this script with the code
of commit c6eccc4 (before issue 27) on the path:

    git archive c6eccc4 | tar -x -C /tmp/old && cp tests/data/make_files_fixture.py /tmp/old/tests/data/
    cd /tmp/old && /path/to/.venv/bin/python -m tests.data.make_files_fixture

and copying the result here. The password is public on purpose; the KDF is the tests' tiny one.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "store-files-v1" / "store.db"
PASSWORD = "fixture password: not a secret"
FILE_NAME = "legacy.env"
CANARY = "zqoldcanary90210"
FILE_TEXT = f"API_TOKEN={CANARY}\n"


def build(target: Path) -> None:
    from tests.helpers import Cli

    with tempfile.TemporaryDirectory() as tmp:
        cli = Cli(home=Path(tmp) / "home")
        source = Path(tmp) / FILE_NAME
        source.write_text(FILE_TEXT)
        try:
            cli.init(PASSWORD)
            added = cli.ok("file", "add", str(source), "--tag", "legacy")
            # The search's intent commit carries the pending token records: the text is in the cache.
            assert added["id"] in {hit["id"] for hit in cli.ok("search", CANARY)["results"]}
        finally:
            cli.stop()
        store = cli.home / "store.db"
        conn = sqlite3.connect(store)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store, target)


if __name__ == "__main__":
    if FIXTURE.exists():
        raise SystemExit(f"{FIXTURE} exists; it is a format-stability fixture, do not overwrite it")
    build(FIXTURE)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
