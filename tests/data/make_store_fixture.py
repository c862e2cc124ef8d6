"""Build tests/data/store-v1/store.db: a small store written by the code of its day.

Run from the repository root (it drives the real CLI and daemon):

    .venv/bin/python -m tests.data.make_store_fixture

The file is committed and never regenerated casually: tests/integration/test_store_format.py
opens it with today's code, so a change that stops old stores from opening fails there. If
the format changes on purpose, keep the old fixture (and a migration), add a new one.
The KDF is the tests' tiny one (MEMORIES_KDF_TARGET_MS=10, recorded in the header), so the
fixture is cheap to open; the password is public on purpose.
"""

from __future__ import annotations

import base64
import shutil
import sqlite3
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "store-v1" / "store.db"
PASSWORD = "fixture password: not a secret"
NOTES = [
    ("First note", "plain ASCII body"),
    ("Zweite Notiz — 漢字", "Unicode body: é ß 漢字 \U0001f600\nsecond line"),
]
CARD = ("Format stability", "A knowledge card written by the fixture script.")
OTP_KEY = b"12345678901234567890"  # RFC 4226 / 6238 test key
OTP_URI = f"otpauth://totp/Fixture:me?secret={base64.b32encode(OTP_KEY).decode().rstrip('=')}&period=30&digits=8"
OTP_AT = 59
OTP_CODE = "94287082"  # RFC 6238 Appendix B, SHA-1, T = 59
CREDENTIAL = ("echo", "127.0.0.1", 7)  # a tcp credential: name, host, port


def build(target: Path) -> None:
    from tests.helpers import Cli

    with tempfile.TemporaryDirectory() as tmp:
        cli = Cli(home=Path(tmp) / "home")
        try:
            cli.init(PASSWORD)
            for title, body in NOTES:
                cli.ok("put", "--title", title, "--body", body)
            cli.ok("card", "new", "--type", "knowledge", "--title", CARD[0], "--body", CARD[1])
            cli.ok("protected", "new", "--title", "Fixture OTP", "--otp-stdin", input=OTP_URI + "\n")
            name, host, port = CREDENTIAL
            cli.ok("credential", "new", "tcp", "--name", name, "--host", host, "--port", str(port))
        finally:
            cli.stop()
        store = cli.home / "store.db"
        # The engine has closed the store: fold any WAL into the file so one file is the whole store.
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
