"""HTTP headers from credentials against a real loopback aiohttp server (CD-6)."""

from __future__ import annotations

import asyncio
import base64
import logging

import aiohttp
import pytest
from aiohttp import web

from engine.cards.http_headers import auth_headers, headers_from_credential, send
from engine.errors import MemoriesError

TOKEN = "bearer-CANARY-0a1b2c"
BODY_CANARY = "response-body-CANARY"


async def _server() -> tuple[web.AppRunner, str, list[str]]:
    seen: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", "") + "|" + request.headers.get("Cookie", ""))
        return web.json_response({"ok": True})

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/elsewhere?echo={request.headers.get('Authorization', '')}")

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=500, text=f"{BODY_CANARY} you sent {request.headers.get('Authorization')}")

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/elsewhere", ok)
    app.router.add_get("/fail", fail)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}", seen


def test_headers_are_sensitive_redirects_off_bodies_suppressed(caplog: pytest.LogCaptureFixture) -> None:
    """CD-6: bearer/cookie/basic values are masked in repr/str; no redirect is followed; no body in errors."""

    async def scenario() -> None:
        runner, base, seen = await _server()
        try:
            async with aiohttp.ClientSession() as session:
                bearer = auth_headers("bearer", secret=TOKEN)
                assert TOKEN not in repr(bearer) and TOKEN not in str(bearer[0])
                result = await send(session, "GET", f"{base}/ok", bearer)
                assert result.status == 200 and seen == [f"Bearer {TOKEN}|"]
                with pytest.raises(MemoriesError) as redirect:
                    await send(session, "GET", f"{base}/redirect", bearer)
                assert redirect.value.code == "http_error" and "302" in redirect.value.message
                assert len(seen) == 1  # /elsewhere was never requested
                with pytest.raises(MemoriesError) as failed:
                    await send(session, "GET", f"{base}/fail", bearer)
                assert BODY_CANARY not in failed.value.message and TOKEN not in failed.value.message
                assert "500" in failed.value.message
                cookie = auth_headers("cookie", secret="c00kie-CANARY", cookie_name="sid")
                await send(session, "GET", f"{base}/ok", cookie)
                assert seen[-1] == "|sid=c00kie-CANARY" and "c00kie" not in repr(cookie)
                basic = headers_from_credential({"account": "ana"}, {"password": "pw-CANARY"}, "basic")
                await send(session, "GET", f"{base}/ok", basic)
                assert seen[-1] == "Basic " + base64.b64encode(b"ana:pw-CANARY").decode() + "|"
                with pytest.raises(MemoriesError) as refused:
                    await send(session, "GET", "http://127.0.0.1:9/", bearer, timeout_s=5)
                assert refused.value.code == "http_error"
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    assert TOKEN not in caplog.text and BODY_CANARY not in caplog.text


@pytest.mark.parametrize(
    ("scheme", "fields"),
    [
        ("bearer", {"secret": "a\r\nX-Injected: 1"}),
        ("bearer", {"secret": ""}),
        ("cookie", {"secret": "v", "cookie_name": "bad name"}),
        ("cookie", {"secret": "a;b", "cookie_name": "sid"}),
        ("basic", {"secret": "p", "user": "a:b"}),
        ("digest", {"secret": "p"}),
    ],
)
def test_header_injection_and_bad_schemes_are_refused(scheme: str, fields: dict[str, str]) -> None:
    """CD-6, API-8: stored values cannot inject headers; the error never echoes them."""
    with pytest.raises(MemoriesError) as caught:
        auth_headers(scheme, **fields)
    assert caught.value.code == "invalid_input" and "Injected" not in caught.value.message
