"""run --env NAME=REF … [--template FILE] [--no-masking] -- CMD …: a program with secrets (RN-1, API-7)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
from typing import Any

from engine.cli.context import Context, UsageError
from engine.errors import MemoriesError

__all__ = ["register", "TEMPLATE_REF"]

TEMPLATE_REF = re.compile(r"\{\{\s*secret:([^{}\s]{1,300})\s*\}\}")
MAX_TEMPLATE_BYTES = 1024 * 1024


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("run", parents=[common], help="run a program with secrets in its environment (needs sudo)")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=REF",
        help="set NAME to a secret: a label, ID:LABEL, or card:ID#field (repeatable)",
    )
    p.add_argument(
        "--template",
        metavar="FILE",
        help="render {{secret:LABEL}} in FILE to a private temp file: $MEMORIES_TEMPLATE, {template} in CMD",
    )
    p.add_argument("--no-masking", action="store_true", help="pass the program's output through unmasked")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the program and its arguments (no shell)")
    p.set_defaults(func=cmd_run)


def _bindings(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, ref = pair.partition("=")
        if not sep or not name or not ref:
            raise UsageError("--env takes NAME=REF, e.g. --env DB_PASSWORD=db_password")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise UsageError(f"--env: {name[:40]!r} is not an environment variable name")
        env[name] = ref
    return env


def _read_template(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise MemoriesError("io_error", f"The template could not be read ({exc.strerror}).") from None
    if len(data) > MAX_TEMPLATE_BYTES:
        raise MemoriesError("invalid_input", "A template is at most 1 MiB.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MemoriesError("invalid_input", "A template must be UTF-8 text.") from None


def cmd_run(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.run_child import Masker, run_child
    from engine.cli.scratch import new_scratch_dir

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("name the program after --, e.g. memories run --env TOKEN=api_token -- ./deploy.sh")
    bindings = _bindings(args.env)
    template = _read_template(args.template) if args.template is not None else None
    labels = list(dict.fromkeys(TEMPLATE_REF.findall(template))) if template is not None else []
    if not bindings and not labels:
        raise UsageError("name at least one secret with --env NAME=REF or a --template with {{secret:LABEL}}")
    prepared = ctx.request({"op": "run_bound_prepare", "env": bindings, "template": labels})
    values: dict[str, str] = prepared.pop("env")
    rendered: dict[str, str] = prepared.pop("template")
    env = dict(os.environ)
    env.update(values)
    workspace = None
    try:
        argv = command
        if template is not None:
            # In the data home, not the shared temp folder: a killed CLI leaves it where the
            # next call sweeps it (engine/cli/scratch.py, SECURITY.md).
            workspace = str(new_scratch_dir(ctx.paths.home, "run"))  # 0700
            path = os.path.join(workspace, os.path.basename(args.template) or "template")
            text = TEMPLATE_REF.sub(lambda m: rendered[m.group(1)], template)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as sink:
                sink.write(text)
            del text
            env["MEMORIES_TEMPLATE"] = path
            argv = [word.replace("{template}", path) for word in command]
        secrets = [*values.values(), *rendered.values()]
        masker = None if args.no_masking else Masker(secrets)
        del secrets
        ctx.close()  # the program runs without holding the engine (API-7)
        code = run_child(argv, env, masker)
    finally:
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)
    with contextlib.suppress(MemoriesError):
        ctx.request({"op": "run_bound_finish", "run": prepared["run"], "exit_code": max(-255, min(255, code))})
    return code
