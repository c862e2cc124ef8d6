"""Browser OAuth 2.0 with PKCE (S256) and a loopback redirect for OneDrive and Google Drive
(CL-1, CL-2; docs/cloud.md "Signing in").

The endpoints are pinned. Only tests point them elsewhere, with
``MEMORIES_CLOUD_TEST_BASE_ONEDRIVE`` / ``MEMORIES_CLOUD_TEST_BASE_GDRIVE``: accepted only as
an ``http://`` URL on loopback, otherwise ignored.

The PKCE verifier is made here and never leaves the engine: the CLI gets the authorize URL
(which carries only the S256 challenge and the state) and hands back the code and the state.
Tokens are returned only to the engine's sealed account record (:class:`Tokens`).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

from engine.cloud.http import Answer, call
from engine.errors import MemoriesError
from engine.lazy_import import LazyModule

if TYPE_CHECKING:
    import aiohttp
else:  # imported on first use: not on the engine's start path (engine/lazy_import.py)
    aiohttp = LazyModule("aiohttp")

__all__ = [
    "Provider",
    "provider",
    "pkce_pair",
    "authorize_url",
    "exchange_code",
    "Tokens",
    "check_redirect",
    "Authorizer",
    "OAuthClient",
    "OAUTH_KINDS",
]

OAUTH_KINDS = ("onedrive", "gdrive")
_TEST_ENV = "MEMORIES_CLOUD_TEST_BASE_"


@dataclass(frozen=True)
class Provider:
    kind: str
    authorize: str
    token: str
    api: str
    upload: str
    scope: str
    rotates_refresh: bool


_PINNED = {
    "onedrive": Provider(
        "onedrive",
        "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
        "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        "https://graph.microsoft.com/v1.0",
        "https://graph.microsoft.com/v1.0",
        "Files.ReadWrite.AppFolder offline_access",
        True,
    ),
    "gdrive": Provider(
        "gdrive",
        "https://accounts.google.com/o/oauth2/v2/auth",
        "https://oauth2.googleapis.com/token",
        "https://www.googleapis.com/drive/v3",
        "https://www.googleapis.com/upload/drive/v3",
        "https://www.googleapis.com/auth/drive.appdata",
        False,
    ),
}


def _loopback_http(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return parts.hostname == "localhost"


def provider(kind: str) -> Provider:
    pinned = _PINNED.get(kind)
    if pinned is None:
        raise MemoriesError("invalid_input", "Browser sign-in is for onedrive or gdrive.")
    base = os.environ.get(_TEST_ENV + kind.upper(), "").rstrip("/")
    if not base or not _loopback_http(base):
        return pinned
    api = base + ("/v1.0" if kind == "onedrive" else "/drive/v3")
    upload = api if kind == "onedrive" else base + "/upload/drive/v3"
    return Provider(kind, base + "/authorize", base + "/token", api, upload, pinned.scope, pinned.rotates_refresh)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge) per RFC 7636."""
    verifier = _b64url(secrets.token_bytes(32))
    return verifier, _b64url(hashlib.sha256(verifier.encode()).digest())


def check_redirect(uri: str) -> str:
    """The redirect URI must be the CLI's loopback listener (RFC 8252 §7.3)."""
    parts = urlsplit(uri)
    if not _loopback_http(uri) or parts.port is None or parts.query or parts.fragment:
        raise MemoriesError("invalid_input", "The sign-in redirect must be http://127.0.0.1:PORT/… on this machine.")
    return uri


