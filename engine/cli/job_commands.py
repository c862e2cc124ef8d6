"""job plan|show|run: crypto jobs run by the engine from a plan the user saw (JB-1 … JB-3)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from engine.cli.context import Context
from engine.errors import MemoriesError, error_from_wire
from engine.terminal_text import one_line

__all__ = ["register"]

# How long one `job_status` request may wait for the run to change (the engine caps it too).
WAIT_MS = 5000
KINDS = ("smime-sign", "openpgp-sign", "openpgp-encrypt", "apk-sign", "ios-sign")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("job", parents=[common], help="crypto jobs: sign or encrypt files with keys in the vault")
    jsub = p.add_subparsers(dest="job_command", metavar="ACTION", required=True)

    plan = jsub.add_parser("plan", parents=[common], help="make a plan and show it with its digest (nothing runs)")
    plan.add_argument("kind", choices=KINDS, metavar="KIND", help="one of: " + ", ".join(KINDS))
    plan.add_argument("input", metavar="INPUT", help="the file to sign or encrypt (pinned by its SHA-256)")
    plan.add_argument("--output", "-o", required=True, metavar="PATH", help="where the result goes (must not exist yet)")
    plan.add_argument("--key", metavar="CRED", help="the signing credential: tls_cert (S/MIME, APK) or openpgp")
    plan.add_argument(
        "--recipient", action="append", default=[], metavar="CRED", help="openpgp-encrypt: an openpgp credential (repeatable)"
    )
    plan.add_argument(
        "--min-sdk",
        type=int,
        metavar="N",
        help="apk-sign: the APK's minimum Android API level (needed when its manifest does not say)",
    )
    plan.set_defaults(func=cmd_plan)

    show = jsub.add_parser("show", parents=[common], help="show a stored plan by its digest")
    show.add_argument("digest", metavar="PLAN_DIGEST", help="the full 64-hex digest printed by `job plan`")
    show.set_defaults(func=cmd_show)

    run = jsub.add_parser("run", parents=[common], help="run a plan by its digest (needs sudo)")
    run.add_argument("digest", metavar="PLAN_DIGEST", help="the full 64-hex digest printed by `job plan`")
    run.set_defaults(func=cmd_run)

    status = jsub.add_parser("status", parents=[common], help="how a run is going, or how it ended")
    status.add_argument("run", metavar="RUN_ID", help="the run's ID (printed by `job run` on a terminal)")
    status.set_defaults(func=cmd_status)


def _describe(result: dict[str, Any]) -> str:
    plan = result["plan"]
    lines = [f"job {plan['kind']}  digest {result['digest']}"]
    for name, tool in plan["tools"].items():
        lines.append(f"  tool    {name}: {tool['path']}  sha256 {tool['sha256'][:16]}…")
    for item in plan["inputs"]:
        lines.append(f"  input   {one_line(item['path'])}  sha256 {item['sha256']}  {item['size']} bytes")
    for binding in plan["credentials"]:
        lines.append(f"  key     {binding['slot']}: {binding['type']} {binding['asset'][:12]} ({one_line(binding['ref'])})")
    for number, step in enumerate(plan["steps"], 1):
        lines.append(f"  step {number}  {step['tool']} " + " ".join(one_line(str(w)) for w in step["argv"]))
    for output in plan["outputs"]:
        lines.append(f"  output  {one_line(output['path'])}")
    lines.append(f"  cleanup {plan['cleanup']['workspace']}")
    return "\n".join(lines)


def cmd_plan(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "op": "job_plan",
        "kind": args.kind,
        "input": os.path.abspath(args.input),
        "output": os.path.abspath(args.output),
        "recipients": args.recipient,
    }
    if args.key is not None:
        body["key"] = args.key
    if args.min_sdk is not None:
        body["min_sdk"] = args.min_sdk
    result = ctx.request(body)
    ctx.emit(result, _describe(result) + f"\nRun it with: memories job run {result['digest']}")
    return 0


def _plan_digest(text: str) -> str:
    """The whole digest, checked here so that a prefix gets a sentence, not the request schema."""
    digest = text.strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise MemoriesError(  # the code the engine gives a prefix too (kept stable)
            "invalid_request",
            "A plan digest is all 64 hex characters `memories job plan` printed; a prefix is not accepted, "
            "since the digest is what you approve.",
        )
    return digest


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "job_show", "digest": _plan_digest(args.digest)})
    ctx.emit(result, _describe(result))
    return 0


def _wait(ctx: Context, run_id: str) -> dict[str, Any]:
    """Follow a run until it ends, showing "step k of n" on a terminal (stderr; never with --json)."""
    shown = not ctx.json_output and sys.stderr.isatty()
    seen: int | None = None
    if shown:  # the ID lets another terminal ask `memories job status` after this one is closed
        sys.stderr.write(f"job run {run_id}\n")
    while True:
        body: dict[str, Any] = {"op": "job_status", "run": run_id}
        if seen is not None:
            body |= {"wait_ms": WAIT_MS, "seen_step": seen}
        status = ctx.request(body, timeout=WAIT_MS / 1000 + 30)
        if status["state"] != "running":
            if shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
            return status
        seen = int(status["steps_done"])
        if shown:
            step = min(seen + 1, int(status["steps"]))
            sys.stderr.write(f"\r\x1b[Krunning {status['kind']}: step {step} of {status['steps']}")
            sys.stderr.flush()


def cmd_run(ctx: Context, args: argparse.Namespace) -> int:
    started = ctx.request({"op": "job_run", "digest": _plan_digest(args.digest)}, timeout=600.0)
    try:
        ended = _wait(ctx, str(started["run"]))
    except KeyboardInterrupt:  # Ctrl-C stops the run too, as a lock would: nothing is published
        ctx.close()  # the interrupted request's answer may still be on the way: a new connection
        ctx.request({"op": "job_cancel", "run": started["run"]}, timeout=60)
        raise
    if ended["state"] != "done":
        raise error_from_wire(ended["error"]) if ended.get("error") else MemoriesError("job_cancelled")
    result = {"digest": ended["digest"], "kind": ended["kind"], "outputs": ended["outputs"]}
    ctx.emit(result, "\n".join(f"wrote {one_line(path)}" for path in result["outputs"]))
    return 0


def cmd_status(ctx: Context, args: argparse.Namespace) -> int:
    run = args.run.strip().lower()
    if len(run) != 32 or any(c not in "0123456789abcdef" for c in run):
        raise MemoriesError("invalid_request", "A run ID is the 32 hex characters `memories job run` printed.")
    status = ctx.request({"op": "job_status", "run": run})
    lines = [
        f"job {status['kind']}  run {status['run']}  {status['state']}  {status['steps_done']} of {status['steps']} steps done"
    ]
    lines += [f"  wrote {one_line(path)}" for path in status["outputs"]]
    if status.get("error"):
        lines.append(f"  error [{status['error']['code']}] {one_line(status['error']['message'])}")
    ctx.emit(status, "\n".join(lines))
    return 0
