"""Test bodies shared by the OneDrive and Google Drive tests (issue 21; CL-1 … CL-4).

Each device is a real data home with its own daemon; devices never talk to each other, only
to the loopback provider (tests/cloud/fake_graph.py, fake_drive.py), through the engine's
own aiohttp transport after a real `memories cloud login`.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.cloud.fake_oauth import FakeOAuth
from tests.cloud.oauth_login import authorize_redirect, finish, login, start_login
from tests.helpers import Cli
from tests.sync.support import B_PASSWORD, titles

__all__ = [
    "env_for",
    "two_engines_both_ways",
    "wrong_state_is_refused",
    "lock_voids_the_ticket",
    "throttled_then_ok",
    "expired_refresh_token",
    "tokens_never_leave",
]


def env_for(kind: str, fake: FakeOAuth) -> dict[str, str]:
    return {
        "MEMORIES_CLOUD_BACKOFF_MS": "1",
        f"MEMORIES_CLOUD_TEST_BASE_{kind.upper()}": fake.base,
        # Objects over 300 kB go through upload sessions / resumable uploads in one-unit chunks.
        "MEMORIES_CLOUD_SIMPLE_MAX": "300000",
        "MEMORIES_CLOUD_CHUNK_UNITS": "1",
    }


def two_engines_both_ways(kind: str, fake: FakeOAuth, a: Cli, b: Cli) -> None:
    assert login(a, kind, "home")["added"]["kind"] == kind
    login(b, kind, "home", password=B_PASSWORD)
    assert a.ok("status")["providers"] == [kind]
    fake.max_page = 1  # every listing comes in partial pages

    a.put("Alpha from A", "alpha-body-7d1e")
    assert a.ok("cloud", "sync")["uploaded"] == 1
    got = b.ok("cloud", "sync")
    assert sum(int(r["revisions_added"]) for r in got["merged"]) == 1
    assert titles(b) == {"Alpha from A"}

    # A large edit (about 700 KB of text that deflates only to about 525 KB: note bodies are
    # compressed) goes up in several chunks.
    import base64
    import os

    big = base64.b64encode(os.urandom(525_000)).decode("ascii")[:700_000]
    b.ok("put", "--title", "Beta from B", "--body-stdin", input=big)
    sent = b.ok("cloud", "sync")
    got = a.ok("cloud", "sync")
    assert titles(a) == {"Alpha from A", "Beta from B"}, (sent, got, sorted(fake.api_requests)[-30:])
    assert a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 0
    assert a.ok("cloud", "accounts")["accounts"][0]["inbox"] == 0


def wrong_state_is_refused(kind: str, cli: Cli) -> None:
    cli.sudo()
    proc, url = start_login(cli, kind, "forged")
    redirect = authorize_redirect(url)
    parts = urllib.parse.urlsplit(redirect)
    query = dict(urllib.parse.parse_qsl(parts.query))
    query["state"] = query["state"][::-1] + "x"
    code, result = finish(proc, urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query))))
    assert code != 0 and result["error"]["code"] == "cloud_login_refused", result
    assert cli.ok("cloud", "accounts")["accounts"] == []


def lock_voids_the_ticket(kind: str, cli: Cli) -> None:
    cli.sudo()
    proc, url = start_login(cli, kind, "voided")
    cli.ok("lock")
    cli.unlock()
    cli.sudo()
    code, result = finish(proc, authorize_redirect(url))
    assert code != 0 and result["error"]["code"] == "cloud_login_refused", result
    assert cli.ok("cloud", "accounts")["accounts"] == []


def throttled_then_ok(kind: str, fake: FakeOAuth, a: Cli, b: Cli) -> None:
    login(a, kind, "home")
    login(b, kind, "home", password=B_PASSWORD)
    a.put("Note", "body")
    before = len(fake.api_requests)
    fake.fail_next = [(429, "1"), (503, "0")]
    assert a.ok("cloud", "sync")["uploaded"] == 1
    statuses = [status for _, _, status in fake.api_requests[before:]]
    assert statuses[:2] == [429, 503] and set(statuses[2:]) <= {200, 201, 202, 404, 308}, statuses
    assert fake.fail_next == []
    b.ok("cloud", "sync")
    assert titles(b) == {"Note"}


def expired_refresh_token(kind: str, fake: FakeOAuth, a: Cli, b: Cli) -> None:
    login(a, kind, "home")
    login(b, kind, "home", password=B_PASSWORD)
    a.put("Note", "body")
    fake.revoke_all()  # the access token stops working and the refresh token is refused
    error = a.err("cloud", "sync")
    assert error["code"] == "cloud_login_required", error
    assert "memories cloud login" in error["message"]
    account = a.ok("cloud", "accounts")["accounts"][0]
    assert account["last"]["error"] == "cloud_login_required" and account["outbox"] == 1
    # Signing in again renews the same account's tokens; its queue goes out on the next sync.
    assert login(a, kind, "home")["renewed"] is True
    again = a.ok("cloud", "sync")
    # The queued bundle goes out, plus one for the audit entry of the new sign-in.
    assert again["uploaded"] >= 1 and a.ok("cloud", "accounts")["accounts"][0]["outbox"] == 0, again
    login(b, kind, "home", password=B_PASSWORD)  # the provider revoked B's sign-in too
    b.ok("cloud", "sync")
    assert titles(b) == {"Note"}


def tokens_never_leave(fake: FakeOAuth, a: Cli, b: Cli, tmp_path: Path) -> None:
    """Every token the provider ever issued, as a canary."""
    outputs = [
        a.run("cloud", "accounts", "--json").stdout,
        a.run("cloud", "accounts").stdout,
        a.run("cloud", "sync", "--json").stdout,
        a.run("status", "--json").stdout,
        a.run("status").stdout,
    ]
    tokens = [t.encode() for t in fake.issued]
    assert tokens
    for text in outputs:
        for token in tokens:
            assert token.decode() not in text
    for home in (a.home, b.home):
        for path in home.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert not any(token in data for token in tokens), path
    a.sudo()
    backup = tmp_path / "cloud.backup"
    a.ok("backup", "create", str(backup), "--password-stdin", input="backup pw for cloud 1\n")
    data = backup.read_bytes()
    assert not any(token in data for token in tokens)
    # The backup is encrypted, so the scan above proves little: restore it and look (BK-1).
    restored = Cli(home=tmp_path / "restored")
    try:
        proc = restored.run("restore", str(backup), "--password-stdin", "--json", input="backup pw for cloud 1\nnew pw 2\n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if restored.ok("status")["locked"]:
            restored.unlock("new pw 2")
        assert restored.ok("cloud", "accounts")["accounts"] == []
        assert restored.ok("status")["providers"] == []
    finally:
        restored.stop()
