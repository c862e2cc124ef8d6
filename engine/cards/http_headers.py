"""HTTP authentication headers built from a credential, and a request that cannot leak them (CD-6).

Header values that carry a secret (bearer tokens, cookies, basic credentials) are
wrapped in :class:`AuthHeader`, whose ``repr``/``str`` never show the value, so a log
line or a traceback cannot print it. :func:`send` never follows redirects (a redirect
would carry the header to another origin) and never puts a response body into an
error or a result: a server may echo the request, headers included.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import MemoriesError
from engine.lazy_import import LazyModule

if TYPE_CHECKING:
    import aiohttp
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    aiohttp = LazyModule("aiohttp")

__all__ = ["AuthHeader", "auth_headers", "headers_from_credential", "HttpOutcome", "send"]

_TOKEN_CHARS = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token (cookie and scheme names)
SCHEMES = ("bearer", "cookie", "basic")


@dataclass(frozen=True)
class AuthHeader:
    name: str
    value: str = field(repr=False)
    sensitive: bool = True

    def __str__(self) -> str:
        return f"{self.name}: ***" if self.sensitive else f"{self.name}: {self.value}"

    def __repr__(self) -> str:
        return f"AuthHeader({self.name!r}, sensitive={self.sensitive})"


def _header_safe(value: str, what: str) -> str:
    # CR/LF would let a stored value inject headers; NUL and other controls are never valid.
    if not value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise MemoriesError("invalid_input", f"The {what} is empty or contains control characters.")
    return value


def auth_headers(scheme: str, *, secret: str, user: str | None = None, cookie_name: str | None = None) -> list[AuthHeader]:
    """``bearer`` → Authorization: Bearer; ``cookie`` → Cookie: NAME=VALUE; ``basic`` → Authorization: Basic."""
    if scheme == "bearer":
        return [AuthHeader("Authorization", "Bearer " + _header_safe(secret, "token"))]
    if scheme == "cookie":
        if not cookie_name or not _TOKEN_CHARS.match(cookie_name):
            raise MemoriesError("invalid_input", "A cookie credential needs a cookie name made of token characters.")
        value = _header_safe(secret, "cookie value")
        if any(c in value for c in ';," \\'):
            raise MemoriesError("invalid_input", 'A cookie value cannot contain ; , " space or backslash.')
        return [AuthHeader("Cookie", f"{cookie_name}={value}")]
    if scheme == "basic":
        if user is None or ":" in user:
            raise MemoriesError("invalid_input", "Basic authentication needs a user name without ':'.")
        pair = f"{_header_safe(user, 'user name')}:{_header_safe(secret, 'password')}"
        return [AuthHeader("Authorization", "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii"))]
    raise MemoriesError("invalid_input", f"The HTTP auth scheme must be one of {', '.join(SCHEMES)}.")


def headers_from_credential(public: dict[str, Any], secret: dict[str, Any], scheme: str | None = None) -> list[AuthHeader]:
    """Headers for a stored credential (e.g. ``Credential.public``/``.secret`` from engine.vault.credentials).

    The scheme comes from the argument, else the credential's public ``http_scheme``,
    else ``bearer``; the secret is its ``token``, ``password`` or ``value`` field.
    """
    chosen = scheme or str(public.get("http_scheme", "bearer"))
    value = next((secret[k] for k in ("token", "password", "value") if isinstance(secret.get(k), str)), None)
    if value is None:
        raise MemoriesError("nothing_to_copy", "That credential holds no token or password for an HTTP header.")
    user = public.get("user") or public.get("account")
    cookie = public.get("cookie_name")
    return auth_headers(
        chosen,
        secret=value,
        user=str(user) if user is not None else None,
        cookie_name=str(cookie) if cookie is not None else None,
    )


@dataclass(frozen=True)
class HttpOutcome:
    """What a caller learns: status and non-sensitive metadata, never the body's text in errors."""

    status: int
    content_type: str
    body: bytes = field(repr=False)


async def send(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: list[AuthHeader],
    *,
    timeout_s: float = 30.0,
    max_body: int = 1024 * 1024,
    **kwargs: Any,
) -> HttpOutcome:
    """One request with redirects off; an error status raises ``http_error`` naming only the status."""
    plain = {h.name: h.value for h in headers}
    try:
        async with session.request(
            method,
            url,
            headers=plain,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            **kwargs,
        ) as response:
            if response.status >= 300:
                # Neither the body nor the Location (it may echo the request) leaves this function.
                kind = "a redirect, which is not followed" if response.status < 400 else "an error"
                raise MemoriesError("http_error", f"The server answered HTTP {response.status} ({kind}).")
            body = await response.content.read(max_body + 1)
            if len(body) > max_body:
                raise MemoriesError("http_error", "The response is larger than allowed; it was dropped.")
            return HttpOutcome(response.status, response.content_type, body)
    except aiohttp.ClientError as exc:
        # The exception text can include request headers in some versions: only its type is kept.
        raise MemoriesError("http_error", f"The HTTP request failed ({type(exc).__name__}).") from None
    except TimeoutError:
        raise MemoriesError("http_error", "The HTTP request timed out.") from None
