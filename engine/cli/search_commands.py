"""search, retrieve, ask, rag status, rag index."""

from __future__ import annotations

from engine.cli.context import Context, UsageError
from engine.terminal_text import Escaped, block, bold_highlights, one_line

TYPE_CHECKING = False  # search is on the CLI's fast path: no argparse, no typing (issue 20)
if TYPE_CHECKING:
    import argparse
    from typing import Any

MODES = ("auto", "lexical", "vector", "hybrid")
SEARCH_MAX_LIMIT = 500  # engine/service/handlers/search.py MAX_SEARCH_LIMIT (DT-7)
SEARCH_MAX_OFFSET = 100_000  # ... MAX_SEARCH_OFFSET


def _query_options(p: argparse.ArgumentParser, default_limit: int, max_limit: int) -> None:
    p.add_argument("query", help='words, "quoted phrases", Chinese or English')
    p.add_argument("--mode", choices=MODES, default="auto", help="auto = hybrid if an embedding model is configured")
    p.add_argument("--limit", type=int, default=default_limit, help=f"1–{max_limit}")
    p.add_argument(
        "--wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wait this long for an index still building after unlock (default 5)",
    )


def _filter_options(p: argparse.ArgumentParser) -> None:
    when = "a date (2026-11-30), an ISO date and time, an age (90m, 12h, 7d, 2w), today or yesterday"
    p.add_argument("--since", metavar="WHEN", help=f"only items changed since WHEN: {when}")
    p.add_argument("--until", metavar="WHEN", help="only items changed until WHEN (a date includes that day)")
    p.add_argument("--author", metavar="FINGERPRINT", help="only items last written by this device (fingerprint prefix)")
    p.add_argument("--source", metavar="TEXT", help="only items whose `source` metadata starts with TEXT")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("search", parents=[common], help="search memories and cards")
    _query_options(p, 10, SEARCH_MAX_LIMIT)
    p.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N matches (page with --limit)")
    p.add_argument("--kind", help="only this kind (memory, knowledge, brain, persona)")
    p.add_argument("--vault", metavar="NAME", help="search this vault (default: the default vault)")
    _filter_options(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("retrieve", parents=[common], help="passages labelled [S1] [S2] … with their sources")
    _query_options(p, 5, 20)
    _filter_options(p)
    p.set_defaults(func=cmd_retrieve)

    p = sub.add_parser("ask", parents=[common], help="answer from your memories with validated [S1] citations")
    _query_options(p, 5, 20)
    p.set_defaults(func=cmd_ask)

    rag = sub.add_parser("rag", parents=[common], help="search index and model providers")
    rag_sub = rag.add_subparsers(dest="rag_command", metavar="COMMAND", parser_class=rag.__class__)
    rag.set_defaults(func=lambda ctx, args: _usage(rag))
    p = rag_sub.add_parser("status", parents=[common], help="index state, bounds, truncation, providers")
    p.set_defaults(func=cmd_rag_status)
    p = rag_sub.add_parser("index", parents=[common], help="bring the index up to date and embed missing chunks")
    p.add_argument("--rebuild", action="store_true", help="rebuild the lexical index from scratch")
    p.add_argument("--no-vectors", action="store_true", help="do not call the embedding provider")
    p.set_defaults(func=cmd_rag_index)


def _usage(parser: argparse.ArgumentParser) -> int:
    raise UsageError("rag needs a command: status or index")


def _body(op: str, args: argparse.Namespace, max_limit: int) -> dict[str, Any]:
    if not 1 <= args.limit <= max_limit:
        raise UsageError(f"--limit must be between 1 and {max_limit}")
    if args.wait < 0:
        raise UsageError("--wait must not be negative")
    if not args.query.strip():
        raise UsageError("the query is empty")
    body = {"op": op, "query": args.query, "mode": args.mode, "limit": args.limit, "wait_ms": int(args.wait * 1000)}
    for name in ("since", "until", "author", "source"):
        if getattr(args, name, None) is not None:
            body[name] = getattr(args, name)
    return body


def _timeout(args: argparse.Namespace) -> float:
    # Model calls may retry with back-off; give the engine room beyond the index wait.
    return float(args.wait) + 300.0


def _flags(result: dict[str, Any]) -> list[str]:
    notes = []
    if result.get("partial"):
        notes.append("(the index is still building; results may be incomplete)")
    if result.get("truncated"):
        notes.append(f"({result['truncated']} older items are not indexed: content exceeds the index bounds)")
    if result.get("vectors_missing"):
        notes.append("(some passages have no vectors yet; run `memories rag index`)")
    return notes


def cmd_search(ctx: Context, args: argparse.Namespace) -> int:
    body = _body("search", args, SEARCH_MAX_LIMIT)
    if not 0 <= args.offset <= SEARCH_MAX_OFFSET:
        raise UsageError(f"--offset must be between 0 and {SEARCH_MAX_OFFSET}")
    body["offset"] = args.offset
    if args.kind:
        body["kind"] = args.kind
    if args.vault is not None:
        body["vault"] = args.vault
    result = ctx.request(body, timeout=_timeout(args))
    color = ctx.color
    lines = []
    for item in result["results"]:
        turn = item.get("turn")
        if turn:  # a transcript turn (AG-8): its handle (for `recall_turn`), session, turn number and time
            thread = "" if turn["thread"] == "main" else f" ({one_line(turn['thread'])})"
            lines.append(
                f"{item['rank']:>2}. {one_line(turn['handle'])} turn {turn['seq']}{thread}  {one_line(turn['ts'][:19])}"
                f"  {one_line(turn['session_title'])}  session {turn['session_uid'][:12]}"
                + (f"  (superseded by {one_line(turn['superseded_by'])})" if turn.get("superseded_by") else "")
            )
        else:
            tags = f"  [{', '.join(one_line(t) for t in item['tags'])}]" if item["tags"] else ""
            lines.append(f"{item['rank']:>2}. {one_line(item['short_id'])}  {one_line(item['title'])}{tags}")
        if item["snippet"]:
            # Escape first, then style: stored text cannot inject sequences, our bold still works.
            lines.append("    " + bold_highlights(one_line(item["snippet"]), color))
    total = int(result.get("total", len(result["results"])))
    shown = len(result["results"])
    if shown and (args.offset or shown < total):
        # DT-7: say how many match and how to see the rest, not only this page.
        first = args.offset + 1
        more = f"; next: --offset {args.offset + shown}" if args.offset + shown < total else ""
        lines.append(f"({first}–{args.offset + shown} of {total} matches{more})")
    elif not shown and total:
        lines.append(f"(no matches at --offset {args.offset}; there are {total})")
    if not total:
        # Someone moving in from a password manager looks for a login by name first.
        lines.append("(no matches; logins and protected cards are not searched: `memories login list WORDS` finds logins)")
    # Every part above is escaped already (and may carry our bold), so emit prints it as is.
    ctx.emit(result, Escaped("\n".join(lines + [block(flag) for flag in _flags(result)])))
    return 0


def cmd_retrieve(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request(_body("retrieve", args, 20), timeout=_timeout(args))
    blocks = [
        f"[{p['label']}] {one_line(p['title'])}  ({p['short_id']}, revision {p['revision']})\n{p['text']}"
        for p in result["passages"]
    ]
    ctx.emit(result, "\n\n".join([*(blocks or ["(no matches)"]), *_flags(result)]))
    return 0


def cmd_ask(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request(_body("ask", args, 20), timeout=_timeout(args))
    if result["answer"] is None:
        ctx.emit(result, result.get("note", "(no answer)"))
        return 0
    lines = [result["answer"], ""]
    for cite in result["citations"]:
        lines.append(f"[{cite['label']}] {one_line(cite['title'])}  ({cite['short_id']})")
    if result["invalid_citations"]:
        lines.append(f"(removed citations that named no selected source: {', '.join(result['invalid_citations'])})")
    ctx.emit(result, "\n".join(lines + _flags(result)))
    return 0


def cmd_rag_status(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "rag_status"})
    ctx.emit(result, _status_text(result))
    return 0


def cmd_rag_index(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "rag_index", "rebuild": args.rebuild, "vectors": not args.no_vectors}, timeout=900)
    text = f"embedded {result['embedded']} passages" + (" (vector bound reached)" if result["vector_limit_reached"] else "")
    ctx.emit(result, text + "\n" + _status_text(result["status"]))
    return 0


def _status_text(status: dict[str, Any]) -> str:
    index = status.get("index", {})
    lines = [f"index:      {index.get('state', 'missing')}"]
    if "chunks" in index:
        limits = index["limits"]
        lines.append(
            f"content:    {index['assets']} items, {index['chunks']}/{limits['max_chunks']} chunks, "
            f"{index['text_bytes']}/{limits['max_text_bytes']} text bytes"
        )
        lines.append(f"vectors:    {index['vectors']} ({index['vector_bytes']}/{limits['max_vector_bytes']} bytes)")
        embedding = index.get("embedding")
        if embedding:  # AG-12: the local model's background job
            state = "running" if embedding["running"] else "idle"
            lines.append(
                f"embedding:  {state}; {embedding['embedded']} passages embedded since unlock, "
                f"{embedding['reused']} read back sealed" + (", vector bound reached" if embedding["limit_reached"] else "")
            )
            if embedding["error"]:
                lines.append(f"            stopped: {embedding['error']['message']}")
        if index["truncated"]:
            lines.append(f"truncated:  {index['truncated']} older items left out (bounds reached)")
        if index["excluded"]:
            lines.append("excluded:   " + ", ".join(f"{k} {v}" for k, v in sorted(index["excluded"].items())))
    lines.append(f"segmenter:  {status.get('segmenter')}")
    providers = status.get("providers", {})
    for name, prov in providers.items():
        key = ""
        if prov.get("api_key_env"):
            key = f", key from ${prov['api_key_env']} ({'set' if prov['api_key_present'] else 'NOT SET'})"
        lines.append(f"{name + ':':<11} {prov['kind']} {prov['model']}{key}")
    if not providers:
        lines.append("providers:  none (lexical search only; see docs/search.md to add models)")
    if status.get("config_error"):
        lines.append(f"config:     {status['config_error']}")
    return "\n".join(lines)
