"""``memories agent connect|list|disconnect`` (AG-6): one command connects an agent client.

Connect creates (or keeps) the MCP grant through the engine's grant ops, stores its token
outside every shared file (engine/agents/connect.py), merges the client's config with the
absolute command ``memories --home HOME mcp --agent NAME``, and installs the skill.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from engine.cli.context import Context
from engine.errors import MemoriesError

_CLIENTS = ("claude-code", "codex", "opencode")
log = logging.getLogger(__name__)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("agent", parents=[common], help="connect an AI agent client (Claude Code, Codex, OpenCode) in one step")
    actions = p.add_subparsers(dest="agent_command", metavar="ACTION", parser_class=type(p))
    p.set_defaults(func=lambda ctx, args: p.print_help() or 2)

    a = actions.add_parser("connect", parents=[common], help="grant, store the token, write the client config, install the skill")
    a.add_argument("client", choices=_CLIENTS, help="the agent client to connect (also the agent's name)")
    a.add_argument("--scope", choices=("read", "read_write"), default="read_write", help="what the agent may do")
    a.add_argument(
        "--project",
        metavar="DIR",
        help="a grant of its own for this project, config in DIR (else the client's user config)",
    )
    a.add_argument(
        "--transcripts",
        choices=("this-project", "all", "none"),
        default=None,
        help="which imported agent sessions the agent may read: this-project (the sessions whose working "
        "directory is inside --project; the default with --project), all, or none (the default without --project)",
    )
    a.set_defaults(func=cmd_connect)

    a = actions.add_parser(
        "capture",
        parents=[common],
        help="import the session a client hook names (installed by connect; quiet)",
        description="Run by Claude Code's Stop/SessionEnd hooks (their JSON on stdin names the transcript_path) "
        "and by Codex's notify program (--codex-notify: the JSON Codex appends names the thread, whose rollout "
        "file is imported). Prints nothing on success; on failure one line on stderr and exit 1 (never 2, "
        "which would block the agent).",
    )
    a.add_argument("--codex-notify", action="store_true", help="run as Codex's notify program")
    a.add_argument("--chain", metavar="ARGV_JSON", help="the notify program the user had: run first, with the same argument")
    a.add_argument("name", help="the agent whose hook this is")
    a.add_argument("payload", nargs="?", help="(Codex) the notification JSON Codex appends")
    a.set_defaults(func=cmd_capture)

    a = actions.add_parser("list", parents=[common], help="connected agents, where their token is, what was written")
    a.set_defaults(func=cmd_list)

    a = actions.add_parser(
        "notebook",
        parents=[common],
        help="read, export or delete an agent's private notebook",
        description="Without NAME: every agent's notebook. With NAME (the agent's grant name, or a notebook ID "
        "prefix): its entries and scratch pad. A revoked agent's notebook stays until you delete it.",
    )
    a.add_argument("name", nargs="?", help="the agent's name (see `memories agent list`) or a notebook ID prefix")
    a.add_argument("--revisions", action="store_true", help="show every revision, not only the latest")
    a.add_argument("--export", metavar="FILE", help="write the whole notebook, every revision, as JSON to FILE (new file, 0600)")
    a.add_argument("--delete", action="store_true", help="erase the notebook for good (needs `memories sudo`)")
    a.set_defaults(func=cmd_notebook)

    a = actions.add_parser("disconnect", parents=[common], help="revoke the grant and remove what connect wrote")
    a.add_argument("name", help="the agent's name (see `memories agent list`), or the client with --project")
    a.add_argument("--project", metavar="DIR", help="disconnect only this project's grant of the client NAME")
    a.set_defaults(func=cmd_disconnect)


def _active_grant(ctx: Context, name: str) -> dict[str, Any] | None:
    grants = ctx.request({"op": "mcp_grants", "include_revoked": False})["grants"]
    return next((g for g in grants if g["name"] == name and g["active"]), None)


def _token_works(ctx: Context, token: str) -> bool:
    try:
        ctx.request({"op": "mcp_whoami", "token": token})
    except MemoriesError as exc:
        if exc.code == "unauthorized":
            return False
        raise
    return True


def _project_of(args: argparse.Namespace) -> Path | None:
    if not args.project:
        return None
    project = Path(args.project).resolve()
    if not project.is_dir():
        raise MemoriesError("invalid_input", "--project must be an existing directory.")
    return project


def cmd_connect(ctx: Context, args: argparse.Namespace) -> int:
    """AG-11: one grant per client and project; everything is checked before anything is
    written, and a step that still fails undoes the steps before it."""
    from engine.agents import connect as c

    home = Path(ctx.paths.home)
    client = args.client
    project = _project_of(args)
    name = c.agent_name(client, project)
    mode = args.transcripts or ("this-project" if project is not None else "none")
    if mode == "this-project" and project is None:
        raise MemoriesError("invalid_input", "--transcripts this-project needs --project DIR; use all or none without it.")
    transcripts = mode != "none"
    transcripts_project = str(project) if mode == "this-project" and project is not None else None
    # 1. Everything that can be refused, refused before any change.
    command = c.agent_command(home, name)
    path = c.config_path(client, project)
    old_config, new_config = c.prepare_config(client, path, name, command)
    hooks_file = c.hooks_path(client, project)
    if client == "codex":
        # Codex's notify is a key of the same config.toml: merged into the config's new bytes.
        inherited = c.user_notify() if project is not None else None
        new_config = c.prepare_notify(path, new_config, home, name, inherited)
        old_hooks, new_hooks = old_config, None
    else:
        hook_command = c.capture_command(home, name)
        old_hooks, new_hooks = c.prepare_hooks(hooks_file, hook_command) if hooks_file else (None, None)
    c.check_token_store(home, name)
    manifest = c.load_manifest(home, name)
    grant = _active_grant(ctx, name)  # needs `memories sudo`: refused here, before any write
    token = c.load_token(home, name)
    reuse = (
        grant is not None
        and token is not None
        and grant["scope"] == args.scope
        and bool(grant.get("transcripts")) == transcripts
        and grant.get("transcripts_project") == transcripts_project
        and manifest is not None
        and _token_works(ctx, token)
    )
    # 2. The changes, each with its undo (run newest first if a later step fails).
    undo: list[tuple[str, Any]] = []
    skills = list(manifest.skills) if manifest else []
    skill_note = ""
    try:
        if new_config != old_config:
            c.put_config(path, new_config)
            undo.append(("config", lambda: c.put_config(path, old_config)))
        skill_note = _install_skill(client, project, skills, undo)
        if hooks_file is not None and new_hooks is not None and new_hooks != old_hooks:
            c.put_config(hooks_file, new_hooks)
            undo.append(("hooks", lambda: c.put_config(hooks_file, old_hooks)))
        if reuse:
            store = manifest.token_store if manifest else "file"
        else:
            if grant is not None:  # its token is lost or its scope changes: replace the grant
                ctx.request({"op": "mcp_revoke", "name": name})
            # AG-13: the same agent connected again keeps its notebook.
            body: dict[str, Any] = {"op": "mcp_grant", "name": name, "scope": args.scope, "keep_notebook": True}
            if transcripts:
                body["transcripts"] = True
            if transcripts_project is not None:
                body["transcripts_project"] = transcripts_project
            token = str(ctx.request(body)["token"])
            undo.append(("grant", lambda: ctx.request({"op": "mcp_revoke", "name": name})))
            old_token = c.load_token(home, name)
            store = c.save_token(home, name, token)
            undo.append(("token", lambda: _restore_token(home, name, old_token)))
        configs = dict(manifest.configs) if manifest else {}
        configs[str(path)] = configs.get(str(path), old_config is None)
        project_text = str(project) if project else None
        hooks = dict(manifest.hooks) if manifest else {}
        if hooks_file is not None:
            hooks[str(hooks_file)] = hooks.get(str(hooks_file), old_hooks is None)
        c.save_manifest(
            home, c.Manifest(name, client, args.scope, store, configs, skills, project_text, transcripts, hooks, mode)
        )
    except BaseException:
        for what, step in reversed(undo):
            try:
                step()
            except Exception as exc:  # keep undoing the rest; the original error is what the user sees
                log.warning("agent connect: undoing the %s step failed (%s)", what, type(exc).__name__)
        raise
    result = {
        "name": name,
        "client": client,
        "project": str(project) if project else None,
        "scope": args.scope,
        "transcripts": transcripts,
        "transcripts_scope": mode,
        "grant": "kept" if reuse else "created",
        "token_store": store,
        "config": str(path),
        "command": command,
        "skills": skills,
        "hooks": str(hooks_file) if hooks_file else None,
    }
    where = "the OS keyring" if store == "keyring" else f"{home / 'agents' / (name + '.token')} (0600)"
    text = (
        f"connected {name} ({args.scope}{', transcripts: ' + mode if transcripts else ''}; grant {result['grant']})\n"
        f"config: {path}\n"
        f"command: {' '.join(command)}\n"
        f"token: in {where}, never in the config{skill_note}"
        + (f"\ncapture: {_capture_text(client)} in {hooks_file} import each session as it happens" if hooks_file else "")
    )
    ctx.emit(result, text)
    return 0


def _capture_text(client: str) -> str:
    return "its notify program" if client == "codex" else "Stop and SessionEnd hooks"


def _install_skill(client: str, project: Path | None, skills: list[str], undo: list[tuple[str, Any]]) -> str:
    from engine.skills.inject import inject

    try:
        for item in inject([client], "project" if project else "user", project=project):
            if item["action"] == "created" and item["path"] not in skills:
                skills.append(item["path"])
                created = Path(item["path"])
                undo.append(("skill", lambda created=created: _remove_skill(created)))
    except MemoriesError as exc:  # a SKILL.md the user changed is kept as it is
        return f" (skill kept: {exc.message})"
    return ""


def _restore_token(home: Path, name: str, old: str | None) -> None:
    from engine.agents import connect as c

    if old is None:
        c.delete_token(home, name)
    else:
        c.save_token(home, name, old)


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    from engine.agents import connect as c

    home = Path(ctx.paths.home)
    grants = {g["name"]: g for g in ctx.request({"op": "mcp_grants", "include_revoked": False})["grants"]}
    items: list[dict[str, Any]] = []
    for m in c.manifests(home):
        grant = grants.get(m.name)
        items.append(
            {
                "name": m.name,
                "client": m.client,
                "project": m.project,
                "scope": grant["scope"] if grant else m.scope,
                "transcripts": bool(grant["transcripts"]) if grant else m.transcripts,
                "active": grant is not None,
                "token_store": m.token_store,
                "token_present": c.load_token(home, m.name) is not None,
                "configs": sorted(m.configs),
                "last_used_ms": grant["last_used_ms"] if grant else None,
            }
        )
    lines = [
        f"{i['name']:<28} {i['scope']:<10}{' +transcripts' if i['transcripts'] else ''} "
        f"{'active' if i['active'] else 'REVOKED':<8} token:{i['token_store']}"
        f"{'' if i['token_present'] else ' (missing)'}  project: {i['project'] or '(user config)'}"
        f"  {', '.join(i['configs'])}"
        for i in items
    ]
    ctx.emit({"agents": items}, "\n".join(lines) or "(no connected agents; `memories agent connect claude-code`)")
    return 0


def cmd_disconnect(ctx: Context, args: argparse.Namespace) -> int:
    from engine.agents import connect as c

    home = Path(ctx.paths.home)
    project = _project_of(args)
    if project is not None:
        if args.name not in _CLIENTS:
            raise MemoriesError("invalid_input", "With --project, name the client: claude-code, codex or opencode.")
        name = c.agent_name(args.name, project)
    else:
        name = args.name
    manifest = c.load_manifest(home, name)
    revoked = False
    if _active_grant(ctx, name) is not None:
        ctx.request({"op": "mcp_revoke", "name": name})
        revoked = True
    if manifest is None and not revoked:
        raise MemoriesError("not_found", "No connected agent has that name (see `memories agent list`).")
    removed: list[str] = []
    if manifest is not None:
        for path, created in manifest.configs.items():
            if c.remove_config(manifest.client, Path(path), created):
                removed.append(path)
        for hooks_file, created in manifest.hooks.items():
            if manifest.client == "codex":
                gone = c.remove_notify(Path(hooks_file), created)
            else:
                gone = c.remove_hooks(Path(hooks_file), c.capture_command(home, name), created)
            if gone and hooks_file not in removed:
                removed.append(hooks_file)
        for skill in manifest.skills:
            if _still_used(home, name, skill):
                continue  # another project's connect of the same client shares this skill file
            _remove_skill(Path(skill))
            removed.append(skill)
    c.delete_token(home, name)
    c.delete_manifest(home, name)
    result = {"name": name, "revoked": revoked, "removed": removed}
    ctx.emit(result, f"disconnected {name}" + "".join(f"\nremoved {p}" for p in removed))
    return 0


def cmd_capture(ctx: Context, args: argparse.Namespace) -> int:
    """A client hook: import the transcript it names, quietly (AG-11 automatic capture)."""
    import json
    import sys

    from engine.cli.transcript_commands import import_files

    if args.codex_notify:
        return _capture_codex(ctx, args)
    try:
        event = json.loads(sys.stdin.read(1024 * 1024) or "{}")
    except ValueError:
        raise MemoriesError("invalid_input", "The hook's input is not JSON.") from None
    transcript = event.get("transcript_path") if isinstance(event, dict) else None
    if not isinstance(transcript, str) or not transcript.endswith(".jsonl") or not Path(transcript).is_file():
        raise MemoriesError("invalid_input", "The hook's input names no transcript_path of an existing .jsonl file.")
    totals = import_files(ctx, [Path(transcript)], quiet=True)
    if ctx.json_output:
        ctx.emit(totals, "")
    return 0


def _capture_codex(ctx: Context, args: argparse.Namespace) -> int:
    """Codex's notify: run the user's own notify first, then import the thread's rollout file."""
    import json

    from engine.agents.codex_notify import find_rollout, run_chained, wait_for_turn
    from engine.cli.transcript_commands import import_files

    payload = args.payload or ""
    if args.chain:
        run_chained(args.chain, payload)
    try:
        event = json.loads(payload)
    except ValueError:
        raise MemoriesError("invalid_input", "Codex's notification is not JSON.") from None
    if not isinstance(event, dict):
        raise MemoriesError("invalid_input", "Codex's notification is not a JSON object.")
    if event.get("type") != "agent-turn-complete":
        return 0  # another kind of notification: nothing to import
    rollout = find_rollout(event.get("thread-id"))
    wait_for_turn(rollout, event.get("turn-id"))
    totals = import_files(ctx, [rollout], quiet=True)
    if ctx.json_output:
        ctx.emit(totals, "")
    return 0


