"""The Center's HTTP server (CT-2, CT-4): docs/center.md's API, version 1, on aiohttp.

One process per data directory. As a **primary** it serves the content RPC of its hosted
store (``/v1/rpc``, authorized per grant and vault by the backend, engine/service/hosted.py),
the ticket status, the admin routes and the replication rows. As a **standby** it copies a
primary's sealed rows (engine/center/replica.py) and answers info, status and promote only.

Every request passes the same gate first: Host must name this listener (or a ``--public-name``),
a browser's cross-site request is refused (Origin, Sec-Fetch-Site), bodies are at most 1 MiB.
Every answer is logged as one JSON line in DIR/access.log naming the grant, route, op, status
and error code: never a body, a token or a password.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import secrets
import ssl
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from logging.handlers import WatchedFileHandler
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from nacl.signing import SigningKey

from engine.center.datadir import CenterDir, SealedKey, key_fingerprint, public_key_text
from engine.center.limits import RateLimiter
from engine.center.members import Member, Members, new_grant_token, token_hint, token_sha256
from engine.center.replica import ReplicaTarget, decode_batch, encode_batch
from engine.center.tickets import TICKET_SCOPES, issue_ticket, ticket_body
from engine.errors import MemoriesError

__all__ = ["Backend", "CenterOptions", "CenterServer", "run_center", "STATUS"]

log = logging.getLogger("memories.center")

MAX_BODY = 1024 * 1024
DEFAULT_TICKET_DAYS = 365
REPLICA_LIMIT_MAX = 2000

STATUS: dict[str, int] = {
    "invalid_request": 400,
    "invalid_input": 400,
    "unknown_op": 400,
    "unknown_field": 400,
    "invalid_json": 400,
    "ambiguous_id": 400,
    "unauthorized": 401,
    "scope_denied": 403,
    "permission_denied": 403,
    "stale_generation": 403,
    "dashboard_forbidden": 403,
    "elevation_required": 403,
    "read_only": 403,
    "not_found": 404,
    "conflict": 409,
    "stale_base": 409,
    "grant_exists": 409,
    "center_behind": 409,
    "already_initialized": 409,
    "too_large": 413,
    "center_locked": 423,
    "wrong_password": 403,
    "rate_limited": 429,
    "center_unavailable": 503,
    "busy": 503,
    "store_in_use": 503,
}


_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Backend(Protocol):
    """The hosted store (engine/service/hosted.py), as the server uses it."""

    kind: str

    @property
    def initialized(self) -> bool: ...

    @property
    def locked(self) -> bool: ...

    def counts(self) -> dict[str, int]: ...

    def vault_names(self) -> list[str]: ...

    def unlock(self, password: str) -> bool: ...

    def lock(self) -> None: ...

    def ensure_vaults(self, names: list[str]) -> None: ...

    def call(self, name: str, scope: str, vaults: tuple[str, ...], body: dict[str, Any]) -> dict[str, Any]: ...

    def replica_rows(self, after: int, content_after: int, limit: int) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class CenterOptions:
    data: Path
    host: str = "127.0.0.1"
    port: int = 8443
    tls: ssl.SSLContext | None = None
    store_url: str | None = None
    public_names: tuple[str, ...] = ()
    rate: float = 50.0
    burst: int = 100
    # standby
    primary: str | None = None
    primary_token: str | None = None
    primary_ca: str | None = None
    interval: float = 1.0
    batch: int = 500
    ready_file: Path | None = None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error(exc: MemoriesError) -> web.Response:
    status = STATUS.get(exc.code, 500)
    response = web.json_response({"error": {"code": exc.code, "message": exc.message}}, status=status)
    retry = exc.details.get("retry_after")
    if exc.code == "rate_limited" and isinstance(retry, int):
        response.headers["Retry-After"] = str(retry)
    return response


def _bearer(request: web.Request) -> str:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise MemoriesError("unauthorized", "This route needs `Authorization: Bearer TOKEN`.")
    return value.strip()


async def _json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = json.loads(raw)
    except RecursionError:
        raise MemoriesError("invalid_request", "The request body is nested too deeply.") from None
    except (ValueError, UnicodeDecodeError):
        raise MemoriesError("invalid_request", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise MemoriesError("invalid_request", "The request body must be a JSON object.")
    return data


def _access_logger(path: Path) -> logging.Logger:
    logger = logging.getLogger(f"memories.center.access.{path}")
    logger.propagate = False
    if not logger.handlers:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(fd)
        handler = WatchedFileHandler(path)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger


@dataclass
class _Standby:
    """What the replication loop knows of its primary."""

    primary_last_seq: int | None = None
    primary_last_content_seq: int | None = None
    reachable: bool = False
    last_error: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class CenterServer:
    def __init__(self, options: CenterOptions, open_backend: Callable[[], Backend], open_target: Callable[[], ReplicaTarget]):
        self.options = options
        self.dir = CenterDir(options.data)
        self.dir.prepare()  # refuses group/other-readable credential files (CT-2)
        self.role = self.dir.load_role()
        self.members = Members(self.dir.members_file)
        self.limiter = RateLimiter(options.rate, options.burst)
        self.access = _access_logger(self.dir.access_log)
        self._open_backend = open_backend
        self._open_target = open_target
        self.backend: Backend | None = None
        self.target: ReplicaTarget | None = None
        self.signing_key: SigningKey | None = None
        self.executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="memories-center")
        self.standby = _Standby()
        self.port = options.port
        self._task: asyncio.Task[None] | None = None
        self._admin_lock = asyncio.Lock()

    # -- helpers -------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _public(self) -> bytes | None:
        return base64.b64decode(self.role.public_key) if self.role.public_key else None

    def info(self) -> dict[str, Any]:
        public = self._public()
        return {
            "service": "memories-center",
            "version": 1,
            "key": self.role.public_key,
            "fingerprint": key_fingerprint(public) if public else None,
            "generation": self.role.generation,
            "role": self.role.role,
            "locked": self.backend is None or self.backend.locked or self.signing_key is None,
            "encryption": "server-side",
        }

    def _require_admin(self, request: web.Request) -> None:
        request["grant"] = "admin"
        if not self.dir.admin_token_ok(_bearer(request)):
            raise MemoriesError("unauthorized", "The admin token is missing or wrong.")

    def _require_primary(self) -> Backend:
        if self.role.fenced:
            raise MemoriesError("stale_generation", "A standby took over from this Center; it serves nothing any more.")
        if self.role.role != "primary" or self.backend is None:
            raise MemoriesError("center_unavailable", "This Center is a standby; it serves no content until promoted.")
        return self.backend

    def _unlocked(self) -> tuple[Backend, SigningKey]:
        backend = self._require_primary()
        if backend.locked or self.signing_key is None:
            raise MemoriesError("center_locked")
        return backend, self.signing_key

    # -- middleware ------------------------------------------------------------------------
    def allowed_hosts(self) -> frozenset[str]:
        port = self.port
        names = {f"{self.options.host}:{port}", f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
        for name in self.options.public_names:
            names.add(name if ":" in name else f"{name}:{port}")
        return frozenset(names)

    def _check_request(self, request: web.Request) -> None:
        hosts = self.allowed_hosts()
        if request.headers.get("Host", "") not in hosts:
            raise MemoriesError("dashboard_forbidden", "The Host header does not name this Center.")
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            raise MemoriesError("dashboard_forbidden", "A cross-site browser request was refused.")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"{scheme}://{h}" for h in hosts for scheme in ("https", "http")}:
            raise MemoriesError("dashboard_forbidden", "A request from another origin was refused.")

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        started = time.perf_counter()
        code = None
        try:
            self._check_request(request)
            response = await handler(request)
        except MemoriesError as exc:
            code = exc.code
            response = _error(exc)
        except web.HTTPException as exc:
            code = {404: "not_found", 413: "too_large"}.get(exc.status, "invalid_request")
            message = "The request body exceeds 1 MiB." if exc.status == 413 else exc.reason
            response = web.json_response({"error": {"code": code, "message": message}}, status=exc.status)
        except Exception as exc:
            log.error("center: %s %s failed type=%s", request.method, request.path, type(exc).__name__)
            code = "internal"
            response = _error(MemoriesError("internal"))
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        entry = {
            "ts": _now_ms(),
            "grant": request.get("grant", "-"),
            "method": request.method,
            "route": request.match_info.route.resource.canonical if request.match_info.route.resource else request.path[:64],
            "op": request.get("op"),
            "status": response.status,
            "code": code,
            "ms": round((time.perf_counter() - started) * 1000, 2),
        }
        self.access.info(json.dumps(entry, ensure_ascii=True))
        return response

    # -- public routes ---------------------------------------------------------------------
    async def get_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.info())

    async def get_ticket(self, request: web.Request) -> web.Response:
        ticket_id = request.match_info["ticket_id"]
        member = self.members.by_ticket(ticket_id) if len(ticket_id) == 32 else None
        if member is None:
            status = "unknown"
        elif member.generation < self.role.generation or self.role.fenced:
            status = "revoked"
        else:
            status = member.status(_now_ms())
        return web.json_response({"status": status, "generation": self.role.generation})

    async def post_rpc(self, request: web.Request) -> web.Response:
        token = _bearer(request)
        member = self.members.authenticate(token)
        request["grant"] = member.name
        self._check_member(member)
        self.limiter.take(member.name)
        body = await _json(request)
        op = body.get("op")
        request["op"] = op if isinstance(op, str) and len(op) <= 40 else None
        backend, _ = self._unlocked()
        try:
            result = await self._run(backend.call, member.name, member.scope, member.vaults, body)
        except MemoriesError as exc:
            if exc.code == "locked":
                raise MemoriesError("center_locked") from None
            raise
        # Revoked while the op ran: the answer is not delivered (as for an MCP grant).
        self._check_member(self.members.authenticate(token))
        return web.json_response({"result": result})

    def _check_member(self, member: Member) -> None:
        if self.role.fenced:
            raise MemoriesError("stale_generation", "A standby took over from this Center; it serves nothing any more.")
        if member.revoked_ms is not None:
            raise MemoriesError("unauthorized", "The Center grant token is missing, wrong or revoked.")
        if member.generation < self.role.generation:
            raise MemoriesError(
                "stale_generation", "This grant was issued before the Center's last takeover; ask the operator for a new one."
            )
        if member.expires_ms is not None and _now_ms() >= member.expires_ms:
            raise MemoriesError("unauthorized", "The Center grant has expired.")

    # -- admin routes ------------------------------------------------------------------------
    async def post_unlock(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        body = await _json(request)
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise MemoriesError("invalid_request", "`password` must be a non-empty string.")
        backend = self._require_primary()
        async with self._admin_lock:
            await self._run(backend.unlock, password)
            self.signing_key = await self._run(self._open_key, password)
        return web.json_response({"locked": False})

    def _open_key(self, password: str) -> SigningKey:
        sealed = self.dir.sealed_key()
        if sealed is None:  # first unlock: the Center's signing key is made now, sealed by this password
            sealed, key = SealedKey.create(password)
            self.dir.save_key(sealed)
            self.role = replace(self.role, public_key=public_key_text(sealed.public))
            self.dir.save_role(self.role)
            return key
        return sealed.open(password)

    async def post_lock(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        backend = self._require_primary()
        async with self._admin_lock:
            self.signing_key = None
            await self._run(backend.lock)
        return web.json_response({"locked": True})

    async def get_status(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        status: dict[str, Any] = {
            **self.info(),
            "store": self.backend.kind if self.backend is not None else ("postgresql" if self.options.store_url else "sqlite"),
            "grants": sum(1 for m in self.members.all() if m.revoked_ms is None),
            "encryption_note": (
                "Server-side encryption: the hosted store is sealed with the operator's password, "
                "and whoever holds it (the operator) can read hosted content."
            ),
            "fenced": self.role.fenced,
        }
        if self.backend is not None:
            status.update(self.backend.counts())
            status["vaults_named"] = self.backend.vault_names()
        if self.role.role == "standby":
            status["standby"] = await self._run(self._standby_view)
        return web.json_response(status)

    def _standby_view(self) -> dict[str, Any]:
        last_seq, last_content = self.target.position() if self.target is not None else (0, 0)
        return {
            "primary": self.role.primary,
            "last_seq": last_seq,
            "last_content_seq": last_content,
            "primary_last_seq": self.standby.primary_last_seq,
            "primary_reachable": self.standby.reachable,
            "caught_up": self._caught_up(last_seq, last_content),
            "last_error": self.standby.last_error,
        }

    def _caught_up(self, last_seq: int, last_content: int) -> bool:
        s = self.standby
        return (
            s.primary_last_seq is not None
            and s.primary_last_content_seq is not None
            and last_seq >= s.primary_last_seq
            and last_content >= s.primary_last_content_seq
            and last_seq > 0
        )

    async def post_grant(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        body = await _json(request)
        name, scope, vaults = body.get("name"), body.get("scope"), body.get("vaults")
        kind = body.get("kind", "grant")
        expires_ms = body.get("expires_ms")
        device = body.get("device")
        if not isinstance(name, str) or not 1 <= len(name) <= 64 or not name.isprintable():
            raise MemoriesError("invalid_request", "`name` must be 1 to 64 printable characters.")
        if scope not in TICKET_SCOPES:
            raise MemoriesError("invalid_request", f"`scope` is one of: {', '.join(TICKET_SCOPES)}.")
        if not isinstance(vaults, list) or not vaults or not all(isinstance(v, str) and 1 <= len(v) <= 64 for v in vaults):
            raise MemoriesError("invalid_request", "`vaults` must be a non-empty list of vault names.")
        if kind not in ("grant", "device") or (kind == "device") != isinstance(device, str):
            raise MemoriesError("invalid_request", "A device grant names its `device` fingerprint; a grant names none.")
        now = _now_ms()
        if expires_ms is not None and (not isinstance(expires_ms, int) or isinstance(expires_ms, bool) or expires_ms <= now):
            raise MemoriesError("invalid_request", "`expires_ms` must be a future time in milliseconds.")
        backend, key = self._unlocked()
        vault_list = list(dict.fromkeys(vaults))
        async with self._admin_lock:
            await self._run(backend.ensure_vaults, vault_list)
            token = new_grant_token()
            ticket_id = secrets.token_hex(16)
            ticket = issue_ticket(
                key,
                ticket_body(
                    kind=kind,
                    ticket_id=ticket_id,
                    center_public_key=bytes(key.verify_key),
                    generation=self.role.generation,
                    name=name,
                    scope=scope,
                    vaults=vault_list,
                    issued_ms=now,
                    expires_ms=expires_ms if expires_ms is not None else now + DEFAULT_TICKET_DAYS * 86_400_000,
                    device=device if kind == "device" else None,
                ),
            )
            member = Member(
                name=name,
                scope=scope,
                vaults=tuple(vault_list),
                token_sha256=token_sha256(token),
                hint=token_hint(token),
                generation=self.role.generation,
                created_ms=now,
                ticket_id=ticket_id,
                kind=kind,
                expires_ms=expires_ms,
                device=device if kind == "device" else None,
            )
            await self._run(self.members.add, member)
        return web.json_response({"name": name, "token": token, "ticket": ticket, "ticket_id": ticket_id})

    async def get_grants(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        return web.json_response({"grants": [m.view() for m in self.members.all()]})

    async def delete_grant(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        name = request.match_info["name"]
        async with self._admin_lock:
            await self._run(self.members.revoke, name, _now_ms())
        self.limiter.forget(name)
        return web.json_response({"revoked": name})

    # -- replication (primary side) ------------------------------------------------------------
    async def get_replica_rows(self, request: web.Request) -> web.Response:
        self._require_admin(request)
        backend = self._require_primary()
        try:
            after = int(request.query.get("after", "0"))
            content_after = int(request.query.get("content_after", "0"))
            limit = min(REPLICA_LIMIT_MAX, max(1, int(request.query.get("limit", "500"))))
        except ValueError:
            raise MemoriesError("invalid_request", "`after`, `content_after` and `limit` are integers.") from None
        rows = await self._run(backend.replica_rows, after, content_after, limit)
        return web.json_response(encode_batch(rows))

    async def get_replica_meta(self, request: web.Request) -> web.Response:
        """What a standby needs besides the rows: the sealed key, the grants (digests), the generation."""
        self._require_admin(request)
        self._require_primary()
        sealed = self.dir.sealed_key()
        members = json.loads(self.dir.members_file.read_text("utf-8"))
        return web.json_response(
            {
                "generation": self.role.generation,
                "key": base64.b64encode(sealed.to_bytes()).decode("ascii") if sealed else None,
                "members": members,
            }
        )

    async def post_fence(self, request: web.Request) -> web.Response:
        """A standby took over with a newer generation: this Center stops serving (CT-4)."""
        self._require_admin(request)
        body = await _json(request)
        generation = body.get("generation")
        if not isinstance(generation, int) or generation <= self.role.generation:
            raise MemoriesError("invalid_request", "`generation` must be newer than this Center's.")
        self.role = replace(self.role, fenced=True)
        await self._run(self.dir.save_role, self.role)
        self.signing_key = None
        if self.backend is not None:
            await self._run(self.backend.lock)
        return web.json_response({"fenced": True})

    # -- standby ---------------------------------------------------------------------------------
    def _client(self) -> aiohttp.ClientSession:
        ssl_ctx: ssl.SSLContext | bool = True
        if self.options.primary_ca:
            ssl_ctx = ssl.create_default_context(cafile=self.options.primary_ca)
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_ctx),
            timeout=aiohttp.ClientTimeout(total=60),
            headers={"Authorization": f"Bearer {self.options.primary_token or ''}"},
        )

    async def _primary_json(
        self, session: aiohttp.ClientSession, method: str, path: str, base: str | None = None, **kw: Any
    ) -> Any:
        url = (base or self.role.primary or "").rstrip("/") + path
        try:
            async with session.request(method, url, **kw) as response:
                data = await response.json(content_type=None)
                if response.status != 200:
                    code = data.get("error", {}).get("code", "protocol_error") if isinstance(data, dict) else "protocol_error"
                    raise MemoriesError(code if code in STATUS else "center_unavailable", "The primary refused the request.")
                return data
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise MemoriesError("center_unavailable", f"The primary could not be reached ({type(exc).__name__}).") from None

    async def _catch_up_once(self, session: aiohttp.ClientSession) -> bool:
        """Copy one batch; True when more is waiting."""
        target = self.target
        assert target is not None
        last_seq, last_content = await self._run(target.position)
        query = {"after": str(last_seq), "content_after": str(last_content), "limit": str(self.options.batch)}
        data = await self._primary_json(session, "GET", "/v1/replica/rows", params=query)
        batch = decode_batch(data)
        if batch.state or batch.content or last_seq == 0:
            await self._run(target.apply, batch)
        meta = await self._primary_json(session, "GET", "/v1/replica/meta")
        await self._run(self._apply_meta, meta)
        self.standby.primary_last_seq = batch.last_seq
        self.standby.primary_last_content_seq = batch.last_content_seq
        self.standby.reachable = True
        self.standby.last_error = None
        return len(batch.state) >= self.options.batch or len(batch.content) >= self.options.batch

    def _apply_meta(self, meta: Any) -> None:
        if not isinstance(meta, dict):
            return
        key = meta.get("key")
        if isinstance(key, str):
            sealed = SealedKey.from_bytes(base64.b64decode(key))
            if self.dir.sealed_key() != sealed:
                self.dir.save_key(sealed)
                self.role = replace(self.role, public_key=public_key_text(sealed.public))
        generation = meta.get("generation")
        if isinstance(generation, int) and generation > self.role.generation:
            self.role = replace(self.role, generation=generation)
        if self.dir.load_role() != self.role:
            self.dir.save_role(self.role)
        members = meta.get("members")
        if isinstance(members, dict) and isinstance(members.get("grants"), list):
            copied = [Member.from_json(m) for m in members["grants"]]
            if copied != self.members.all():
                self.members.replace_all(copied)

    async def _standby_loop(self) -> None:
        async with self._client() as session:
            while self.role.role == "standby":
                more = False
                try:
                    more = await self._catch_up_once(session)
                except MemoriesError as exc:
                    self.standby.reachable = exc.code != "center_unavailable"
                    self.standby.last_error = exc.code
                if not more:
                    self.standby.wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.standby.wake.wait(), timeout=self.options.interval)

    async def post_promote(self, request: web.Request) -> web.Response:
        """Take over (CT-4): only a complete copy, verified by unlocking it with the operator password."""
        self._require_admin(request)
        body = await _json(request)
        password = body.get("password")
        if not isinstance(password, str) or not password:
            raise MemoriesError("invalid_request", "`password` must be a non-empty string.")
        if self.role.role != "standby":
            raise MemoriesError("invalid_request", "This Center is already a primary.")
        async with self._admin_lock:
            assert self.target is not None
            # Ask the primary where it is now; when it is down, what it last said counts.
            with contextlib.suppress(MemoriesError):
                async with self._client() as session:
                    data = await self._primary_json(session, "GET", "/v1/replica/rows", params={"after": "0", "limit": "1"})
                    self.standby.primary_last_seq = int(data["last_seq"])
                    self.standby.primary_last_content_seq = int(data["last_content_seq"])
            last_seq, last_content = await self._run(self.target.position)
            if not self._caught_up(last_seq, last_content):
                self.standby.wake.set()  # copy now; the operator tries again once caught up
                raise MemoriesError(
                    "center_behind",
                    f"The standby has {last_seq} of the primary's {self.standby.primary_last_seq} commits; "
                    "it is catching up now.",
                )
            await self._run(self.target.close)
            self.target = None
            # Verify the copy in full: the unlock opens every row and checks the chain (store_corrupt otherwise).
            backend = await self._run(self._open_backend)
            try:
                await self._run(backend.unlock, password)
                key = await self._run(self._open_key, password)
            except BaseException:
                await self._run(backend.close)
                self.target = await self._run(self._open_target)
                raise
            old = self.role.primary
            self.role = replace(self.role, role="primary", generation=self.role.generation + 1, primary=None)
            await self._run(self.dir.save_role, self.role)
            self.backend, self.signing_key = backend, key
        fenced = False
        if old:
            with contextlib.suppress(MemoriesError):
                async with self._client() as session:
                    await self._primary_json(session, "POST", "/v1/replica/fence", old, json={"generation": self.role.generation})
                    fenced = True
        return web.json_response({"role": "primary", "generation": self.role.generation, "old_primary_fenced": fenced})

    # -- lifecycle --------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self.middleware])
        app.router.add_get("/v1/info", self.get_info)
        app.router.add_post("/v1/rpc", self.post_rpc)
        app.router.add_get("/v1/tickets/{ticket_id}", self.get_ticket)
        app.router.add_post("/v1/admin/unlock", self.post_unlock)
        app.router.add_post("/v1/admin/lock", self.post_lock)
        app.router.add_get("/v1/admin/status", self.get_status)
        app.router.add_post("/v1/admin/grants", self.post_grant)
        app.router.add_get("/v1/admin/grants", self.get_grants)
        app.router.add_delete("/v1/admin/grants/{name}", self.delete_grant)
        app.router.add_post("/v1/admin/promote", self.post_promote)
        app.router.add_get("/v1/replica/rows", self.get_replica_rows)
        app.router.add_get("/v1/replica/meta", self.get_replica_meta)
        app.router.add_post("/v1/replica/fence", self.post_fence)
        return app

    async def start(self) -> web.AppRunner:
        if self.role.role == "standby" or self.options.primary:
            if self.options.primary and self.role.role == "primary" and self.role.public_key is not None:
                # Its rows may hold writes the new primary never saw: a copy would not continue them.
                raise MemoriesError(
                    "invalid_input",
                    "This data directory holds a primary's store; a standby starts from a new, empty data directory.",
                )
            if self.options.primary:
                self.role = replace(self.role, role="standby", primary=self.options.primary)
                self.dir.save_role(self.role)
            self.target = await self._run(self._open_target)
        else:
            self.backend = await self._run(self._open_backend)
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.options.host, self.options.port, ssl_context=self.options.tls)
        await site.start()
        addresses = runner.addresses
        if addresses:
            self.port = int(addresses[0][1])
        if self.role.role == "standby":
            self._task = asyncio.create_task(self._standby_loop())
        return runner

    async def stop(self, runner: web.AppRunner) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await runner.cleanup()
        if self.backend is not None:
            await self._run(self.backend.close)
        if self.target is not None:
            await self._run(self.target.close)
        self.executor.shutdown(wait=True)


async def _serve(server: CenterServer) -> None:
    import signal

    runner = await server.start()
    scheme = "https" if server.options.tls else "http"
    url = f"{scheme}://{server.options.host}:{server.port}"
    print(f"memories center: {server.role.role} at {url} (generation {server.role.generation})", flush=True)
    if server.options.ready_file is not None:
        server.options.ready_file.write_text(json.dumps({"url": url, "port": server.port, "pid": os.getpid()}))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop(runner)


def run_center(options: CenterOptions, open_backend: Callable[[], Backend], open_target: Callable[[], ReplicaTarget]) -> int:
    os.umask(0o077)
    server = CenterServer(options, open_backend, open_target)
    asyncio.run(_serve(server))
    return 0
