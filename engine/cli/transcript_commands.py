"""memories transcript import|list|show|watch (AG-5): agent sessions into encrypted transcript items.

The CLI reads the files (they are the user's) and runs the versioned adapter
(engine/transcripts) to get adapter-neutral events; the daemon computes every identity and
stores one encrypted ``transcript`` item per session. Re-import asks the daemon which
source revisions it already has first, so unchanged files cost one digest each.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.errors import MemoriesError
from engine.terminal_text import block, one_line
from engine.transcripts import follow, sources
from engine.transcripts.model import Event, Parsed, revision_id

__all__ = ["register", "BATCH_EVENTS", "BATCH_BYTES"]

BATCH_EVENTS = 5000
BATCH_BYTES = 4 * 1024 * 1024
KNOWN_CHUNK = 5000
MIN_INTERVAL, MAX_INTERVAL = 0.2, 300.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    t = sub.add_parser("transcript", parents=[common], help="agent sessions (Claude Code, Codex): import, list, show, watch")
    tsub = t.add_subparsers(dest="transcript_command", metavar="COMMAND", parser_class=t.__class__)
    t.set_defaults(func=cmd_list)
    p = tsub.add_parser("import", parents=[common], help="import session files (default: ~/.claude/projects, ~/.codex/sessions)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="session files (*.jsonl) or folders to search for them")
    p.set_defaults(func=cmd_import)
    p = tsub.add_parser("list", parents=[common], help="imported sessions, newest first")
    p.add_argument("--agent", choices=("claude_code", "codex"), help="only sessions of this agent")
    p.add_argument("--limit", type=int, default=100, help="at most this many sessions (default 100)")
    p.set_defaults(func=cmd_list)
    p = tsub.add_parser("show", parents=[common], help="one session's turns, or one turn with --turn")
    p.add_argument("session", help="a session_uid prefix (≥ 6 hex digits, from `transcript list`) or a handle like [1]")
    p.add_argument("--turn", type=int, metavar="N", help="only turn N (the step number shown by `transcript show`)")
    p.set_defaults(func=cmd_show)
    p = tsub.add_parser(
        "assign",
        parents=[common],
        help="record the project folder of a session imported before working directories were recorded",
        description="Project-scoped agent grants (`agent connect --project DIR`) see the sessions whose working "
        "directory is inside DIR. A session imported before directories were recorded has none; this records DIR "
        "for it (a new revision of each turn). A directory the client recorded is never replaced.",
    )
    p.add_argument("session", help="a session_uid prefix (≥ 6 hex digits, from `transcript list`) or a handle like [1]")
    p.add_argument("--project", required=True, metavar="DIR", help="the project folder the session was run in")
    p.set_defaults(func=cmd_assign)
    p = tsub.add_parser(
        "scrub",
        parents=[common],
        help="redact the stored turns again (turns stored before redaction, or before a secret joined the vault)",
        description="Runs the import's redaction (values the vault protects, well-known token shapes) over every "
        "stored turn; a turn that held a secret gets a redacted revision, which search and agents then read. "
        "Earlier revisions stay sealed in the store and are shown redacted (docs/transcripts.md).",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be redacted; write nothing")
    p.set_defaults(func=cmd_scrub)
    p = tsub.add_parser("watch", parents=[common], help="keep importing new turns as session files grow (polling)")
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to watch (default: as for import)")
    p.add_argument(
        "--interval", type=float, default=2.0, metavar="SECONDS", help="how often to look for changes (0.2 to 300, default 2)"
    )
    p.add_argument(
        "--cycle",
        action="store_true",
        help="kept for scripts: the engine itself distils the new turns of every import when a model seat "
        "([rag.extraction]) is configured",
    )
    # The tray's watcher (desktop/tray/transcript_watcher.py): a tray killed outright cannot stop
    # its child, and an orphan would run beside the next tray's watcher. The parent names itself:
    # one killed before this process reads its own parent would otherwise go unnoticed.
    p.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_watch)


# -- import --------------------------------------------------------------------------------
def _roots(args: argparse.Namespace) -> list[Path]:
    if args.paths:
        return [Path(p).expanduser() for p in args.paths]
    return [root for root, _adapter in sources.default_roots(Path.home()) if root.is_dir()]


def _wire(event: Event) -> dict[str, Any]:
    # vars(), not dataclasses.asdict(): every field is a str or an int, and asdict's deep copy
    # of each value cost a third of a 20,000-turn import's CLI time.
    wire = {k: v for k, v in vars(event).items() if v != "" or k in ("text", "native_key")}
    if event.occurrence < 0:
        del wire["occurrence"]
    return wire


def _batches(events: list[Event]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    for event in events:
        wire = _wire(event)
        cost = len(event.text.encode("utf-8")) * 2 + 512
        if batch and (len(batch) >= BATCH_EVENTS or size + cost > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(wire)
        size += cost
    yield batch


def _warn(text: str) -> None:
    print(block(f"warning: {text}"), file=sys.stderr)


# What `watch` knows of each file it sent: enough to read only what is appended next (AG-8).
Progress = dict[Path, follow.Followed]


def _send(
    ctx: Context,
    adapter: str,
    version: str,
    sha256: str,
    parsed: Parsed,
    events: list[Event],
    totals: dict[str, Any],
    sessions: dict[str, int],
) -> None:
    """One file's events to the engine, in batches; the last one is ``final``."""
    batches = list(_batches(events))
    for n, batch in enumerate(batches, start=1):
        result = ctx.request(
            {
                "op": "transcript_import",
                "adapter": adapter,
                "adapter_version": version,
                "source_sha256": sha256,
                "events": batch,
                "final": n == len(batches),
                **({"cwds": parsed.cwds} if parsed.cwds else {}),
            },
            timeout=600,
        )
        totals["events_added"] += result["events_added"]
        totals["sessions_written"] += result["written"]
        totals["redacted"] += result.get("redacted", 0)
        for s in result["sessions"]:
            sessions[s["session_uid"]] = s["turns"]


