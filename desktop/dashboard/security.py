"""Dashboard request checks and response headers (SPEC DT-5).

* Host must name this loopback listener (``127.0.0.1:PORT`` or ``localhost:PORT``):
  a DNS-rebinding page reaches us under its own host name and is refused.
* Every state-changing request must carry a matching ``Origin`` (cross-site POSTs are
  refused before any handler runs), an ``Origin`` on any request must be ours, and
  browsers' ``Sec-Fetch-Site`` must not say cross-site.
* ``/api/`` needs the per-launch token as ``Authorization: Bearer``; compared in
  constant time. A header (not a cookie) means the browser never attaches it by itself.
* Every response gets a strict CSP (no inline script or style, nothing external).
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from engine.errors import MemoriesError

__all__ = ["Guard", "CSP", "new_token", "error_response", "json_body", "harden"]

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_STATUS = {
    "dashboard_unauthorized": 401,
    "dashboard_forbidden": 403,
    "invalid_input": 400,
    "invalid_request": 400,
    "unknown_field": 400,
    "not_found": 404,
    "locked": 423,
    "not_initialized": 423,
    "conflict": 409,
    "stale_base": 409,
    "invalid_config": 409,  # DT-9: config.toml does not parse; the person fixes it first
    "timeout": 504,
    "daemon_unavailable": 503,
    "busy": 503,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def json_body(raw: bytes, what: str = "The request") -> Any:
    """A POST body as JSON; anything else (invalid, not UTF-8, or nested so deeply that the
    decoder runs out of stack, issue 27) is a typed ``invalid_input`` that names no value."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise MemoriesError("invalid_input", f"{what} is nested too deeply.") from None
    except (ValueError, UnicodeDecodeError):
        raise MemoriesError("invalid_input", f"{what} is not valid JSON.") from None


def error_response(exc: MemoriesError) -> web.Response:
    """The API-8 error shape; messages are the engine's secret-free sentences."""
    return web.json_response({"error": {"code": exc.code, "message": exc.message}}, status=_STATUS.get(exc.code, 500))


class Guard:
    """Holds the token and the bound port; ``middleware`` applies every check."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("ascii")
        self.port: int | None = None

    def allowed_hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"}) if self.port else frozenset()

    def allowed_origins(self) -> frozenset[str]:
        return frozenset(f"http://{host}" for host in self.allowed_hosts())

    def check(self, request: web.Request) -> None:
        if request.headers.get("Host", "") not in self.allowed_hosts():
            raise MemoriesError("dashboard_forbidden", "The Host header does not name this dashboard.")
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            raise MemoriesError("dashboard_forbidden")
        if request.method not in _SAFE_METHODS and request.headers.get("Origin", "") not in self.allowed_origins():
            raise MemoriesError("dashboard_forbidden")
        # A read may come without an Origin (browsers send none on a same-origin GET), but one
        # that names another origin is refused: the event stream (DT-7) is read by no other page.
        if "Origin" in request.headers and request.headers["Origin"] not in self.allowed_origins():
            raise MemoriesError("dashboard_forbidden", "The Origin header does not name this dashboard.")
        if request.path.startswith("/api/") and not self.token_ok(request.headers.get("Authorization", "")):
            raise MemoriesError("dashboard_unauthorized")

    def token_ok(self, header: str) -> bool:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            presented = value.strip().encode("ascii")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(presented, self._token)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            self.check(request)
            response = await handler(request)
        except MemoriesError as exc:
            response = error_response(exc)
        except web.HTTPException as exc:
            # aiohttp's own 404/405: answer in the same typed shape, with our headers.
            code = "not_found" if exc.status == 404 else "invalid_request"
            response = web.json_response({"error": {"code": code, "message": exc.reason}}, status=exc.status)
        except Exception:
            # A bug must not become aiohttp's bare 500 without the headers below (issue 27):
            # the typed `internal` answer, the details only in the log (never a value).
            log.exception("dashboard: %s %s failed", request.method, request.path)
            response = error_response(MemoriesError("internal"))
        harden(response)
        return response


def harden(response: web.StreamResponse) -> None:
    headers = response.headers
    headers["Content-Security-Policy"] = CSP
    headers["X-Content-Type-Options"] = "nosniff"
    headers["X-Frame-Options"] = "DENY"
    headers["Referrer-Policy"] = "no-referrer"
    headers["Cross-Origin-Opener-Policy"] = "same-origin"
    headers["Cross-Origin-Resource-Policy"] = "same-origin"
    headers["Cache-Control"] = "no-store"
