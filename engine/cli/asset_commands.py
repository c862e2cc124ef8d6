"""put, list, get, edit, delete, history, diff."""

from __future__ import annotations

import sys
import time

from engine.cli.content_options import add_content_options, body_from, meta_pairs, stdin_has_body, stdin_is_terminal
from engine.cli.context import Context, UsageError
from engine.terminal_text import one_line

TYPE_CHECKING = False  # list and get are on the CLI's fast path: no argparse, no typing (issue 20)
if TYPE_CHECKING:
    import argparse
    from typing import Any


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "put",
        parents=[common],
        help="store a new memory",
        description="Store a new memory. A piped standard input is read as the body; with no body and a "
        "terminal, your editor ($VISUAL or $EDITOR) opens on a new memory.",
    )
    add_content_options(p, piped_body=True)
    p.add_argument("--vault", metavar="NAME", help="store it in this vault (default: the default vault)")
    p.set_defaults(func=cmd_put)

    p = sub.add_parser("list", parents=[common], help="list current memories, most recently changed first")
    p.add_argument("--limit", type=int, default=100, help="show at most this many (default 100)")
    p.add_argument("--offset", type=int, default=0, help="skip this many first (for paging)")
    p.add_argument("--all", action="store_true", help="show every memory, however many")
    p.add_argument("--tag", help="only memories with this tag")
    p.add_argument(
        "--sort",
        choices=("updated", "oldest", "title"),
        default="updated",
        help="updated: most recently changed first (default); oldest: least recently changed first; title: A to Z",
    )
    p.add_argument("--vault", metavar="NAME", help="list this vault (default: the default vault)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("get", parents=[common], help="show one memory")
    p.add_argument("id", help="the memory's ID or a unique prefix of it (at least 4 characters)")
    p.add_argument("--rev", help="show this revision (from `memories history`) instead of the current one")
    p.add_argument("--vault", metavar="NAME", help="only if the memory is in this vault")
    p.set_defaults(func=cmd_get)

    p = sub.add_parser(
        "edit",
        parents=[common],
        help="edit a memory (a new revision on its base)",
        description="Edit a memory. With no field options, a piped standard input (or a non-empty file "
        "redirected to it) becomes the new body; on a terminal your editor ($VISUAL or $EDITOR) opens on the "
        "title, tags, meta and body, and the memory is saved only if you changed the file.",
    )
    p.add_argument("id", help="the memory's ID or a unique prefix of it")
    add_content_options(p, tag_help="set the tags to exactly these, replacing the others (repeatable)")
    p.add_argument("--add-tag", action="append", metavar="TAG", help="add this tag, keep the others (repeatable)")
    p.add_argument("--remove-tag", action="append", metavar="TAG", help="remove this tag (repeatable)")
    p.add_argument("--base", help="the revision you are editing (default: the current head)")
    p.add_argument("--resolve", action="store_true", help="write a revision whose parents are all heads")
    p.set_defaults(func=cmd_edit)

    p = sub.add_parser("delete", parents=[common], help="delete (tombstone; history is kept)")
    p.add_argument("id", help="the memory's ID or a unique prefix of it")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("history", parents=[common], help="list the revisions of a memory")
    p.add_argument("id", help="the memory's ID or a unique prefix of it")
    p.add_argument("--restore", metavar="REV", help="write this earlier revision's content as a new revision (history is kept)")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("trash", parents=[common], help="deleted items, and restoring one (`trash restore ID`)")
    tsub = p.add_subparsers(dest="trash_cmd")
    tp = tsub.add_parser("restore", parents=[common], help="bring a deleted item back as a new revision")
    tp.add_argument("id", help="the deleted item's ID or a unique prefix of it")
    p.set_defaults(func=cmd_trash)

    p = sub.add_parser("diff", parents=[common], help="unified diff between revisions")
    p.add_argument("id", help="the memory's ID or a unique prefix of it")
    p.add_argument(
        "rev_a", nargs="?", help="the older revision (default: the head's parent; alone, it is compared with the head)"
    )
    p.add_argument("rev_b", nargs="?", help="the newer revision (default: the current head)")
    p.set_defaults(func=cmd_diff)


def _tags(tags: list[str]) -> str:
    return ", ".join(one_line(t) for t in tags)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


def cmd_put(ctx: Context, args: argparse.Namespace) -> int:
    body = body_from(args, piped=True)
    title, tags, meta = args.title, args.tags or [], meta_pairs(args.meta) or {}
    if body is None and stdin_is_terminal() and not ctx.json_output:
        from engine.cli.editor import Draft, edit_draft

        draft = edit_draft(Draft(title=title or "", tags=list(tags), meta=dict(meta)), ctx.paths.home)
        if draft is None:
            ctx.emit({"saved": False}, "No changes; nothing was saved.")
            return 0
        title, tags, meta, body = draft.title, draft.tags, draft.meta, draft.body
    if not title:
        raise UsageError("put needs a title: give --title, or run it in a terminal to write one in your editor")
    request = {"op": "put", "title": title, "body": body or "", "tags": tags, "meta": meta}
    if args.vault is not None:
        request["vault"] = args.vault
    result = ctx.request(request)
    ctx.emit(result, f"{result['short_id']}  (revision {result['short_revision']})")
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    if args.limit < 1 or args.offset < 0:
        raise UsageError("--limit must be at least 1 and --offset at least 0")
    body: dict[str, Any] = {"op": "list", "limit": args.limit, "offset": args.offset}
    if args.sort != "updated":
        body["sort"] = args.sort
    if args.tag:
        body["tag"] = args.tag
    if args.vault is not None:
        body["vault"] = args.vault
    if args.all:
        from engine.service.memory import gc_paused

        body["limit"] = LIST_PAGE
        # Every row stays until the output is printed, so the cyclic collector's full passes
        # over the rows received so far free nothing (issue 32: the engine's side of the same
        # pattern cost 25x for 10x the notes). The process ends after printing.
        with gc_paused():
            result = ctx.request(body)
            items = list(result["items"])
            while args.offset + len(items) < result["total"]:
                page = ctx.request({**body, "offset": args.offset + len(items)})
                if not page["items"]:
                    break
                items.extend(page["items"])
            result = {**result, "items": items}
            _print_list(ctx, result)
    else:
        result = ctx.request(body)
        _print_list(ctx, result)
    shown, total = len(result["items"]), result["total"]
    if not ctx.json_output and shown and args.offset + shown < total:
        first = args.offset + 1
        span = f"{shown:,}" if args.offset == 0 else f"{first:,}–{args.offset + shown:,}"
        print(
            f"showing {span} of {total:,} — more with `--limit N`, `--offset {args.offset + shown}` or `--all`", file=sys.stderr
        )
    return 0


LIST_PAGE = 10_000


def _print_list(ctx: Context, result: dict[str, Any]) -> None:
    if ctx.json_output:  # the rows as text only when they are shown (100k of them cost seconds)
        ctx.emit(result)
        return
    lines = []
    for item in result["items"]:
        tags = f"  [{_tags(item['tags'])}]" if item["tags"] else ""
        flag = "  CONFLICT" if item["conflict"] else ""
        lines.append(f"{item['short_id']}  {_when(item['updated_ms'])}  {one_line(item['title'])}{tags}{flag}")
    if not lines:
        lines.append("(no memories)" if not result["total"] else f"(none past the first {result['total']:,})")
    ctx.emit(result, "\n".join(lines))


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
        for k, v in sorted(view["meta"].items()):
            # A login's URLs are stored one per line: print one line each, never a literal "\n".
            values = str(v).split("\n") if k == "urls" else [v]
            head.extend(f"{one_line(k)}: {one_line(value)}" for value in values)
        notes = [
            f"note {_when(n.get('at_ms', 0))} by {one_line(str(n.get('by', '')))}: {one_line(str(n.get('note', '')))}"
            for n in view.get("annotations", [])
        ]
        blocks.append("\n".join(head) + "\n\n" + view["body"] + ("\n\n" + "\n".join(notes) if notes else ""))
    ctx.emit(result, "\n\n---\n\n".join(blocks))
    return 0


def cmd_edit(ctx: Context, args: argparse.Namespace) -> int:
    if args.tags is not None and (args.add_tag or args.remove_tag):
        raise UsageError("--tag sets the whole list; use it alone, or use --add-tag/--remove-tag")
    body: dict[str, Any] = {"op": "edit", "id": args.id, "resolve": args.resolve}
    text = body_from(args)
    meta = meta_pairs(args.meta)
    fields = [args.title, text, args.tags, args.add_tag, args.remove_tag, meta]
    no_fields = all(value is None for value in fields)
    if no_fields and stdin_has_body():
        text = body_from(args, piped=True)  # `… | memories edit ID`: the pipe is the new body
        no_fields = False
    # `edit ID --resolve` alone is a change: one revision over every head (the newest head's
    # content), as the conflict message suggests; it needs no field and no editor.
    use_editor = no_fields and not args.resolve
    if use_editor and (ctx.json_output or not stdin_is_terminal()):
        raise UsageError(
            "nothing to change: give --title, --body, --tag, --add-tag, --remove-tag or --meta, pipe the new body "
            "on standard input, or run it in a terminal to use your editor"
        )
    current: dict[str, Any] | None = None
    if args.base:
        body["base"] = args.base
    if use_editor or args.add_tag or args.remove_tag or args.tags is not None or not (args.base or args.resolve):
        # The base is the head we read now: if someone edits in between, the engine
        # records a conflict instead of silently overwriting their edit (HI-4).
        # A conflicted memory makes the engine answer `conflict` whatever the base.
        request: dict[str, Any] = {"op": "get", "id": args.id}
        if args.base:
            request["rev"] = args.base
        current = ctx.request(request)
        if not args.base and not args.resolve:
            body["base"] = current["revision"]
    old_tags: list[str] = list(current["tags"]) if current is not None else []
    if use_editor:
        assert current is not None
        if "body" not in current:
            raise UsageError("this item has no editable body; edit it with its own command")
        from engine.cli.editor import Draft, edit_draft

        before = Draft(current["title"], list(current["tags"]), dict(current["meta"]), current["body"])
        after = edit_draft(before, ctx.paths.home)
        if after is None:
            ctx.emit({"saved": False}, "No changes; nothing was saved.")
            return 0
        changed = {
            "title": (after.title, before.title),
            "body": (after.body, before.body),
            "tags": (after.tags, before.tags),
            "meta": (after.meta, before.meta),
        }
        body.update({name: new for name, (new, old) in changed.items() if new != old})
    else:
        if args.title is not None:
            body["title"] = args.title
        if text is not None:
            body["body"] = text
        if meta is not None:
            body["meta"] = meta
        if args.tags is not None:
            body["tags"] = args.tags
        elif args.add_tag or args.remove_tag:
            removed = set(args.remove_tag or [])
            tags = [t for t in old_tags if t not in removed]
            tags += [t for t in dict.fromkeys(args.add_tag or []) if t not in tags and t not in removed]
            body["tags"] = tags
    result = ctx.request(body)
    note = "  CONFLICT: the base was stale; both versions are kept" if result["conflict"] else ""
    lines = [f"{result['short_id']}  (revision {result['short_revision']}){note}"]
    if "tags" in body and current is not None:
        lines.append(_tag_change(old_tags, body["tags"]))
    ctx.emit(result, "\n".join(lines))
    return 0


def _tag_change(old: list[str], new: list[str]) -> str:
    added = [t for t in new if t not in old]
    removed = [t for t in old if t not in new]
    parts = ([f"added {_tags(added)}"] if added else []) + ([f"removed {_tags(removed)}"] if removed else [])
    return "tags: " + ("; ".join(parts) if parts else "unchanged") + f" (now: {_tags(new) or 'none'})"


def cmd_delete(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "delete", "id": args.id})
    ctx.emit(result, f"deleted {result['short_id']} (kept in history)")
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    if args.restore:
        restored = ctx.request({"op": "restore_revision", "id": args.id, "rev": args.restore})
        ctx.emit(
            restored,
            f"restored {restored['short_id']}: revision {restored['restored_from'][:12]} "
            f"is now revision {restored['short_revision']}",
        )
        return 0
    result = ctx.request({"op": "history", "id": args.id})
    lines = ["REVISION      WHEN              AUTHOR            PARENTS       TITLE"]
    for rev in result["revisions"]:
        marks = (" (deleted)" if rev["tombstone"] else "") + (" HEAD" if rev["head"] else "")
        parents = ",".join(p[:12] for p in rev["parents"]) or "-"
        when = _when(rev["created_ms"])
        author, title = one_line(rev["author"]), one_line(rev["title"])
        lines.append(f"{rev['short_revision']:<12}  {when}  {author:<16}  {parents:<12}  {title}{marks}")
        for note in rev.get("annotations", []):
            lines.append(f"{'':<12}  note by {one_line(str(note.get('by', '')))}: {one_line(str(note.get('note', '')))}")
    ctx.emit(result, "\n".join(lines))
    return 0


def cmd_trash(ctx: Context, args: argparse.Namespace) -> int:
    if args.trash_cmd == "restore":
        result = ctx.request({"op": "restore_revision", "id": args.id})
        ctx.emit(result, f"restored {result['short_id']} from the trash (revision {result['short_revision']})")
        return 0
    result = ctx.request({"op": "trash"})
    if not result["items"]:
        ctx.emit(result, "The trash is empty.")
        return 0
    lines = ["ID            DELETED           KIND       TITLE"]
    for item in result["items"]:
        lines.append(f"{item['short_id']:<12}  {_when(item['deleted_ms'])}  {item['kind']:<9}  {one_line(item['title'])}")
    lines.append("Restore one with `memories trash restore ID`.")
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