def _still_used(home: Path, name: str, skill: str) -> bool:
    from engine.agents import connect as c

    return any(skill in m.skills for m in c.manifests(home) if m.name != name)


def _remove_skill(path: Path) -> None:
    """Remove a SKILL.md connect created, if it is still ours, and its directory if empty."""
    from engine.skills.inject import skill_bytes

    try:
        if path.is_symlink() or path.read_bytes() != skill_bytes():
            return  # changed by the user since: theirs now
    except FileNotFoundError:
        return
    path.unlink()
    # SKILL.md sits in <root>/.claude/skills/memories/: remove the folders connect may have
    # made on the way down when nothing else is in them (a non-empty one is the user's).
    folder = path.parent
    for _ in range(3):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _time(ms: int | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "-"


def cmd_notebook(ctx: Context, args: argparse.Namespace) -> int:
    """AG-13: the user's view of the agents' notebooks: list, read, export, delete."""
    if args.name is None:
        if args.export or args.delete:
            raise MemoriesError("invalid_input", "Name the agent whose notebook to export or delete.")
        notebooks = ctx.request({"op": "notebook_show"})["notebooks"]
        lines = [
            f"{n['agent']:<28} {'active' if n['agent_active'] else 'REVOKED':<8} {n['entries']:>4} entries "
            f"{n['revisions']:>5} revisions  since {_time(n['created_ms'])}  id {n['id'][:12]}"
            for n in notebooks
        ]
        ctx.emit({"notebooks": notebooks}, "\n".join(lines) or "(no agent has written in a notebook yet)")
        return 0
    if args.delete:
        if args.export:
            raise MemoriesError("invalid_input", "Export first, then delete: not both at once.")
        result = ctx.request({"op": "notebook_delete", "name": args.name})
        ctx.emit(result, f"deleted notebook {result['id'][:12]} ({result['revisions_erased']} revisions erased)")
        return 0
    whole = ctx.request({"op": "notebook_show", "name": args.name, "revisions": bool(args.revisions or args.export)})
    if args.export:
        return _export_notebook(ctx, Path(args.export), whole)
    ctx.emit(whole, _notebook_text(whole))
    return 0


def _notebook_text(whole: dict[str, Any]) -> str:
    from engine.terminal_text import block, one_line

    book = whole["notebook"]
    out = [f"notebook of {book['agent']} ({'active' if book['agent_active'] else 'revoked'}), id {book['id'][:12]}"]
    for entry in whole["entries"]:
        flag = " (forgotten by the agent)" if entry["forgotten"] else ""
        out.append(f"\n## {one_line(entry['title'])}  [{entry['id'][:8]} rev {entry['rev']}, {_time(entry['updated_ms'])}]{flag}")
        if entry["tags"]:
            out.append("tags: " + ", ".join(one_line(t) for t in entry["tags"]))
        out.append(block(entry["body"]))
        for revision in entry.get("revisions", [])[:-1]:
            out.append(
                f"  - rev {revision['rev']} ({_time(revision['at_ms'])}): {one_line(revision.get('title', '(forgotten)'))}"
            )
    scratch = whole.get("scratch")
    if scratch:
        out.append(f"\n## scratch pad  [rev {scratch['rev']}, {_time(scratch['at_ms'])}]")
        out.append(block(scratch["text"]))
    return "\n".join(out)


def _export_notebook(ctx: Context, path: Path, whole: dict[str, Any]) -> int:
    """Write the notebook as JSON to a new 0600 file (never over an existing one)."""
    import json
    import os

    data = (json.dumps({"format": "memories-notebook", "version": 1, **whole}, ensure_ascii=False, indent=2) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        raise MemoriesError("invalid_input", f"{path} already exists; choose a new file name.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"{path} could not be created.") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    book = whole["notebook"]
    result = {"exported": str(path), "id": book["id"], "entries": len(whole["entries"])}
    ctx.emit(result, f"exported the notebook of {book['agent']} ({len(whole['entries'])} entries, every revision) to {path}")
    return 0
