"""Crypto jobs (JB-1 … JB-3): ``job_plan`` pins and stores a plan; ``job_run`` runs it by digest.

A plan is stored as a sealed record (``{"t": "job_plan"}``) holding its canonical bytes, so
``job_run`` executes exactly the bytes ``job_plan`` showed. ``job_run`` needs elevation and the
local CLI, never MCP (no ``mcp_allowed``). Approval — elevation, the local caller, the full
digest of a stored plan — is checked before anything is resolved (JB-2); credentials are then
looked up by the full asset ID the plan pinned and must still be at the pinned revision. An
execution intent naming them is committed before any value leaves the store; the outcome is
audited afterwards.

Only the checks and the workspace's preparation hold the service lock (issue 16): the steps
run as a background job (engine/jobs/background.py) while other requests are answered, and
``job_run`` answers with a run ID that ``job_status`` reports on (the CLI waits on it). The
outputs are linked into place, and the outcome audited, under the lock again and only if no
lock happened meanwhile; a lock cancels the run — its child's process group is killed, its
workspace removed — and waits for that, so a locked (or stopped) engine leaves no secret
behind. A lock's cancel leaves the committed intent as the run's record (a locked vault
takes no audit entry).
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from typing import Any

from engine.errors import MemoriesError
from engine.jobs.background import JobContext
from engine.jobs.plan import Plan, plan_bytes, plan_digest, plan_from_bytes
from engine.jobs.recipes import CredentialInfo, build_plan, credential_files
from engine.jobs.runner import POLL_SECONDS, Staged, Workspace, clear_stale, prepare
from engine.jobs.runs import Run, Runs
from engine.service import requests_jobs as rq
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.vault.core import Unlocked
from engine.vault.credentials import credential_summary, find_credential, read_credential

log = logging.getLogger("memories.jobs")

RECORD = "job_plan"
# How long a lock (or shutdown) waits for a cancelled run to kill its child, run its cleanup
# steps (bounded by the runner) and remove its workspace.
LOCK_WAIT_SECONDS = 30.0
# The longest a `job_status` request waits for a change before answering.
MAX_WAIT_MS = 10_000

_RUNS: weakref.WeakKeyDictionary[Service, Runs] = weakref.WeakKeyDictionary()


def runs_of(service: Service) -> Runs:
    found = _RUNS.get(service)
    if found is None:
        found = _RUNS[service] = Runs()
    return found


def _setup(service: Service) -> None:
    """One run registry per engine; a lock (idle, explicit, shutdown) waits for cancelled runs."""
    runs = runs_of(service)
    # Runs never outlive their engine: anything under jobs/ now is a crashed engine's workspace.
    clear_stale(service.paths.home / "jobs")
    service.on_lock.append(lambda: runs.wait_ended(LOCK_WAIT_SECONDS))
    # A CLI asking after a lock still learns how its run ended: the ended runs outlive the
    # engine's re-execution at lock (engine/daemon.py, ST-12).
    service.carried["job_runs"] = (runs.save, runs.restore)


EXTENSIONS.append(_setup)


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


def _local_cli(caller: Caller) -> None:
    if caller.surface != "ipc" or not caller.namespace.startswith("cli:"):
        raise MemoriesError("permission_denied", "Only the local CLI runs crypto jobs.")


@op(rq.JobRun, needs_elevation=True)
def job_run(service: Service, request: rq.JobRun, caller: Caller) -> dict[str, Any]:
    """JB-2, JB-3: approval first (elevation, local CLI, exact digest), then credentials, intent,
    the prepared workspace; the steps then run in the background (issue 16)."""
    _local_cli(caller)
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
    run = runs_of(service).new(request.digest, str(plan["kind"]), len(plan["steps"]))
    try:
        service.vault.commit_intent(state, "job_run", caller, assets)
        try:
            workspace = prepare(plan, service.paths.home / "jobs", files)
        except MemoriesError as exc:
            failed = service.vault.audit_record(state, "job.run", caller, outcome="failed", code=exc.code, assets=assets)
            service.vault.commit(state, [], [], [failed])
            raise
        finally:
            del files
        outcome = _Outcome(caller, assets, service.session.generation)

        def work(context: JobContext) -> None:
            _execute(service, run, workspace, secrets, outcome, context)

        try:
            run.handle = service.background.start("job-run", work)
        except BaseException:
            workspace.remove()
            raise
    except MemoriesError as exc:
        run.finish("failed", error=exc)
        raise
    except BaseException:
        run.finish("failed", error=MemoriesError("internal"))
        raise
    return {"run": run.run_id, "digest": request.digest, "kind": plan["kind"], "steps": run.steps}


class _Outcome:
    """What the background half needs to audit a run as its caller: who, which credentials, which unlock."""

    def __init__(self, caller: Caller, assets: list[bytes], generation: int) -> None:
        self.caller = caller
        self.assets = assets
        self.generation = generation


def _current_lock(service: Service, context: JobContext, generation: int) -> bool:
    """Take the service lock unless the run is cancelled meanwhile (a lock waiting for this run
    holds it: never wait on it blindly); True, holding it, only if the same unlock still stands."""
    while not service.lock.acquire(timeout=POLL_SECONDS):
        if context.cancelled.is_set():
            return False
    if context.cancelled.is_set() or service.session.generation != generation or service.state is None:
        service.lock.release()
        return False
    return True


def _execute(
    service: Service, run: Run, workspace: Workspace, secrets: list[str], outcome: _Outcome, context: JobContext
) -> None:
    """The background half: steps without the service lock, then publish and audit under it."""
    staged: Staged | None = None
    audited = False
    try:
        try:
            staged = workspace.execute(secrets, context.cancelled, lambda done, total: run.progress(context, done, total))
        finally:
            workspace.remove()  # every secret the run was given, on every path
            secrets.clear()
        if not _current_lock(service, context, outcome.generation):
            raise MemoriesError("job_cancelled")
        try:
            state = service.require_unlocked()
            try:
                published = staged.publish()
            except MemoriesError as exc:
                audited = True
                _audit_failure(service, outcome, exc)
                raise
            audited = True
            audit = service.vault.audit_record(
                state, "job.run", outcome.caller, outcome="ok", kind=run.kind, assets=outcome.assets
            )
            service.vault.commit(state, [], [], [audit])
        finally:
            service.lock.release()
    except MemoriesError as exc:
        if staged is not None:
            staged.discard()
        if exc.code == "job_cancelled" or (context.cancelled.is_set() and not audited):
            run.finish("cancelled", error=MemoriesError("job_cancelled"))
            return  # the background runtime records it as cancelled
        if not audited and _current_lock(service, context, outcome.generation):
            try:
                _audit_failure(service, outcome, exc)
            finally:
                service.lock.release()
        run.finish("failed", error=exc)
        raise
    except BaseException:
        if staged is not None:
            staged.discard()
        run.finish("failed", error=MemoriesError("internal"))
        raise
    run.finish("done", outputs=published)


def _audit_failure(service: Service, outcome: _Outcome, exc: MemoriesError) -> None:
    state = service.require_unlocked()
    failed = service.vault.audit_record(state, "job.run", outcome.caller, outcome="failed", code=exc.code, assets=outcome.assets)
    try:
        service.vault.commit(state, [], [], [failed])
    except MemoriesError as audit_error:  # the run's own error is what the caller needs to hear
        log.warning("job run failure not audited error=%s", audit_error.code)


@op(rq.JobStatus, needs_unlock=False, lock_free=True, touches_idle=False)
def job_status(service: Service, request: rq.JobStatus, caller: Caller) -> dict[str, Any]:
    """Issue 16: a run's state and step, then its outputs or its typed error. Answers without the
    service lock (and while locked: a run a lock cancelled says so); waits up to ``wait_ms`` for
    a change. Polling it does not keep the vault unlocked."""
    _local_cli(caller)
    run = runs_of(service).get(request.run)
    if request.wait_ms and request.seen_step is not None:
        run.wait_change(request.seen_step, min(request.wait_ms, MAX_WAIT_MS) / 1000)
    return run.view()


@op(rq.JobCancel, needs_unlock=False, lock_free=True, touches_idle=False)
def job_cancel(service: Service, request: rq.JobCancel, caller: Caller) -> dict[str, Any]:
    """Ctrl-C of a waiting `job run`: the run stops like at a lock (child killed, workspace removed,
    nothing published); answers once that is done (bounded), with the run's state."""
    _local_cli(caller)
    run = runs_of(service).get(request.run)
    if run.handle is not None:
        run.handle.cancel()
        run.handle.wait(LOCK_WAIT_SECONDS)
    return run.view()
