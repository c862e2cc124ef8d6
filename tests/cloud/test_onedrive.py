"""OneDrive (Microsoft Graph app folder) sync and browser sign-in against a loopback Graph
(issue 21; CL-1 … CL-4). Bodies in tests/cloud/provider_cases.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cloud import provider_cases as cases
from tests.cloud.fake_graph import FakeGraph
from tests.helpers import Cli
from tests.sync.support import make_pair


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    server = FakeGraph().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pair(graph: FakeGraph, tmp_path: Path) -> Iterator[tuple[Cli, Cli]]:
    graph.files.clear()
    graph.max_page = 1000
    a, b = make_pair(tmp_path, cases.env_for("onedrive", graph))
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def one(graph: FakeGraph, tmp_path: Path) -> Iterator[Cli]:
    graph.files.clear()
    cli = Cli(home=tmp_path / "one", env=cases.env_for("onedrive", graph))
    cli.init()
    try:
        yield cli
    finally:
        cli.stop()


def test_login_and_two_engines_sync_both_ways(graph: FakeGraph, pair: tuple[Cli, Cli], tmp_path: Path) -> None:
    """CL-1, CL-3, CL-4: `cloud login onedrive` (PKCE S256, loopback redirect) on two engines,
    which then sync both ways through the app folder alone, with listings in partial pages
    (@odata.nextLink) and a large object through an upload session in 320 KiB fragments;
    CL-2: no token the provider issued is in any answer, data-home file or backup."""
    a, b = pair
    cases.two_engines_both_ways("onedrive", graph, a, b)
    assert len(graph.session_puts) >= 2
    assert all(key.startswith(("o/", "d/", "m/")) for key in graph.files)  # m/: delivery marks (CL-5)
    assert "refresh_token" in graph.token_grants or "authorization_code" in graph.token_grants
    cases.tokens_never_leave(graph, a, b, tmp_path)


def test_a_redirect_with_a_wrong_state_is_refused(graph: FakeGraph, one: Cli) -> None:
    """CL-1: a redirect whose state is not the one this login sent stores nothing."""
    cases.wrong_state_is_refused("onedrive", one)


def test_a_lock_voids_a_pending_login(graph: FakeGraph, one: Cli) -> None:
    """CL-1: a lock (even followed by an unlock and sudo) voids the pending sign-in ticket."""
    cases.lock_voids_the_ticket("onedrive", one)


def test_429_and_503_with_retry_after_then_success(graph: FakeGraph, pair: tuple[Cli, Cli]) -> None:
    """CL-4: Graph throttling (429, then 503, with Retry-After) is waited out and retried."""
    cases.throttled_then_ok("onedrive", graph, *pair)


def test_an_expired_refresh_token_names_cloud_login(graph: FakeGraph, pair: tuple[Cli, Cli]) -> None:
    """CL-4: a revoked or expired refresh token is a typed error naming `memories cloud login`."""
    cases.expired_refresh_token("onedrive", graph, *pair)