def import_files(ctx: Context, files: list[Path], quiet: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Import ``files``; the totals. Used by `import` and by each round of `watch` (with ``progress``:
    a file already read in an earlier round is read from where that round stopped)."""
    started = time.monotonic()
    read: list[tuple[sources.Source, str]] = []
    grown: list[tuple[Path, follow.Followed, follow.Appended, str]] = []
    unrecognised = 0
    for path in files:
        state = progress.get(path) if progress is not None else None
        if state is not None and progress is not None:
            appended = follow.read_appended(path, state, sources.ADAPTERS[state.adapter], sources.MAX_FILE_BYTES)
            if appended is not None:
                grown.append((path, state, appended, revision_id(appended.sha256, sources.version_of(state.adapter))))
                continue
            del progress[path]  # rewritten, not appended to: read whole (the engine skips what it has)
        source = sources.read_source(path)
        if source is None:
            unrecognised += 1
            if not quiet:
                _warn(f"{path}: not a Claude Code or Codex session file; skipped")
            continue
        read.append((source, source.revision_id(sources.version_of(source.adapter))))
    known: set[str] = set()
    ids = [rid for _s, rid in read] + [rid for *_x, rid in grown]
    for i in range(0, len(ids), KNOWN_CHUNK):
        known.update(ctx.request({"op": "transcript_known", "revisions": ids[i : i + KNOWN_CHUNK]})["known"])
    totals: dict[str, Any] = {"files": len(files), "unchanged": 0, "imported": 0, "unrecognised": unrecognised, "events_added": 0}
    totals |= {"sessions_written": 0, "skipped_lines": 0, "still_being_written": 0, "turns": 0, "redacted": 0}
    sessions: dict[str, int] = {}  # session_uid -> its turns after the import (as the user saw them)
    for _path, state, appended, rid in grown:
        parsed = appended.parsed
        totals["skipped_lines"] += len(parsed.warnings)
        if parsed.pending_bytes:
            totals["still_being_written"] += 1
        if rid not in known and parsed.events:
            totals["imported"] += 1
            _send(ctx, state.adapter, parsed.adapter_version, appended.sha256, parsed, parsed.events, totals, sessions)
        elif rid in known:
            totals["unchanged"] += 1
        follow.advance(state, appended)
    for source, rid in read:
        if rid in known:
            totals["unchanged"] += 1
            continue
        parsed = sources.parse(source)
        for lineno, reason in parsed.warnings:
            if not quiet:
                _warn(f"{source.path}: line {lineno}: {reason}; skipped")
        totals["skipped_lines"] += len(parsed.warnings)
        if parsed.pending_bytes:
            totals["still_being_written"] += 1
        if not parsed.events:
            continue
        totals["imported"] += 1
        _send(ctx, parsed.adapter, parsed.adapter_version, source.sha256, parsed, parsed.events, totals, sessions)
        if progress is not None:
            followed = follow.start(source.path, source.data, source.adapter, sources.ADAPTERS[source.adapter], parsed)
            if followed is not None:
                progress[source.path] = followed
    totals["sessions"] = len(sessions)
    totals["turns"] = sum(sessions.values())
    totals["seconds"] = round(time.monotonic() - started, 3)
    return totals


def cmd_import(ctx: Context, args: argparse.Namespace) -> int:
    files = sources.discover(_roots(args))
    totals = import_files(ctx, files)
    text = (
        f"Read {totals['files']} file(s): {totals['imported']} imported, {totals['unchanged']} unchanged; "
        f"{totals['events_added']} new event(s) in {totals['sessions']} session(s) of {totals['turns']} turn(s)."
    )
    if totals["redacted"]:
        text += f"\nReplaced {totals['redacted']} secret(s) (vault values, tokens, passwords) by [redacted:KIND] before storing."
    if totals["skipped_lines"]:
        text += f"\nSkipped {totals['skipped_lines']} malformed line(s) (see the warnings above)."
    if totals["still_being_written"]:
        text += f"\n{totals['still_being_written']} file(s) end in a line still being written; it is read next time."
    ctx.emit(totals, text)
    return 0


def cmd_watch(ctx: Context, args: argparse.Namespace) -> int:
    if not MIN_INTERVAL <= args.interval <= MAX_INTERVAL:
        raise MemoriesError("invalid_input", "--interval is between 0.2 and 300 seconds.")
    stop = False

    def _stop(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    parent = args.parent_pid
    seen: dict[Path, tuple[int, int]] = {}
    progress: Progress = {}
    if not ctx.json_output:
        print("Watching for new turns (Ctrl-C stops).", flush=True)
    try:
        while not stop and (parent is None or os.getppid() == parent):
            roots = _roots(args)
            changed = []
            for path in sources.discover([r for r in roots if r.exists()]):
                try:
                    st = path.stat()
                except OSError:
                    continue
                mark = (st.st_size, st.st_mtime_ns)
                if seen.get(path) != mark:
                    seen[path] = mark
                    changed.append(path)
            if changed:
                totals = import_files(ctx, changed, quiet=True, progress=progress)
                if totals["events_added"]:
                    ctx.emit(totals, f"{time.strftime('%H:%M:%S')} {totals['events_added']} new event(s)")
                    sys.stdout.flush()
            deadline = time.monotonic() + args.interval
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.1, args.interval))
    except KeyboardInterrupt:
        pass
    return 0


# -- reads ---------------------------------------------------------------------------------
def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "transcript_list", "limit": getattr(args, "limit", 100)}
    if getattr(args, "agent", None):
        body["agent"] = args.agent
    result = ctx.request(body)
    lines = ["HANDLE  SESSION       STARTED              TURNS  TITLE"]
    for s in result["sessions"]:
        lines.append(
            f"{s['handle']:<7} {s['session_uid'][:12]}  {one_line(s['started'][:19]):<20} {s['turns']:>5}  {one_line(s['title'])}"
        )
    ctx.emit(result, "\n".join(lines) if result["sessions"] else "No transcripts yet: `memories transcript import`.")
    return 0


def cmd_scrub(ctx: Context, args: argparse.Namespace) -> int:
    """AG-10 over what is stored already: a redacted revision of every turn that held a secret."""
    result = ctx.request({"op": "transcript_scrub", "dry_run": bool(args.dry_run)}, timeout=3600)
    kinds = ", ".join(f"{kind} {n}" for kind, n in result["kinds"].items())
    verb = "would replace" if result["dry_run"] else "replaced"
    text = (
        f"{verb} {result['redacted']} secret(s) in {result['turns_redacted']} turn(s) ({kinds})"
        if result["redacted"]
        else "no stored turn holds a secret the redaction knows"
    )
    ctx.emit(result, text)
    return 0


def cmd_assign(ctx: Context, args: argparse.Namespace) -> int:
    """AG-11: the session's working directory, as `agent connect --project` resolves a project."""
    project = str(Path(args.project).expanduser().resolve())
    result = ctx.request({"op": "transcript_assign", "session": args.session, "project": project})
    text = (
        f"session {result['session_uid'][:12]}: working directory {project} recorded on {result['turns_written']} turn(s)"
        if result["turns_written"]
        else f"session {result['session_uid'][:12]} already has working directory {project}"
    )
    ctx.emit(result, text)
    return 0


def render_turn(turn: dict[str, Any]) -> str:
    thread = "" if turn["thread"] == "main" else f"  ({one_line(turn['thread'])})"
    lines = [f"{turn['handle']} turn {turn['seq']}{thread}  {one_line(turn['ts'])}  {turn['turn_uid'][:12]}"]
    for e in turn["events"]:
        label = (
            e["role"] + (f" [{one_line(e['name'])}]" if e.get("name") else "") + (" (context)" if e["type"] == "context" else "")
        )
        lines.append(f"  {label}: " + e["text"].replace("\n", "\n    "))
    return "\n".join(lines)


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "transcript_show", "session": args.session}
    if args.turn is not None:
        body["turn"] = args.turn
    result = ctx.request(body)
    s = result["session"]
    head = f"{s['handle']} {one_line(s['title'])}\nsession {s['session_uid']}  {s['turns']} turn(s)"
    ctx.emit(result, "\n\n".join([head, *map(render_turn, result["turns"])]))
    return 0
