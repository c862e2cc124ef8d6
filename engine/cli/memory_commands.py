"""memories memory cycle once [--replies FILE] (AG-9): distil new transcript turns into conclusions.

The daemon reads the turns stored since the cycle's watermark and asks the model seat
configured as ``[rag.extraction]`` in config.toml (an OpenAI-compatible endpoint, a local
llama.cpp or Ollama server included, or Anthropic's API). ``--replies FILE`` replays recorded
seat replies instead (tests, offline work): a JSON array, or one JSON value per line; a string
is a reply as the model wrote it, an object is the reply's JSON itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.errors import MemoriesError

__all__ = ["register", "read_replies"]

MAX_REPLIES_BYTES = 64 * 1024 * 1024


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    m = sub.add_parser("memory", parents=[common], help="distilled memories: the extraction cycle over transcripts")
    msub = m.add_subparsers(dest="memory_command", metavar="COMMAND", parser_class=m.__class__)
    c = msub.add_parser("cycle", parents=[common], help="the extraction cycle")
    csub = c.add_subparsers(dest="cycle_command", metavar="COMMAND", parser_class=c.__class__)
    once = csub.add_parser(
        "once",
        parents=[common],
        help="distil the turns imported since the last run into decisions, facts, preferences and entities",
    )
    once.add_argument("--replies", metavar="FILE", help="replay recorded model replies from FILE instead of asking the seat")
    once.add_argument("--limit", type=int, default=40, metavar="N", help="turns per model call (1 to 500, default 40)")
    once.set_defaults(func=cmd_cycle_once)
    for parser in (m, c):
        parser.set_defaults(func=lambda ctx, args, parser=parser: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def read_replies(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()[: MAX_REPLIES_BYTES + 1]
    except OSError:
        raise MemoriesError("io_error", "The replies file could not be read.") from None
    if len(raw) > MAX_REPLIES_BYTES:
        raise MemoriesError("invalid_input", "The replies file is larger than 64 MiB.")
    try:
        text = raw.decode("utf-8")
        value = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    except (UnicodeDecodeError, ValueError):
        raise MemoriesError("invalid_input", "The replies file is neither a JSON array nor one JSON value per line.") from None
    return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]


def cmd_cycle_once(ctx: Context, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 500:
        raise MemoriesError("invalid_input", "--limit is between 1 and 500 turns.")
    body: dict[str, Any] = {"op": "memory_cycle", "limit": args.limit}
    if args.replies:
        body["replies"] = read_replies(Path(args.replies).expanduser())
    result = ctx.request(body, timeout=3600)
    text = (
        f"Read {result['turns_read']} turn(s) in {result['batches']} batch(es): {result['written']} conclusion(s) written, "
        f"{result['superseded']} earlier one(s) superseded; {result['pending_turns']} turn(s) still to read."
    )
    if result.get("stopped") == "replies_exhausted":
        text += "\nThe recorded replies ran out; the remaining turns wait for the next run."
    ctx.emit(result, text)
    return 0
