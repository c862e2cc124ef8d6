"""A store written by earlier code keeps opening (ST-1, ST-3; docs/formats.md).

tests/data/store-v1/store.db was made by tests/data/make_store_fixture.py and committed. Its
header is checked against the documented constants as read from the file itself (SQLite's
own magic, then the header row as stored: no engine decoder involved), and today's engine
must unlock it with the fixture's password and return the content the script wrote.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
from pathlib import Path

from engine.store.database import FORMAT_NAME, FORMAT_VERSION
from tests.data.make_store_fixture import CARD, CREDENTIAL, FIXTURE, NOTES, OTP_AT, OTP_CODE, PASSWORD
from tests.helpers import Cli


def test_fixture_header_has_the_documented_constants() -> None:
    """ST-3 and docs/formats.md: SQLite file; header row format `memories-store`, version 1,
    KDF as canonical JSON with algorithm argon2id13, a 16-byte salt, opslimit and memlimit."""
    data = FIXTURE.read_bytes()
    assert data[:16] == b"SQLite format 3\x00"
    assert len(data) <= 256 * 1024
    conn = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    try:
        fmt, version, kdf = conn.execute("SELECT format, version, kdf FROM header WHERE id = 1").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    assert (fmt, version) == ("memories-store", 1)
    assert (FORMAT_NAME, FORMAT_VERSION) == (fmt, version), "the code's format constants moved away from stored files"
    assert tables == {"header", "state", "content", "checkpoints"}
    params = json.loads(kdf)
    assert kdf == json.dumps(params, sort_keys=True, separators=(",", ":")).encode()  # canonical: sorted, compact
    assert sorted(params) == ["algorithm", "memlimit", "opslimit", "salt"]
    assert params["algorithm"] == "argon2id13"
    assert len(base64.urlsafe_b64decode(params["salt"]["$b"] + "==")) == 16
    # The tests' tiny KDF (MEMORIES_KDF_TARGET_MS=10): libsodium's minimum passes, 8 MiB.
    assert (params["opslimit"], params["memlimit"]) == (1, 8 * 1024 * 1024)


def test_todays_engine_opens_the_fixture_and_reads_its_content(tmp_path: Path) -> None:
    """ST-1: today's engine unlocks the committed store with its password and returns every
    note, the card, the OTP secret (as its RFC 6238 code) and the credential."""
    cli = Cli(home=tmp_path / "home")
    cli.home.mkdir(mode=0o700)
    shutil.copyfile(FIXTURE, cli.home / "store.db")
    (cli.home / "store.db").chmod(0o600)
    try:
        assert cli.err("unlock", "--password-stdin", input="wrong\n")["code"] == "wrong_password"
        cli.unlock(PASSWORD)
        by_title = {item["title"]: item["id"] for item in cli.ok("list")["items"]}
        assert set(by_title) == {title for title, _ in NOTES} | {CARD[0], "Fixture OTP"}
        for title, body in NOTES:
            assert cli.ok("get", by_title[title])["body"] == body
        assert cli.ok("card", "show", by_title[CARD[0]])["body"] == CARD[1]
        assert cli.ok("otp", by_title["Fixture OTP"], "--at", str(OTP_AT))["code"] == OTP_CODE
        name, host, port = CREDENTIAL
        shown = cli.ok("credential", "show", name)
        assert (shown["type"], shown["public"]["host"], shown["public"]["port"]) == ("tcp", host, port)
    finally:
        cli.stop()
