"""``memories center serve|standby|promote|admin|info`` (issue 30; CT-2 … CT-4, docs/center.md).

The Center is its own process (``serve`` or ``standby``, in the foreground). The admin
commands are HTTP clients of a running Center: they read the admin token from
DIR/admin.token (so they run as the Center's user on its machine) and the Center's URL from
DIR/center.url, which the server writes when it listens; ``--url`` and ``--ca`` override.
Passwords come from a prompt or ``--password-stdin``, never from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from engine.cli import center_client_commands
from engine.cli.context import Context, UsageError
from engine.cli.password import read_password
from engine.errors import MemoriesError

__all__ = ["register", "PRIMARY_TOKEN_ENV"]

PRIMARY_TOKEN_ENV = "MEMORIES_CENTER_PRIMARY_TOKEN"  # noqa: S105 (a variable name)
_URL_FILE = "center.url"


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("center", parents=[common], help="run or administer a Center (team server; docs/center.md)")
    csub = p.add_subparsers(dest="center_command", metavar="ACTION", parser_class=type(p))

    def server_options(q: argparse.ArgumentParser) -> None:
        q.add_argument("--data", required=True, metavar="DIR", help="the Center's data directory")
        q.add_argument("--listen", default="127.0.0.1:8443", metavar="HOST:PORT", help="default 127.0.0.1:8443")
        q.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
        q.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
        q.add_argument("--store", metavar="sqlite|postgresql://…", help="the hosted store (default: SQLite in DIR/store)")
        q.add_argument(
            "--public-name", action="append", default=[], metavar="HOST[:PORT]", help="a Host name clients use (repeatable)"
        )
        q.add_argument("--rate", type=float, default=50.0, metavar="N", help="requests per second per grant (default 50)")
        q.add_argument("--burst", type=int, default=100, metavar="N", help="requests a grant may send at once (default 100)")

    s = csub.add_parser("serve", parents=[common], help="serve the hosted store, tickets and admin routes")
    server_options(s)
    s.set_defaults(func=cmd_serve)

    s = csub.add_parser("standby", parents=[common], help=f"copy a primary's rows until promoted (token in ${PRIMARY_TOKEN_ENV})")
    server_options(s)
    s.add_argument("--primary", required=True, metavar="URL", help="the primary Center's URL")
    s.add_argument("--ca", metavar="FILE", help="trust this CA certificate for the primary")
    s.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="ask the primary at least this often")
    s.add_argument("--batch", type=int, default=500, metavar="N", help="rows per request (default 500)")
    s.set_defaults(func=cmd_standby)

    s = csub.add_parser("promote", parents=[common], help="make a caught-up standby the primary (new generation)")
    _client_options(s)
    s.add_argument("--password-stdin", action="store_true", help="read the operator password from standard input")
    s.set_defaults(func=cmd_promote)

    s = csub.add_parser("info", parents=[common], help="print a Center's public key and fingerprint (to pin)")
    s.add_argument("url", metavar="URL", help="the Center's URL")
    s.add_argument("--ca", metavar="FILE", help="trust this CA certificate")
    s.set_defaults(func=cmd_info)

    # The daemon side (`center ticket apply|list`): engine/cli/center_client_commands.py.
    center_client_commands.add_actions(csub, common)

    a = csub.add_parser("admin", parents=[common], help="unlock|lock|status|grant of a running Center")
    asub = a.add_subparsers(dest="admin_command", metavar="ACTION", parser_class=type(a))
    for word, helptext in (("unlock", "open the hosted store with the operator password"), ("lock", "lock the hosted store")):
        q = asub.add_parser(word, parents=[common], help=helptext)
        _client_options(q)
        if word == "unlock":
            q.add_argument("--password-stdin", action="store_true", help="read the operator password from standard input")
        q.set_defaults(func=cmd_admin_simple, admin_word=word)
    q = asub.add_parser("status", parents=[common], help="role, generation, lock, store kind, counts and encryption")
    _client_options(q)
    q.set_defaults(func=cmd_admin_simple, admin_word="status")
    g = asub.add_parser("grant", parents=[common], help="grant new|list|revoke")
    gsub = g.add_subparsers(dest="grant_command", metavar="ACTION", parser_class=type(g))
    q = gsub.add_parser("new", parents=[common], help="a named grant: prints its token once and a signed ticket")
    _client_options(q)
    q.add_argument("name", metavar="NAME", help="a name for the grant (its member, agent or device)")
    q.add_argument(
        "--scope",
        required=True,
        choices=("read", "write", "read_write", "read_write_delete", "allow_all"),
        help="what the grant may do, as for an MCP grant",
    )
    q.add_argument("--vault", action="append", required=True, metavar="V", help="a vault the grant covers (repeatable)")
    q.add_argument("--expires", metavar="DURATION", help="e.g. 30d, 12h, 90m (default: no expiry; its ticket: one year)")
    q.add_argument("--device", metavar="FINGERPRINT", help="a device registration ticket for this device")
    q.set_defaults(func=cmd_grant_new)
    q = gsub.add_parser("list", parents=[common], help="every grant (never a token)")
    _client_options(q)
    q.set_defaults(func=cmd_grant_list)
    q = gsub.add_parser("revoke", parents=[common], help="revoke a grant; refused on its next call")
    _client_options(q)
    q.add_argument("name", metavar="NAME", help="the grant to revoke")
    q.set_defaults(func=cmd_grant_revoke)
    g.set_defaults(func=lambda ctx, args: (g.print_help(), 2)[1])
    a.set_defaults(func=lambda ctx, args: (a.print_help(), 2)[1])
    p.set_defaults(func=lambda ctx, args: (p.print_help(), 2)[1])


def _client_options(q: argparse.ArgumentParser) -> None:
    q.add_argument("--data", required=True, metavar="DIR", help="the Center's data directory (admin token, URL)")
    q.add_argument("--url", metavar="URL", help="the Center's URL (default: the one it wrote to DIR/center.url)")
    q.add_argument("--ca", metavar="FILE", help="trust this CA certificate")


# -- serving ---------------------------------------------------------------------------------
def _options(args: argparse.Namespace) -> Any:
    from engine.center.server import CenterOptions
    from engine.sync.transport import is_loopback, server_ssl

    host, sep, port_text = args.listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit():
        raise UsageError("--listen takes HOST:PORT")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if not is_loopback(host) and not args.tls_cert:
        raise MemoriesError("invalid_input", "A Center outside this machine is always HTTPS: pass --tls-cert and --tls-key.")
    store = args.store if args.store and args.store != "sqlite" else None
    if store is not None and not store.startswith(("postgresql://", "postgres://")):
        raise UsageError("--store is sqlite or a postgresql:// URL")
    return CenterOptions(
        data=Path(args.data).absolute(),
        host=host,
        port=int(port_text),
        tls=server_ssl(args.tls_cert, args.tls_key) if args.tls_cert else None,
        store_url=store,
        public_names=tuple(args.public_name),
        rate=args.rate,
        burst=args.burst,
    )


def _run(options: Any) -> int:
    from engine.center.replica import open_target
    from engine.center.server import run_center
    from engine.service.hosted import HostedStore

    store_dir = options.data / "store"
    scheme = "https" if options.tls else "http"
    options.ready_file = options.data / _URL_FILE
    try:
        return run_center(
            options, lambda: HostedStore(store_dir, options.store_url), lambda: open_target(store_dir, options.store_url)
        )
    except OSError as exc:
        where = f"{options.host}:{options.port} as {scheme}"
        raise MemoriesError("invalid_input", f"Cannot listen on {where} ({exc.strerror or 'in use'}).") from None


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    return _run(_options(args))


def cmd_standby(ctx: Context, args: argparse.Namespace) -> int:
    options = _options(args)
    token = os.environ.get(PRIMARY_TOKEN_ENV)
    if not token:
        raise UsageError(f"set ${PRIMARY_TOKEN_ENV} to the primary's admin token")
    options.primary = args.primary
    options.primary_token = token
    options.primary_ca = args.ca
    options.interval = max(0.05, args.interval)
    options.batch = max(1, min(2000, args.batch))
    return _run(options)


# -- admin client ------------------------------------------------------------------------------
def _request(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None, *, admin: bool = True) -> Any:
    data_dir = Path(args.data) if getattr(args, "data", None) else None
    url = getattr(args, "url", None)
    if url is None and data_dir is not None:
        try:
            url = json.loads((data_dir / _URL_FILE).read_text("utf-8"))["url"]
        except (OSError, ValueError, KeyError):
            raise MemoriesError(
                "center_unavailable", "No Center is listening for this data directory (no center.url); pass --url."
            ) from None
    if not str(url).startswith(("http://", "https://")):
        raise UsageError("--url must be an http:// or https:// URL")
    headers = {"Content-Type": "application/json"}
    if admin and data_dir is not None:
        try:
            headers["Authorization"] = "Bearer " + (data_dir / "admin.token").read_text("ascii").strip()
        except OSError:
            raise MemoriesError("permission_denied", "The admin token (DIR/admin.token) could not be read.") from None
    context = ssl.create_default_context(cafile=args.ca) if getattr(args, "ca", None) else None
    request = urllib.request.Request(  # noqa: S310 (http/https only, checked above)
        str(url).rstrip("/") + path,
        data=json.dumps(body).encode("utf-8") if body is not None else None,
        method=method,
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=120, context=context) as response:  # noqa: S310 (http/https only)
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read())["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            raise MemoriesError("center_unavailable", f"The Center answered HTTP {exc.code}.") from None
        raise MemoriesError(code if code in _known_codes() else "center_unavailable", message) from None
    except (urllib.error.URLError, OSError) as exc:
        raise MemoriesError("center_unavailable", f"The Center could not be reached ({type(exc).__name__}).") from None


def _known_codes() -> frozenset[str]:
    from engine.errors import CODES

    return frozenset(CODES)


def cmd_admin_simple(ctx: Context, args: argparse.Namespace) -> int:
    word = args.admin_word
    if word == "unlock":
        password = read_password(args.password_stdin, prompt="Center operator password: ")
        result = _request(args, "POST", "/v1/admin/unlock", {"password": password})
        ctx.emit(result, "unlocked")
    elif word == "lock":
        ctx.emit(_request(args, "POST", "/v1/admin/lock", {}), "locked")
    else:
        status = _request(args, "GET", "/v1/admin/status")
        lines = [
            f"role: {status.get('role')}   generation: {status.get('generation')}   locked: {status.get('locked')}",
            f"store: {status.get('store')}   grants: {status.get('grants')}   vaults: {status.get('vaults', '-')}   "
            f"items: {status.get('items', '-')}",
            f"key fingerprint: {status.get('fingerprint')}",
            "encryption: SERVER-SIDE. The hosted store is sealed with the operator's password;",
            "            the operator (whoever holds that password) can read hosted content.",
        ]
        standby = status.get("standby")
        if isinstance(standby, dict):
            lines.append(
                f"standby of {standby.get('primary')}: {standby.get('last_seq')} of {standby.get('primary_last_seq')} commits, "
                f"caught up: {standby.get('caught_up')}"
            )
        ctx.emit(status, "\n".join(lines))
    return 0


_DURATION = re.compile(r"(\d+)([smhd])")


def _expires_ms(text: str) -> int:
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise UsageError("--expires takes a duration such as 30d, 12h, 90m or 45s")
    seconds = int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    if seconds <= 0:
        raise UsageError("--expires must be positive")
    return int(time.time() * 1000) + seconds * 1000


def cmd_grant_new(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "scope": args.scope, "vaults": args.vault}
    if args.expires:
        body["expires_ms"] = _expires_ms(args.expires)
    if args.device:
        body.update(kind="device", device=args.device)
    result = _request(args, "POST", "/v1/admin/grants", body)
    ctx.emit(
        result,
        f"grant {result['name']}: token (shown once; give it to the member): {result['token']}\n"
        f"signed ticket (for `memories center ticket apply`): {result['ticket']}",
    )
    return 0


def cmd_grant_list(ctx: Context, args: argparse.Namespace) -> int:
    result = _request(args, "GET", "/v1/admin/grants")
    rows = [
        f"{g['name']:<20} {g['scope']:<18} {','.join(g['vaults']):<20} gen {g['generation']}"
        f"{'  revoked' if g['revoked'] else ''}  {g['hint']}"
        for g in result["grants"]
    ]
    ctx.emit(result, "\n".join(rows) if rows else "no grants")
    return 0


def cmd_grant_revoke(ctx: Context, args: argparse.Namespace) -> int:
    from urllib.parse import quote

    ctx.emit(_request(args, "DELETE", "/v1/admin/grants/" + quote(args.name, safe="")), f"revoked {args.name}")
    return 0


def cmd_promote(ctx: Context, args: argparse.Namespace) -> int:
    password = read_password(args.password_stdin, prompt="Center operator password: ")
    result = _request(args, "POST", "/v1/admin/promote", {"password": password})
    ctx.emit(result, f"promoted: primary of generation {result['generation']}")
    return 0


def cmd_info(ctx: Context, args: argparse.Namespace) -> int:
    args.data = None
    info = _request(args, "GET", "/v1/info", admin=False)
    ctx.emit(info, f"key: {info.get('key')}\nfingerprint: {info.get('fingerprint')}\ngeneration: {info.get('generation')}")
    sys.stdout.flush()
    return 0
