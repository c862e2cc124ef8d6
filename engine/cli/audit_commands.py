"""audit [--since WHEN] [--until WHEN] [--actor WHO] [--op OP] [--limit N]: who read or changed what (AU-1)."""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta
from typing import Any

from engine.cli.context import Context
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "parse_when", "render_entry"]

_SPAN = re.compile(r"(\d{1,7})([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_WHEN_HELP = "a date (2026-05-01), a local date and time (2026-05-01T14:30) or a span back from now (30m, 24h, 7d, 2w)"
MAX_LIMIT = 1000
_SHOWN_ASSETS = 5


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("audit", parents=[common], help="show who read or changed what, newest first (needs sudo)")
    p.add_argument("--since", help=f"only entries at or after this time: {_WHEN_HELP}")
    p.add_argument("--until", help="only entries before this time (same forms as --since)")
    p.add_argument("--actor", help="a caller namespace (mcp:claude) or a whole surface (mcp:, cli:)")
    p.add_argument("--op", help="only this operation (get, search, put, …)")
    p.add_argument("--limit", type=int, default=50, help=f"at most this many entries, 1–{MAX_LIMIT} (default 50)")
    p.set_defaults(func=cmd_audit)


def parse_when(option: str, text: str, now: datetime) -> int:
    """Unix milliseconds of ``text``: a span back from ``now`` or an ISO date/time (local unless it has an offset)."""
    span = _SPAN.fullmatch(text.strip())
    try:
        if span is not None:
            moment = now - timedelta(**{_UNITS[span.group(2)]: int(span.group(1))})
        else:
            moment = datetime.fromisoformat(text.strip())
            if moment.tzinfo is None:
                moment = moment.astimezone()  # a time without an offset is local time
        return max(0, int(moment.timestamp() * 1000))
    except (ValueError, OverflowError, OSError):
        raise MemoriesError("invalid_input", f"{option} takes {_WHEN_HELP}.") from None


def _local_time(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000).astimezone().isoformat(timespec="seconds")


def _asset_text(asset: dict[str, Any]) -> str:
    short = one_line(asset.get("short_id", ""))
    title = asset.get("title")
    if asset.get("state") == "current" and isinstance(title, str):
        return f'{short} "{one_line(title)}"'
    return f"{short} ({one_line(asset.get('state', 'unknown'))})"


def render_entry(entry: dict[str, Any]) -> str:
    """One line per entry: local time, who, op and phase/outcome, assets with their current titles."""
    status = [one_line(value) for value in (entry.get("phase"), entry.get("outcome"), entry.get("error")) if value]
    action = one_line(entry.get("op", "")) + (f" ({', '.join(status)})" if status else "")
    assets = [_asset_text(a) for a in entry.get("assets", [])]
    shown = ", ".join(assets[:_SHOWN_ASSETS])
    if len(assets) > _SHOWN_ASSETS:
        shown += f", and {len(assets) - _SHOWN_ASSETS} more"
    line = f"{_local_time(int(entry['ts_ms']))}  {one_line(entry.get('who', ''))}  {action}"
    return f"{line}  {shown}" if shown else line


def cmd_audit(ctx: Context, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LIMIT:
        raise MemoriesError("invalid_input", f"--limit takes a whole number from 1 to {MAX_LIMIT}.")
    now = datetime.now().astimezone()
    request: dict[str, Any] = {"op": "audit", "limit": args.limit}
    if args.since is not None:
        request["since_ms"] = parse_when("--since", args.since, now)
    if args.until is not None:
        request["until_ms"] = parse_when("--until", args.until, now)
    if "since_ms" in request and "until_ms" in request and request["since_ms"] >= request["until_ms"]:
        raise MemoriesError("invalid_input", "--since must be earlier than --until.")
    if args.actor is not None:
        if not 1 <= len(args.actor) <= 200:
            raise MemoriesError("invalid_input", "--actor takes a caller namespace of 1–200 characters.")
        request["actor"] = args.actor
    if args.op is not None:
        if not 1 <= len(args.op) <= 64:
            raise MemoriesError("invalid_input", "--op takes an operation name of 1–64 characters.")
        request["operation"] = args.op
    result = ctx.request(request)
    entries: list[dict[str, Any]] = result["entries"]
    for entry in entries:
        entry["time"] = _local_time(int(entry["ts_ms"]))
    lines = [render_entry(entry) for entry in entries] or ["no audit entries match"]
    if result.get("more"):
        lines.append(f"(more entries match; narrow with --since/--until or raise --limit, now {args.limit})")
    ctx.emit(result, "\n".join(lines))
    return 0
