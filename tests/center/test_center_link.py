"""The daemon's HTTP link to a Center reads another machine's bytes: every answer that is not
the protocol becomes a typed error (``center_unavailable``, or the Center's own known code with
a one-line message), never an exception of another kind and never a guess.

A real loopback aiohttp server sends each answer (no patched function)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.center.link import CenterLink
from engine.errors import MemoriesError
from tests.helpers import free_port


class Scripted:
    """Answers every request with ``status`` and ``body`` bytes; records the last headers."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"
        self.headers: dict[str, str] = {}
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        self.headers = dict(request.headers)
        return web.Response(status=self.status, body=self.body, content_type="application/json")

    def start(self) -> None:
        ready = threading.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(30)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


@pytest.fixture(scope="module")
def server() -> Iterator[Scripted]:
    s = Scripted()
    s.start()
    yield s
    s.stop()


def _link(server: Scripted) -> CenterLink:
    return CenterLink(f"http://127.0.0.1:{server.port}", timeout=30)


def _error(server: Scripted, status: int, body: bytes, what: str = "status") -> MemoriesError:
    server.status, server.body = status, body
    link = _link(server)
    with pytest.raises(MemoriesError) as info:
        if what == "status":
            link.ticket_status("ab" * 16)
        elif what == "info":
            link.info()
        else:
            link.rpc({"op": "list"}, "mcg_secret_token_value")
    link.close()
    return info.value


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"not json"),
        (200, b"[1, 2]"),
        (200, b'{"status": "valid"}'),
        (200, b'{"status": "valid", "generation": "1"}'),
        (200, b'{"status": "valid", "generation": 0}'),
        (200, b'{"status": "valid", "generation": true}'),
        (200, b'{"status": "maybe", "generation": 1}'),
        (200, b"\xff\xfe"),
        (200, b'{"status": "valid", "generation": 1, "pad": "' + b"x" * 70_000 + b'"}'),
        (500, b"<html>oops</html>"),
        (500, b'{"error": {"code": "internal", "message": "boom"}}'),
        (418, b'{"error": {"code": "made_up_code", "message": "x"}}'),
        (403, b'{"error": "scope_denied"}'),
    ],
)
def test_malformed_status_answers_are_center_unavailable(server: Scripted, status: int, body: bytes) -> None:
    assert _error(server, status, body).code == "center_unavailable"


def test_a_known_error_passes_through_as_one_printable_line(server: Scripted) -> None:
    body = json.dumps({"error": {"code": "center_locked", "message": "locked\x1b[31m by\noperator" + "y" * 500}}).encode()
    error = _error(server, 423, body, "rpc")
    assert error.code == "center_locked"
    assert "\x1b" not in error.message and "\n" not in error.message and len(error.message) < 400
    assert server.headers.get("Authorization") == "Bearer mcg_secret_token_value"
    assert "mcg_secret_token_value" not in error.message


def test_info_must_be_a_centers(server: Scripted) -> None:
    assert _error(server, 200, b'{"service": "something else", "key": "k"}', "info").code == "center_unavailable"
    assert _error(server, 200, b'{"ok": true}', "rpc").code == "center_unavailable"


def test_good_answers(server: Scripted) -> None:
    server.status, server.body = 200, b'{"status": "revoked", "generation": 3}'
    link = _link(server)
    answer = link.ticket_status("cd" * 16)
    assert (answer.status, answer.generation) == ("revoked", 3)
    server.body = b'{"result": {"items": []}}'
    assert link.rpc({"op": "list"}, "t") == {"items": []}
    link.close()


def test_nothing_listening_is_center_unavailable() -> None:
    link = CenterLink(f"http://127.0.0.1:{free_port()}", timeout=30)
    with pytest.raises(MemoriesError) as info:
        link.ticket_status("ab" * 16)
    assert info.value.code == "center_unavailable"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(status=st.sampled_from([200, 400, 403, 404, 409, 423, 429, 500, 503]), body=st.binary(max_size=300))
def test_any_answer_is_a_result_or_a_typed_error(server: Scripted, status: int, body: bytes) -> None:
    server.status, server.body = status, body
    link = _link(server)
    try:
        link.ticket_status("ef" * 16)
    except MemoriesError as exc:
        assert exc.code != "internal"
    finally:
        link.close()