def authorize_url(p: Provider, client_id: str, redirect_uri: str, challenge: str, state: str) -> str:
    query = {
        "client_id": client_id,
        "response_type": "code",
        "redirect_uri": redirect_uri,
        "scope": p.scope,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    if p.kind == "gdrive":
        query.update(access_type="offline", prompt="consent")
    return f"{p.authorize}?{urlencode(query)}"


@dataclass
class Tokens:
    """The account secret of an OAuth account (sealed, device-local; CL-2)."""

    client_id: str
    client_secret: str
    refresh_token: str
    access_token: str = ""
    expires_ms: int = 0

    def to_secret(self) -> dict[str, str]:
        return {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "refresh_token": self.refresh_token,
            "access_token": self.access_token,
            "expires_ms": str(self.expires_ms),
        }

    @classmethod
    def from_secret(cls, secret: dict[str, str]) -> Tokens:
        return cls(
            secret.get("client_id", ""),
            secret.get("client_secret", ""),
            secret.get("refresh_token", ""),
            secret.get("access_token", ""),
            int(secret.get("expires_ms", "0") or 0),
        )


async def _token_request(session: aiohttp.ClientSession, p: Provider, form: dict[str, str]) -> dict[str, object]:
    answer = await call(
        session,
        "POST",
        p.token,
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
        data=urlencode(form).encode(),
    )
    body = answer.json()
    if answer.status != 200 or not isinstance(body.get("access_token"), str):
        error = str(body.get("error", ""))
        if form["grant_type"] == "refresh_token" and error in ("invalid_grant", "unauthorized_client", "invalid_client"):
            raise MemoriesError(
                "cloud_login_required",
                f"The sign-in for this {p.kind} account expired or was revoked; "
                f"run `memories sudo && memories cloud login {p.kind} --name NAME` again.",
            )
        if form["grant_type"] == "authorization_code":
            raise MemoriesError("cloud_login_refused", "The provider refused the sign-in code; nothing was stored.")
        raise MemoriesError("cloud_denied", "The provider refused this account's sign-in.")
    return body


def _apply(tokens: Tokens, body: dict[str, object]) -> None:
    tokens.access_token = str(body["access_token"])
    if isinstance(body.get("refresh_token"), str) and body["refresh_token"]:
        tokens.refresh_token = str(body["refresh_token"])
    expires = body.get("expires_in", 3600)
    seconds = int(expires) if isinstance(expires, (int, str)) and str(expires).isdigit() else 3600
    tokens.expires_ms = int(time.time() * 1000) + seconds * 1000


async def exchange_code(p: Provider, client_id: str, client_secret: str, redirect_uri: str, code: str, verifier: str) -> Tokens:
    form = {
        "grant_type": "authorization_code",
        "client_id": client_id,
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
    }
    if client_secret:
        form["client_secret"] = client_secret
    async with aiohttp.ClientSession() as session:
        body = await _token_request(session, p, form)
    if not isinstance(body.get("refresh_token"), str) or not body["refresh_token"]:
        raise MemoriesError("cloud_login_refused", "The provider gave no refresh token (offline access); nothing was stored.")
    tokens = Tokens(client_id, client_secret, str(body["refresh_token"]))
    _apply(tokens, body)
    return tokens


class Authorizer:
    """Bearer tokens for one account's transport: the stored access token while it is fresh,
    else a refresh_token grant. ``changed`` tells the worker to persist the new tokens."""

    def __init__(self, p: Provider, tokens: Tokens) -> None:
        self.provider = p
        self.tokens = tokens
        self.changed = False

    async def bearer(self, session: aiohttp.ClientSession, force: bool = False) -> dict[str, str]:
        now = int(time.time() * 1000)
        if force or not self.tokens.access_token or self.tokens.expires_ms - 60_000 <= now:
            form = {"grant_type": "refresh_token", "client_id": self.tokens.client_id, "refresh_token": self.tokens.refresh_token}
            if self.provider.kind == "onedrive":
                form["scope"] = self.provider.scope
            if self.tokens.client_secret:
                form["client_secret"] = self.tokens.client_secret
            _apply(self.tokens, await _token_request(session, self.provider, form))
            self.changed = True
        return {"Authorization": f"Bearer {self.tokens.access_token}"}


class OAuthClient:
    """An aiohttp session (made inside the running loop) whose calls carry the account's bearer
    token; a 401 refreshes the token once and repeats the call."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def authed(
        self, method: str, url: str, *, headers: dict[str, str] | None = None, data: bytes | None = None, max_bytes: int = 4 << 20
    ) -> Answer:
        session = self.session()
        for force in (False, True):
            auth = await self.authorizer.bearer(session, force=force)
            answer = await call(session, method, url, headers={**(headers or {}), **auth}, data=data, max_bytes=max_bytes)
            if answer.status != 401:
                return answer
        raise MemoriesError("cloud_denied", "The storage refused this account's token even after a refresh.")

    async def plain(
        self, method: str, url: str, *, headers: dict[str, str] | None = None, data: bytes | None = None, max_bytes: int = 4 << 20
    ) -> Answer:
        """A pre-authorized URL (upload session, download URL): no bearer token is sent."""
        return await call(self.session(), method, url, headers=headers, data=data, max_bytes=max_bytes)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
