"""put, list, get, edit, delete, history, diff."""

from __future__ import annotations

import argparse
import time
from typing import Any

from engine.cli.content_options import add_content_options, body_from, meta_pairs
from engine.cli.context import Context, UsageError
from engine.terminal_text import one_line


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "put", parents=[common], help="store a new memory", description="A piped standard input is read as the body."
    )
    add_content_options(p, piped_body=True)
    p.add_argument("--vault", metavar="NAME", help="store it in this vault (default: the default vault)")
    p.set_defaults(func=cmd_put)

    p = sub.add_parser("list", parents=[common], help="list current memories, newest first")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--tag")
    p.add_argument("--vault", metavar="NAME", help="list this vault (default: the default vault)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("get", parents=[common], help="show one memory")
    p.add_argument("id")
    p.add_argument("--rev", help="show this revision (from `memories history`) instead of the current one")
    p.add_argument("--vault", metavar="NAME", help="only if the memory is in this vault")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("edit", parents=[common], help="edit a memory (a new revision on its base)")
    p.add_argument("id")
    add_content_options(p)
    p.add_argument("--base", help="the revision you are editing (default: the current head)")
    p.add_argument("--resolve", action="store_true", help="write a revision whose parents are all heads")
    p.set_defaults(func=cmd_edit)

    p = sub.add_parser("delete", parents=[common], help="delete (tombstone; history is kept)")
    p.add_argument("id")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("history", parents=[common], help="list the revisions of a memory")
    p.add_argument("id")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("diff", parents=[common], help="unified diff between revisions")
    p.add_argument("id")
    p.add_argument("rev_a", nargs="?")
    p.add_argument("rev_b", nargs="?")
    p.set_defaults(func=cmd_diff)


def _tags(tags: list[str]) -> str:
    return ", ".join(one_line(t) for t in tags)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def cmd_put(ctx: Context, args: argparse.Namespace) -> int:
    if not args.title:
        raise UsageError("put needs --title")
    body = body_from(args, piped=True) or ""
    request = {"op": "put", "title": args.title, "body": body, "tags": args.tags or [], "meta": meta_pairs(args.meta) or {}}
    if args.vault is not None:
        request["vault"] = args.vault
    result = ctx.request(request)
    ctx.emit(result, f"{result['short_id']}  (revision {result['short_revision']})")
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "list", "limit": args.limit, "offset": args.offset}
    if args.tag:
        body["tag"] = args.tag
    if args.vault is not None:
        body["vault"] = args.vault
    result = ctx.request(body)
    lines = []
    for item in result["items"]:
        tags = f"  [{_tags(item['tags'])}]" if item["tags"] else ""
        flag = "  CONFLICT" if item["conflict"] else ""
        lines.append(f"{item['short_id']}  {_when(item['updated_ms'])}  {one_line(item['title'])}{tags}{flag}")
    if not lines:
        lines.append("(no memories)")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"op": "get", "id": args.id}
    if args.rev:
        request["rev"] = args.rev
    if args.vault is not None:
        request["vault"] = args.vault
    result = ctx.request(request)
    views = result["head_contents"] or [result]
    blocks = []
    if result["conflict"]:
        blocks.append(f"CONFLICT: {len(views)} heads; resolve with `memories edit {result['short_id']} --resolve`")
    for view in views:
        tags = _tags(view["tags"])
        head = [f"id:       {result['short_id']}", f"revision: {view['short_revision']}", f"title:    {one_line(view['title'])}"]
        if tags:
            head.append(f"tags:     {tags}")
        head.extend(f"{one_line(k)}: {one_line(v)}" for k, v in sorted(view["meta"].items()))
        blocks.append("\n".join(head) + "\n\n" + view["body"])
    ctx.emit(result, "\n\n---\n\n".join(blocks))
    return 0


def cmd_edit(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "edit", "id": args.id, "resolve": args.resolve}
    if args.title is not None:
        body["title"] = args.title
    text = body_from(args)
    if text is not None:
        body["body"] = text
    if args.tags is not None:
        body["tags"] = args.tags
    meta = meta_pairs(args.meta)
    if meta is not None:
        body["meta"] = meta
    if args.base:
        body["base"] = args.base
    elif not args.resolve:
        # The base is the head we read now: if someone edits in between, the engine
        # records a conflict instead of silently overwriting their edit (HI-4).
        # A conflicted asset makes the engine answer `conflict` whatever the base.
        current = ctx.request({"op": "get", "id": args.id})
        body["base"] = current["revision"]
    result = ctx.request(body)
    note = "  CONFLICT: the base was stale; both versions are kept" if result["conflict"] else ""
    ctx.emit(result, f"{result['short_id']}  (revision {result['short_revision']}){note}")
    return 0


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "delete", "id": args.id})
    ctx.emit(result, f"deleted {result['short_id']} (kept in history)")
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "history", "id": args.id})
    lines = []
    for rev in result["revisions"]:
        marks = (" (deleted)" if rev["tombstone"] else "") + (" HEAD" if rev["head"] else "")
        parents = ",".join(p[:12] for p in rev["parents"]) or "-"
        when = _when(rev["created_ms"])
        author, title = one_line(rev["author"]), one_line(rev["title"])
        lines.append(f"{rev['short_revision']}  {when}  {author}  parents {parents}  {title}{marks}")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_diff(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "diff", "id": args.id}
    if args.rev_a:
        body["rev_a"] = args.rev_a
    if args.rev_b:
        body["rev_b"] = args.rev_b
    result = ctx.request(body)
    ctx.emit(result, result["diff"] or "(no differences)")
    return 0
