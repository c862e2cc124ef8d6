"""job plan|show|run: crypto jobs run by the engine from a plan the user saw (JB-1 … JB-3)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from engine.cli.context import Context
from engine.terminal_text import one_line

__all__ = ["register"]

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


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "job_show", "digest": args.digest.lower()})
    ctx.emit(result, _describe(result))
    return 0


def cmd_run(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "job_run", "digest": args.digest.lower()}, timeout=600.0)
    ctx.emit(result, "\n".join(f"wrote {one_line(path)}" for path in result["outputs"]))
    return 0
