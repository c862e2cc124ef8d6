"""serve, sync, sync token new|list|revoke, sync status, relay serve (issue 14; SY-4, API-4, API-5).

A sync token never comes from config.toml (API-4): ``memories sync PEER_URL`` reads it from
``MEMORIES_SYNC_TOKEN`` or, with ``--token-stdin``, from standard input. The relay token (if
the relay wants one) comes from ``MEMORIES_RELAY_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "TOKEN_ENV", "RELAY_TOKEN_ENV"]

TOKEN_ENV = "MEMORIES_SYNC_TOKEN"  # noqa: S105 (a variable name)
RELAY_TOKEN_ENV = "MEMORIES_RELAY_TOKEN"  # noqa: S105
_SYNC_IPC_TIMEOUT = 4 * 3600.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", parents=[common], help="serve sync to your other devices (stays in the foreground)")
    p.add_argument("--listen", default="127.0.0.1:7700", metavar="HOST:PORT", help="default 127.0.0.1:7700 (loopback)")
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS/WSS with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    p.add_argument("--allow-non-loopback", action="store_true", help="listen on another address (needs TLS)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "sync",
        parents=[common],
        help="sync with a peer (URL or relay room); `sync token new|list|revoke`, `sync status`",
        description=(
            "memories sync PEER_URL [--watch]   |   memories sync --relay URL --room ID   |   "
            "memories sync token new --device NAME   |   memories sync token list   |   "
            "memories sync token revoke TOKEN_ID   |   memories sync status"
        ),
    )
    p.add_argument("words", nargs="*", metavar="PEER_URL|token|status", help="the peer's URL, or token/status and their words")
    p.add_argument("--relay", metavar="URL", help="sync through this relay (with --room)")
    p.add_argument(
        "--room",
        metavar="ID",
        help="the relay room both devices join (22+ base64url characters; --room=ID if it begins with '-')",
    )
    p.add_argument("--token-stdin", action="store_true", help=f"read the sync token from stdin (else ${TOKEN_ENV})")
    p.add_argument("--ca", metavar="FILE", help="trust this CA certificate for an https:// peer or relay")
    p.add_argument("--watch", action="store_true", help="sync again after each local change, or every --interval seconds")
    p.add_argument("--interval", type=float, default=60.0, metavar="SECONDS", help="--watch: at least this often (default 60)")
    p.add_argument("--wait", type=int, default=300, metavar="SECONDS", help="--relay: wait this long for the other device")
    p.add_argument("--device", metavar="NAME|FINGERPRINT", help="`sync token new`: the peer device the token is for")
    p.add_argument("--name", help="`sync token new`: a label for the token")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("relay", parents=[common], help="run a relay that forwards sealed sync frames (`relay serve`)")
    rsub = p.add_subparsers(dest="relay_command", metavar="ACTION", parser_class=type(p))
    rp = rsub.add_parser("serve", parents=[common], help="forward sealed frames between the two devices of each room")
    rp.add_argument("--listen", default="127.0.0.1:7701", metavar="HOST:PORT", help="default 127.0.0.1:7701")
    rp.add_argument("--tls-cert", metavar="FILE", help="serve WSS with this certificate (PEM)")
    rp.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    rp.add_argument("--allow-non-loopback", action="store_true", help="listen on another address (needs TLS)")
    rp.add_argument("--max-room-mib", type=int, default=4096, metavar="MIB", help="bytes one room may forward (default 4096 MiB)")
    rp.set_defaults(func=cmd_relay_serve)
    p.set_defaults(func=lambda ctx, args: (p.print_help(), 2)[1])


# -- serve ---------------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop()


def cmd_serve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "sync_serve", "listen": args.listen, "allow_non_loopback": args.allow_non_loopback}
    if args.tls_cert:
        body["tls_cert"] = os.path.abspath(args.tls_cert)
    if args.tls_key:
        body["tls_key"] = os.path.abspath(args.tls_key)
    result = ctx.request(body)
    if result.get("warning"):
        print(f"warning: {result['warning']}", file=sys.stderr)
    text = f"serving sync on {result['url']}  (Ctrl-C stops; a peer needs a token: `memories sync token new --device NAME`)"
    ctx.emit(result, text)
    sys.stdout.flush()
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    reason = "stopped"
    shown_after = int(time.time() * 1000)
    try:
        while True:
            time.sleep(1.0)
            status = ctx.request({"op": "sync_status"}, timeout=10)
            if not status["serving"]:
                reason = "locked" if status["locked"] else "stopped elsewhere"
                break
            shown_after = _print_sessions(status.get("recent") or [], shown_after)
    except (KeyboardInterrupt, _Stop):
        pass
    except MemoriesError as exc:
        reason = exc.code
    finally:
        signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(MemoriesError):  # sessions that ended since the last poll
            _print_sessions(ctx.request({"op": "sync_status"}, timeout=10).get("recent") or [], shown_after)
        with contextlib.suppress(MemoriesError):
            ctx.request({"op": "sync_serve_stop"}, timeout=30)
    if not ctx.json_output:
        print(f"sync listener stopped ({reason})", file=sys.stderr)
    return 0 if reason in ("stopped", "stopped elsewhere") else 1


def _print_sessions(recent: list[dict[str, Any]], after_ms: int) -> int:
    """One line on stderr per listener session that ended since ``after_ms`` (issue 29): who,
    what moved, or why it was refused. Returns the newest time shown."""
    newest = after_ms
    for entry in recent:
        ts = int(entry.get("ts_ms") or 0)
        if ts <= after_ms or entry.get("via") != "listener":
            continue
        newest = max(newest, ts)
        peer = str(entry.get("peer") or "?")[:12]
        error = entry.get("error")
        if isinstance(error, dict):
            line = f"session with device {peer}…: refused [{error.get('code')}] {one_line(str(error.get('message', '')))}"
        else:
            added = sum(int(v.get("revisions_added", 0)) for v in entry.get("vaults") or [] if isinstance(v, dict))
            sent = sum(int(v.get("revisions_added", 0)) for v in entry.get("peer_vaults") or [] if isinstance(v, dict))
            line = f"session with device {peer}…: +{added} revisions here, +{sent} there"
        print(line, file=sys.stderr, flush=True)
    return newest


# -- sync --------------------------------------------------------------------------------------------


def _report_text(result: dict[str, Any]) -> str:
    peer = str(result.get("peer") or "?")[:12]
    lines = [
        f"synced with device {peer}… via {result.get('via', 'direct')}: sent {result.get('sent_bytes', 0)} B, "
        f"received {result.get('received_bytes', 0)} B"
    ]
    for report in result.get("vaults") or []:
        vault = str(report.get("vault_id") or report.get("vault") or "?")[:12]
        error = report.get("error")
        if isinstance(error, dict):
            lines.append(f"  vault {vault}: not merged here [{error.get('code')}]: {one_line(str(error.get('message', '')))}")
            continue
        conflicts = report.get("conflicts") or []
        line = (
            f"  vault {vault}: +{report.get('revisions_added', 0)} revisions, +{report.get('policies_added', 0)} policies, "
            f"+{report.get('audits_added', 0)} audit entries, {report.get('quarantined', 0)} quarantined"
        )
        if conflicts:
            line += f", in conflict: {', '.join(one_line(str(c)) for c in conflicts[:10])}"
        lines.append(line)
        if report.get("discarded_policies"):
            lines.append(
                f"  vault {vault}: {report['discarded_policies']} policy change(s) made on this device were discarded "
                "by the Owner's fork resolution; make them again if they are still wanted (`memories vault members`)"
            )
            if any(isinstance(r, dict) and r.get("vault") == report.get("vault") for r in result.get("peer_vaults") or []):
                lines.append(f"  vault {vault}: this device now follows the kept branch; sync once more to send its writes")
    if not result.get("vaults"):
        lines.append("  nothing new here")
    if result.get("peer_error"):
        lines.append(f"  the peer refused our changes: [{result['peer_error'].get('code')}]")
    for report in result.get("peer_vaults") or []:
        error = report.get("error") if isinstance(report, dict) else None
        if isinstance(error, dict):
            vault = str(report.get("vault") or "?")[:12]
            lines.append(f"  vault {vault}: the peer did not merge our changes [{one_line(str(error.get('code')))}]")
    return "\n".join(lines)


def _refused(result: dict[str, Any]) -> bool:
    """A vault one side did not merge: the sync is incomplete, so the command fails (exit 1)."""
    reports = [*(result.get("vaults") or []), *(result.get("peer_vaults") or [])]
    return bool(result.get("peer_error")) or any(isinstance(r, dict) and "error" in r for r in reports)


def _sync_body(args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"op": "sync_run"}
    if args.ca:
        body["ca_file"] = os.path.abspath(args.ca)
    if args.relay:
        if url:
            raise UsageError("give a peer URL or --relay URL --room ID, not both")
        if not args.room:
            raise UsageError("--relay needs --room ID (the same room on both devices)")
        body.update(relay=args.relay, room=args.room, wait_seconds=args.wait)
        relay_token = os.environ.get(RELAY_TOKEN_ENV)
        if relay_token:
            body["relay_token"] = relay_token
        return body
    if not url:
        raise UsageError("memories sync PEER_URL, or memories sync --relay URL --room ID")
    token = sys.stdin.readline().strip() if args.token_stdin else os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise MemoriesError("sync_unauthorized", f"No sync token: set {TOKEN_ENV} or pass --token-stdin.")
    body.update(url=url, token=token)
    return body


def cmd_sync(ctx: Context, args: argparse.Namespace) -> int:
    words = list(args.words)
    if words and words[0] == "token":
        return _token(ctx, args, words[1:])
    if words == ["status"]:
        return _status(ctx)
    if len(words) > 1:
        raise UsageError("memories sync takes one PEER_URL")
    body = _sync_body(args, words[0] if words else None)
    if not args.watch:
        result = ctx.request(body, timeout=_SYNC_IPC_TIMEOUT)
        ctx.emit(result, _report_text(result))
        return 1 if _refused(result) else 0
    return _watch(ctx, args, body)


def _watch(ctx: Context, args: argparse.Namespace, body: dict[str, Any]) -> int:
    """Sync now, then again after each local change (the outbox grows) or every --interval s."""
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        while True:
            try:
                result = ctx.request(body, timeout=_SYNC_IPC_TIMEOUT)
                ctx.emit(result, _report_text(result))
            except MemoriesError as exc:
                if exc.code in ("locked", "not_initialized", "sync_unauthorized"):
                    raise
                print(f"memories: sync failed [{exc.code}]: {one_line(exc.message)}; retrying", file=sys.stderr)
            sys.stdout.flush()
            deadline = time.monotonic() + max(1.0, args.interval)
            while time.monotonic() < deadline:
                time.sleep(1.0)
                if ctx.request({"op": "sync_status"}, timeout=10)["outbox"] > 0:
                    break
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _status(ctx: Context) -> int:
    result = ctx.request({"op": "sync_status"})
    lines = [
        f"listener: {result['url'] if result['serving'] else 'not serving'}",
        f"outbox {result['outbox']}  inbox {result['inbox']}",
    ]
    for entry in result["recent"]:
        peer = str(entry.get("peer") or "?")[:12]
        outcome = f"error [{entry['error']['code']}]" if entry.get("error") else "ok"
        lines.append(f"  {entry.get('via')} {peer}: {outcome}")
    ctx.emit(result, "\n".join(lines))
    return 0


def _short_fingerprint(row: dict[str, Any]) -> str:
    """The device's fingerprint as `memories devices` groups it, shortened for one line
    (checks never shorten it; an older engine's answer has only the device ID)."""
    text = str(row.get("fingerprint") or row["device_id"])
    return " ".join(text[i : i + 4] for i in range(0, 16, 4)) + "…"


def _token(ctx: Context, args: argparse.Namespace, words: list[str]) -> int:
    action = words[0] if words else ""
    if action == "new" and len(words) == 1:
        if not args.device:
            raise UsageError("memories sync token new --device NAME|FINGERPRINT")
        body: dict[str, Any] = {"op": "sync_token_new", "device": args.device}
        if args.name:
            body["name"] = args.name
        result = ctx.request(body)
        text = (
            f"sync token for device {one_line(result['name'])} (fingerprint {_short_fingerprint(result)}), "
            f"id {result['token_id']}:\n"
            f"{result['token']}\n"
            f"shown once: on that device set {TOKEN_ENV} to it and run `memories sync URL`"
        )
        ctx.emit(result, text)
        return 0
    if action == "list" and len(words) == 1:
        result = ctx.request({"op": "sync_token_list"})
        lines = [
            f"{row['token_id']}  {one_line(row['name']):<20} fingerprint {_short_fingerprint(row)}  "
            + ("revoked" if row["revoked"] else "active" if row["device_authorized"] else "device revoked")
            for row in result["tokens"]
        ]
        ctx.emit(result, "\n".join(lines) or "no sync tokens")
        return 0
    if action == "revoke" and len(words) == 2:
        result = ctx.request({"op": "sync_token_revoke", "token_id": words[1].lower()})
        ctx.emit(result, f"sync token {result['revoked']} revoked" + (" (already)" if result["already"] else ""))
        return 0
    raise UsageError("memories sync token new --device NAME | list | revoke TOKEN_ID")


# -- the relay -------------------------------------------------------------------------------------------


def cmd_relay_serve(ctx: Context, args: argparse.Namespace) -> int:
    from engine.sync.relay import RelayLimits, serve_relay
    from engine.sync.transport import is_loopback, server_ssl

    host, sep, port_text = args.listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit():
        raise UsageError("--listen takes HOST:PORT")
    if not is_loopback(host):
        if not args.allow_non_loopback:
            raise MemoriesError("invalid_input", "Listening on a non-loopback address was refused; pass --allow-non-loopback.")
        if not (args.tls_cert and args.tls_key):
            raise MemoriesError("invalid_input", "A relay outside this machine is always WSS: pass --tls-cert and --tls-key.")
    tls = server_ssl(args.tls_cert, args.tls_key)
    limits = RelayLimits(room_bytes=max(1, args.max_room_mib) * 1024 * 1024)
    token = os.environ.get(RELAY_TOKEN_ENV) or None

    async def run() -> None:
        relay = await serve_relay(host, int(port_text), tls, limits, token)
        ctx.emit({"relay": relay.url}, f"relay on {relay.url} (rooms forward sealed frames only; Ctrl-C stops)")
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await relay.stop()

    try:
        asyncio.run(run())
    except OSError as exc:
        raise MemoriesError("invalid_input", f"Cannot listen on {args.listen} ({exc.strerror or 'in use'}).") from None
    return 0
