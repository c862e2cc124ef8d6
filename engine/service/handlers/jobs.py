"""Crypto jobs (JB-1 … JB-3): ``job_plan`` pins and stores a plan; ``job_run`` runs it by digest.

A plan is stored as a sealed record (``{"t": "job_plan"}``) holding its canonical bytes, so
``job_run`` executes exactly the bytes ``job_plan`` showed. ``job_run`` needs elevation and the
local CLI, never MCP (no ``mcp_allowed``). Approval — elevation, the local caller, the full
digest of a stored plan — is checked before anything is resolved (JB-2); credentials are then
looked up by the full asset ID the plan pinned and must still be at the pinned revision. An
execution intent naming them is committed before any value leaves the store; the outcome is
audited afterwards. The runner (engine/jobs/runner.py) runs under the service lock.
"""

from __future__ import annotations

import hashlib
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.plan import Plan, plan_bytes, plan_digest, plan_from_bytes
from engine.jobs.recipes import CredentialInfo, build_plan, credential_files
from engine.jobs.runner import run_plan
from engine.service import requests_jobs as rq
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.service import Service
from engine.vault.core import Unlocked
from engine.vault.credentials import credential_summary, find_credential, read_credential

RECORD = "job_plan"


def _info(service: Service, state: Unlocked, ref: str) -> CredentialInfo:
    summary = credential_summary(service.vault, state, find_credential(service.vault, state, ref))
    return CredentialInfo(
        ref=ref,
        asset=str(summary["id"]),
        revision=str(summary["revision"]),
        ctype=str(summary["type"]),
        public=dict(summary["public"]),
    )


def _stored(state: Unlocked, digest: str) -> Plan:
    wanted = bytes.fromhex(digest)
    for _, record in state.extra_records.get(RECORD, []):
        if bytes(record.get("digest", b"")) == wanted:
            data = bytes(record["plan"])
            if hashlib.sha256(data).digest() != wanted:
                raise MemoriesError("store_corrupt", "A stored job plan does not match its digest.")
            return plan_from_bytes(data)
    raise MemoriesError("not_found", "No job plan has that digest; make one with `memories job plan`.")


def _view(plan: Plan, digest: str) -> dict[str, Any]:
    return {"digest": digest, "plan": plan}


@op(rq.JobPlan)
def job_plan(service: Service, request: rq.JobPlan, caller: Caller) -> dict[str, Any]:
    """JB-1: pin inputs (SHA-256), tools (absolute path + SHA-256), credentials (ID + revision), fresh outputs."""
    state = service.require_unlocked()
    key = _info(service, state, request.key) if request.key is not None else None
    recipients = [_info(service, state, ref) for ref in request.recipients]
    plan = build_plan(
        request.kind,
        input_path=request.input,
        output_path=request.output,
        key=key,
        recipients=recipients,
        min_sdk=request.min_sdk,
    )
    digest = plan_digest(plan)
    assets = [bytes.fromhex(str(b["asset"])) for b in plan["credentials"]]
    record = {"t": RECORD, "digest": bytes.fromhex(digest), "plan": plan_bytes(plan)}
    audit = service.vault.audit_record(state, "job.plan", caller, outcome="ok", kind=request.kind, assets=assets)
    service.vault.commit(state, [], [], [record, audit])
    return _view(plan, digest)


@op(rq.JobShow)
def job_show(service: Service, request: rq.JobShow, caller: Caller) -> dict[str, Any]:
    return _view(_stored(service.require_unlocked(), request.digest), request.digest)


@op(rq.JobRun, needs_elevation=True)
def job_run(service: Service, request: rq.JobRun, caller: Caller) -> dict[str, Any]:
    """JB-2, JB-3: approval first (elevation, local CLI, exact digest), then credentials, intent, runner."""
    if caller.surface != "ipc" or not caller.namespace.startswith("cli:"):
        raise MemoriesError("permission_denied", "Only the local CLI runs crypto jobs.")
    state = service.require_unlocked()
    plan = _stored(state, request.digest)
    files: dict[str, dict[str, bytes]] = {}
    secrets: list[str] = []
    assets: list[bytes] = []
    for binding in plan["credentials"]:
        asset = bytes.fromhex(str(binding["asset"]))
        if asset not in state.index.assets:
            raise MemoriesError("job_plan_stale")
        try:
            cred = read_credential(service.vault, state, asset.hex())
        except MemoriesError as exc:
            if exc.code == "not_found":
                raise MemoriesError("job_plan_stale") from None
            raise
        if cred.asset_id != asset or cred.revision.hex() != binding["revision"] or cred.ctype != binding["type"]:
            raise MemoriesError("job_plan_stale")
        files[str(binding["slot"])] = credential_files(cred.ctype, cred.public, cred.secret, list(binding["files"]))
        secrets += [v for v in cred.secret.values() if isinstance(v, str)]
        assets.append(asset)
    service.vault.commit_intent(state, "job_run", caller, assets)
    root = service.paths.home / "jobs"
    try:
        published = run_plan(plan, root, files, secrets)
    except MemoriesError as exc:
        failed = service.vault.audit_record(state, "job.run", caller, outcome="failed", code=exc.code, assets=assets)
        service.vault.commit(state, [], [], [failed])
        raise
    finally:
        del files, secrets
    audit = service.vault.audit_record(state, "job.run", caller, outcome="ok", kind=plan["kind"], assets=assets)
    service.vault.commit(state, [], [], [audit])
    return {"digest": request.digest, "kind": plan["kind"], "outputs": published}
