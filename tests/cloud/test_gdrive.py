"""Google Drive (appDataFolder) sync and browser sign-in against a loopback Drive v3
(issue 21; CL-1 … CL-4). Bodies in tests/cloud/provider_cases.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cloud import provider_cases as cases
from tests.cloud.fake_drive import FakeDrive
from tests.helpers import Cli
from tests.sync.support import make_pair


@pytest.fixture(scope="module")
def drive() -> Iterator[FakeDrive]:
    server = FakeDrive().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pair(drive: FakeDrive, tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    drive.files.clear()
    drive.max_page = 1000
    a, b = make_pair(tmp_path, cases.env_for("gdrive", drive))
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def one(drive: FakeDrive, tmp_path: Path) -> Iterator[Cli]:
    drive.files.clear()
    cli = Cli(home=tmp_path / "one", env=cases.env_for("gdrive", drive))
    cli.init()
    try:
        yield cli
    finally:
        cli.stop()


def test_login_and_two_engines_sync_both_ways(drive: FakeDrive, pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """CL-1, CL-3, CL-4: `cloud login gdrive` (PKCE S256, loopback redirect) on two engines,
    which then sync both ways through appDataFolder alone, with listings in partial pages
    (nextPageToken) and a large object through a resumable upload in 256 KiB chunks;
    CL-2: no token the provider issued is in any answer, data-home file or backup; CL-5: the delivery
    marks are rewritten in place."""
    a, b = pair
    cases.two_engines_both_ways("gdrive", drive, a, b)
    assert len(drive.resumable_puts) >= 2
    assert all(name.startswith(("o/", "d/", "m/")) for name in drive.by_name())  # m/: delivery marks (CL-5)
    # CL-5: the marks are one file per device pair, rewritten in place (a media PATCH), never a second file.
    marks = [name for name in (f["name"] for f in drive.files.values()) if name.startswith("m/")]
    assert marks and len(marks) == len(set(marks))
    assert any(method == "PATCH" and status == 200 for method, _, status in drive.api_requests)
    assert "refresh_token" in drive.token_grants or "authorization_code" in drive.token_grants
    cases.tokens_never_leave(drive, a, b, tmp_path)


def test_a_redirect_with_a_wrong_state_is_refused(drive: FakeDrive, one: Cli) -> None:
    """CL-1: a redirect whose state is not the one this login sent stores nothing."""
    cases.wrong_state_is_refused("gdrive", one)


def test_a_lock_voids_a_pending_login(drive: FakeDrive, one: Cli) -> None:
    """CL-1: a lock (even followed by an unlock and sudo) voids the pending sign-in ticket."""
    cases.lock_voids_the_ticket("gdrive", one)


def test_429_and_503_with_retry_after_then_success(drive: FakeDrive, pair: tuple[Cli, Cli]) -> None:
    """CL-4: Drive rate limiting (429, then 503, with Retry-After) is waited out and retried."""
    cases.throttled_then_ok("gdrive", drive, *pair)


def test_an_expired_refresh_token_names_cloud_login(drive: FakeDrive, pair: tuple[Cli, Cli]) -> None:
    """CL-4: a revoked or expired refresh token is a typed error naming `memories cloud login`."""
    cases.expired_refresh_token("gdrive", drive, *pair)
