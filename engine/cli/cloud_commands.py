"""cloud add s3 | accounts | remove | sync (issue 21; CL-2, CL-3; docs/cloud.md).

S3 keys never come from config.toml: ``cloud add s3`` reads them from the environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) or, with ``--keys-stdin``, from two lines of
standard input; the engine stores them sealed on this device and never shows them again.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "ACCESS_KEY_ENV", "SECRET_KEY_ENV"]

ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 (a variable name)
_IPC_TIMEOUT = 4 * 3600.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    cloud = sub.add_parser(
        "cloud", parents=[common], help="sync through S3, OneDrive or Google Drive: add, login, accounts, remove, sync"
    )
    csub = cloud.add_subparsers(dest="cloud_command", metavar="COMMAND", parser_class=cloud.__class__)
    cloud.set_defaults(func=_usage(cloud))

    add = csub.add_parser("add", parents=[common], help="add a storage account (needs sudo)")
    asub = add.add_subparsers(dest="cloud_kind", metavar="PROVIDER", parser_class=cloud.__class__)
    add.set_defaults(func=_usage(add))
    p = asub.add_parser("s3", parents=[common], help="an S3-compatible bucket (AWS, R2, MinIO, Garage)")
    p.add_argument("--name", required=True, help="a short name for this account (letters, digits, . _ -)")
    p.add_argument("--endpoint", required=True, metavar="URL", help="the S3 endpoint, https:// (http:// only on loopback)")
    p.add_argument("--bucket", required=True, metavar="B", help="the bucket (it must exist)")
    p.add_argument("--prefix", default="", metavar="P", help="keep this device group's objects under this key prefix")
    p.add_argument("--region", default="", metavar="R", help="the bucket's region (default us-east-1)")
    p.add_argument(
        "--keys-stdin",
        action="store_true",
        help=f"read the access key ID and the secret key as two lines of stdin (else ${ACCESS_KEY_ENV}, ${SECRET_KEY_ENV})",
    )
    p.set_defaults(func=cmd_add_s3)

    p = csub.add_parser(
        "login", parents=[common], help="sign in to OneDrive or Google Drive in the browser (needs sudo; PKCE, loopback redirect)"
    )
    p.add_argument("provider", choices=("onedrive", "gdrive"), metavar="PROVIDER", help="onedrive or gdrive")
    p.add_argument("--name", default="", help="a short name for this account (default: the provider's name)")
    p.add_argument(
        "--client-id",
        default="",
        metavar="ID",
        help="your OAuth app's client ID (else $MEMORIES_ONEDRIVE_CLIENT_ID or $MEMORIES_GDRIVE_CLIENT_ID)",
    )
    p.add_argument("--no-browser", action="store_true", help="only print the sign-in URL; do not open a browser")
    p.add_argument("--wait", type=float, default=300.0, metavar="SECONDS", help="how long to wait for the browser (default 300)")
    p.set_defaults(func=cmd_login)

    p = csub.add_parser("accounts", parents=[common], help="the storage accounts: bucket, queue, last sync (never keys)")
    p.set_defaults(func=cmd_accounts)

    p = csub.add_parser("remove", parents=[common], help="remove a storage account (needs sudo; the bucket is left as it is)")
    p.add_argument("name", metavar="NAME", help="the account's name")
    p.set_defaults(func=cmd_remove)

    p = csub.add_parser(
        "sync",
        parents=[common],
        help="send your changes to the storage and merge what other devices put there "
        "(exit 1 when a device's writes are not arriving, or ours were not taken)",
        description="Send this device's changes to the storage and merge what the other devices put there. "
        "Exits 1 (and says which device, since when, and what to do) when a device's writes are not "
        "arriving here, when another device reports it has not taken ours (they are uploaded again), "
        "or when something in the storage was refused: see docs/cloud.md, 'When delivery stops'.",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the account (optional when there is only one)")
    p.add_argument("--watch", action="store_true", help="keep syncing every --interval seconds until Ctrl-C")
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS", help="--watch: how often (default 60)")
    p.set_defaults(func=cmd_sync)


def _usage(parser: argparse.ArgumentParser) -> Any:
    def show(ctx: Context, args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return show


def _keys(args: argparse.Namespace) -> tuple[str, str]:
    if args.keys_stdin:
        access = sys.stdin.readline().strip()
        secret = sys.stdin.readline().strip()
    else:
        access = os.environ.get(ACCESS_KEY_ENV, "").strip()
        secret = os.environ.get(SECRET_KEY_ENV, "").strip()
    if not access or not secret:
        raise MemoriesError(
            "invalid_input", f"No S3 keys: set {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or pass --keys-stdin with two lines."
        )
    return access, secret


def cmd_add_s3(ctx: Context, args: argparse.Namespace) -> int:
    access, secret = _keys(args)
    body: dict[str, Any] = {
        "op": "cloud_add",
        "kind": "s3",
        "name": args.name,
        "endpoint": args.endpoint,
        "bucket": args.bucket,
        "prefix": args.prefix,
        "region": args.region,
        "access_key_id": access,
        "secret_access_key": secret,
    }
    result = ctx.request(body, timeout=120)
    added = result["added"]
    ctx.emit(result, f"cloud account {one_line(added['name'])} added: s3 {one_line(added['endpoint'])} bucket {added['bucket']}")
    return 0


def cmd_accounts(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "cloud_accounts"})
    lines = []
    for row in result["accounts"]:
        where = f"{row['bucket']}/{row['prefix']}" if row["prefix"] else row["bucket"]
        line = f"{one_line(row['name']):<16} {row['kind']:<6} {one_line(row['endpoint'])}  {where}"
        line += f"  outbox {row['outbox']}  inbox {row['inbox']}"
        if row.get("not_arriving"):
            line += f"  NOT ARRIVING from {row['not_arriving']} device(s) (see `memories cloud sync`)"
        last = row.get("last")
        if last:
            delivery = "delivery stopped (see `memories cloud sync`)" if last.get("gaps") or last.get("not_taken") else "ok"
            line += f"  last sync: {'error [' + last['error'] + ']' if last.get('error') else delivery}"
        lines.append(line)
    ctx.emit(result, "\n".join(lines) or "no cloud accounts (add one: memories cloud add s3 …)")
    return 0


def cmd_remove(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "cloud_remove", "name": args.name})
    ctx.emit(result, f"cloud account {one_line(result['removed'])} removed (its bucket was not touched)")
    return 0


def _who(row: dict[str, Any]) -> str:
    """A device as `name (ID prefix…)`, the ID being what `memories devices` shows in full."""
    name = one_line(str(row["name"])) if row.get("name") else "(unnamed device)"
    return f"{name} ({str(row['device_id'])[:16]}…)"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000)) if ms else "an unknown time"


_GAP_WHY = {
    "missing": "objects of bundle #{seq} are not in the storage (or not their bytes)",
    "refused": "bundle #{seq} was refused",
    "absent": "bundle #{seq} is not in the storage though its sender or a later bundle says it was sent",
}
_TAKEN_WHY = {
    "missing": "it could not find all objects of our bundle #{seq}",
    "refused": "it refused what it found as our bundle #{seq}",
    "absent": "it found nothing where our bundle #{seq} should be",
}


def _report(result: dict[str, Any]) -> str:
    merged = result["merged"]
    added = sum(int(r.get("revisions_added", 0)) for r in merged)
    lines = [
        f"{one_line(result['account'])}: sent {result['uploaded']} bundle(s) ({result['requests']['sent_bytes']} B), "
        f"merged {len(merged)} (+{added} revisions), {len(result['pending'])} pending, {len(result['rejected'])} refused"
    ]
    for item in result["rejected"]:
        lines.append(f"  refused from device {item['from']}… #{item['seq']}: [{item['code']}] {one_line(item['message'])}")
    for item in result["pending"]:
        lines.append(f"  waiting for device {item['from']}… #{item['seq']}: retry in {item['retry_in_ms'] // 1000} s")
    if result["ignored"] or result["corrupt"]:
        lines.append(
            f"  ignored {result['ignored']} foreign key(s) and {result['corrupt']} object(s) whose bytes do not match their ID"
        )
    # CL-5: delivery that stopped, on the receiving side and (from the peers' marks) ours.
    for gap in result.get("gaps", []):
        why = _GAP_WHY.get(gap["why"], "bundle #{seq} was not taken").format(seq=gap["seq"])
        lines.append(
            f"NOT ARRIVING: the writes of device {_who(gap)} stop after #{gap['taken']} since {_when(gap['since_ms'])}: "
            f"{why} [{gap['code']}]."
        )
        lines.append(
            "  Run `memories cloud sync` on that device (it uploads again what was not taken), or sync with it directly "
            "(`memories sync`). If this keeps coming back, someone else can write to this storage: check who holds its keys."
        )
    for row in result.get("not_taken", []):
        why = _TAKEN_WHY.get(row["why"], "it has not taken our bundle #{seq}").format(seq=row["seq"])
        action = (
            "uploaded it again: that device takes it on its next `memories cloud sync`; if this keeps coming back, "
            "someone else can write to this storage"
            if row["uploaded_again"]
            else "uploading it again cannot help: sync with that device directly (`memories sync`)"
        )
        lines.append(
            f"NOT TAKEN: device {_who(row)} has not taken our writes since {_when(row['since_ms'])}: {why} "
            f"[{row['code']}]; {action}."
        )
    for row in result.get("marks_refused", []):
        lines.append(f"  the delivery marks of device {_who(row)} were refused: [{row['code']}] {one_line(row['message'])}")
    return "\n".join(lines)


def _delivery_failed(result: dict[str, Any]) -> bool:
    """CL-5: a sync that left a device's writes not arriving here, found ours not taken, or
    refused what the storage held, is not a success (exit 1), as `memories sync` does."""
    return bool(result.get("gaps") or result.get("not_taken") or result.get("marks_refused") or result.get("rejected"))


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


def cmd_sync(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "cloud_sync"}
    if args.name:
        body["name"] = args.name
    tty = sys.stderr.isatty() and not ctx.json_output
    if not args.watch:
        if tty:
            print("syncing with the storage…", file=sys.stderr, flush=True)
        result = ctx.request(body, timeout=_IPC_TIMEOUT)
        ctx.emit(result, _report(result))
        return 1 if _delivery_failed(result) else 0
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        while True:
            try:
                result = ctx.request(body, timeout=_IPC_TIMEOUT)
                ctx.emit(result, _report(result))
            except MemoriesError as exc:
                if exc.code in ("locked", "not_initialized", "not_found", "cloud_denied"):
                    raise
                print(f"memories: cloud sync failed [{exc.code}]: {one_line(exc.message)}; retrying", file=sys.stderr)
            sys.stdout.flush()
            time.sleep(max(1.0, args.interval))
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


_CLIENT_ENV = {"onedrive": "MEMORIES_ONEDRIVE_CLIENT_ID", "gdrive": "MEMORIES_GDRIVE_CLIENT_ID"}
_GDRIVE_SECRET_ENV = "MEMORIES_GDRIVE_CLIENT_SECRET"  # noqa: S105 (a variable name)
_DONE_PAGE = b"<!doctype html><title>Memories</title><p>Signed in. You can close this tab and go back to the terminal.</p>"


def cmd_login(ctx: Context, args: argparse.Namespace) -> int:
    """CL-1: a loopback listener on 127.0.0.1:random, the authorize URL from the engine (which
    keeps the PKCE verifier), the browser, then the code and state back to the engine."""
    import http.server
    import threading
    import urllib.parse
    import webbrowser

    client_id = args.client_id or os.environ.get(_CLIENT_ENV[args.provider], "")
    if not client_id:
        raise UsageError(f"give --client-id or set ${_CLIENT_ENV[args.provider]} (your OAuth app's client ID)")
    got: dict[str, str] = {}
    arrived = threading.Event()

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            if parts.path != "/callback" or arrived.is_set() or not ("code" in query or "error" in query):
                self.send_error(404)
                return
            got.update(query)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(_DONE_PAGE)))
            self.end_headers()
            self.wfile.write(_DONE_PAGE)
            arrived.set()

        def log_message(self, format: str, *args: Any) -> None:  # the URL carries the code: never logged
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        begin = ctx.request(
            {
                "op": "cloud_login_begin",
                "kind": args.provider,
                "name": args.name or args.provider,
                "client_id": client_id,
                "client_secret": os.environ.get(_GDRIVE_SECRET_ENV, "") if args.provider == "gdrive" else "",
                "redirect_uri": f"http://127.0.0.1:{server.server_address[1]}/callback",
            }
        )
        url = str(begin["authorize_url"])
        print(f"Open this URL to sign in (waiting up to {int(args.wait)} s):\n{url}", file=sys.stderr, flush=True)
        if not args.no_browser:
            with contextlib.suppress(webbrowser.Error):
                webbrowser.open(url)
        if not arrived.wait(max(1.0, args.wait)):
            raise MemoriesError("cloud_login_refused", "The browser did not come back in time; nothing was stored.")
    finally:
        server.shutdown()
        server.server_close()
    if "code" not in got:
        raise MemoriesError("cloud_login_refused", "The provider refused the sign-in in the browser; nothing was stored.")
    result = ctx.request(
        {"op": "cloud_login_complete", "ticket": begin["ticket"], "code": got["code"], "state": got.get("state", "")},
        timeout=180,
    )
    added = result["added"]
    done = "signed in again" if result.get("renewed") else "added"
    ctx.emit(result, f"cloud account {one_line(added['name'])} {done}: {added['kind']} ({added['bucket']})")
    return 0
