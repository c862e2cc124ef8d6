"""The OAuth 2.0 part shared by the loopback OneDrive and Drive servers (issue 21; CL-1).

``GET /authorize`` checks the request like the real providers (response_type=code, a known
client, an S256 challenge, a loopback redirect) and redirects to ``redirect_uri`` with a code
and the state, as a browser would be after the user signs in. ``POST /token`` implements the
``authorization_code`` grant with PKCE S256 verification (RFC 7636 §4.6) and the
``refresh_token`` grant; a revoked refresh token answers 400 ``invalid_grant``. API calls
need ``Authorization: Bearer`` with a live access token (else 401).

The server runs on its own event loop in a thread; tests read and change its state directly
(it is the provider, not our code).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import urlencode, urlsplit

from aiohttp import web

__all__ = ["FakeOAuth", "CLIENT_ID"]

CLIENT_ID = "memories-test-client"


@dataclass
class FakeOAuth:
    rotate_refresh: bool = False
    port: int = 0
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    refresh_tokens: set[str] = field(default_factory=set)
    access_tokens: set[str] = field(default_factory=set)
    issued: list[str] = field(default_factory=list)  # every token ever issued (canaries)
    token_grants: list[str] = field(default_factory=list)
    # Injected failures for the next API requests: (status, Retry-After or None).
    fail_next: list[tuple[int, str | None]] = field(default_factory=list)
    api_requests: list[tuple[str, str, int]] = field(default_factory=list)
    # Listings return at most this many entries per page (a partial page, as both APIs may).
    max_page: int = 1000
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def serve() -> None:
                app = web.Application(client_max_size=80 * 1024 * 1024, middlewares=[self._api_gate])
                app.router.add_get("/authorize", self._authorize)
                app.router.add_post("/token", self._token)
                self.routes(app)
                self._runner = web.AppRunner(app, access_log=None)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = int(self._runner.addresses[0][1])
                ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            self._loop = None

    def revoke_all(self) -> None:
        self.refresh_tokens.clear()
        self.access_tokens.clear()

    # -- OAuth ----------------------------------------------------------------------------

    async def _authorize(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        redirect = q.get("redirect_uri", "")
        host = urlsplit(redirect).hostname
        if (
            q.get("response_type") != "code"
            or q.get("client_id") != CLIENT_ID
            or q.get("code_challenge_method") != "S256"
            or len(q.get("code_challenge", "")) != 43
            or host != "127.0.0.1"
            or not q.get("state")
        ):
            return web.json_response({"error": "invalid_request"}, status=400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"challenge": q["code_challenge"], "redirect_uri": redirect, "client_id": q["client_id"]}
        raise web.HTTPFound(f"{redirect}?{urlencode({'code': code, 'state': q['state']})}")

    def _issue(self, refresh: str | None) -> dict[str, Any]:
        access = "at-" + secrets.token_urlsafe(24)
        self.access_tokens.add(access)
        self.issued.append(access)
        body: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": 3600}
        if refresh is None or self.rotate_refresh:
            new = "rt-" + secrets.token_urlsafe(24)
            if refresh is not None:
                self.refresh_tokens.discard(refresh)
            self.refresh_tokens.add(new)
            self.issued.append(new)
            body["refresh_token"] = new
        return body

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant = str(form.get("grant_type", ""))
        self.token_grants.append(grant)
        if form.get("client_id") != CLIENT_ID:
            return web.json_response({"error": "invalid_client"}, status=401)
        if grant == "authorization_code":
            bound = self.codes.pop(str(form.get("code", "")), None)
            verifier = str(form.get("code_verifier", ""))
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if bound is None or bound["redirect_uri"] != form.get("redirect_uri") or bound["challenge"] != challenge:
                return web.json_response({"error": "invalid_grant"}, status=400)
            return web.json_response(self._issue(None))
        if grant == "refresh_token":
            refresh = str(form.get("refresh_token", ""))
            if refresh not in self.refresh_tokens:
                return web.json_response(
                    {"error": "invalid_grant", "error_description": "The refresh token has expired or was revoked."}, status=400
                )
            return web.json_response(self._issue(refresh))
        return web.json_response({"error": "unsupported_grant_type"}, status=400)

    # -- API gate: bearer tokens and injected failures ------------------------------------

    @web.middleware
    async def _api_gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in ("/authorize", "/token") or request.path.startswith(("/download/", "/session/")):
            passed: web.StreamResponse = await handler(request)  # pre-authorized URLs carry no bearer token
            return passed
        if self.fail_next:
            status, retry_after = self.fail_next.pop(0)
            self.api_requests.append((request.method, request.path, status))
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return web.json_response({"error": {"code": "throttled"}}, status=status, headers=headers)
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.access_tokens:
            self.api_requests.append((request.method, request.path, 401))
            return web.json_response({"error": {"code": "InvalidAuthenticationToken"}}, status=401)
        response: web.StreamResponse = await handler(request)
        self.api_requests.append((request.method, request.path, response.status))
        return response
