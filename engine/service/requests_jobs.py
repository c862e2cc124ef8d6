"""Requests of crypto jobs (JB-1 … JB-3): plan a job, run an approved plan by its digest, follow the run."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from engine.service.requests import Request

__all__ = ["JobCancel", "JobPlan", "JobRun", "JobShow", "JobStatus"]

Path = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
Ref = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
# The full digest: approval is a byte-exact match, never a prefix resolved later (JB-2).
Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class JobPlan(Request, tag="job_plan"):
    kind: Literal["smime-sign", "openpgp-sign", "openpgp-encrypt", "apk-sign", "ios-sign"]
    input: Path
    output: Path
    key: Ref | None = None
    recipients: Annotated[list[Ref], msgspec.Meta(max_length=16)] = []
    min_sdk: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None  # apk-sign: the APK's minimum Android API level


class JobRun(Request, tag="job_run"):
    digest: Digest


class JobShow(Request, tag="job_show"):
    digest: Digest


class JobStatus(Request, tag="job_status"):
    """A run's state (issue 16); with ``wait_ms`` and ``seen_step``, answered when it ends, its
    finished-step count differs from ``seen_step``, or after ``wait_ms``."""

    run: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
    wait_ms: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    seen_step: Annotated[int, msgspec.Meta(ge=0, le=10_000)] | None = None


class JobCancel(Request, tag="job_cancel"):
    """Stop a run as a lock would (its waiting CLI was interrupted); a run that ended stays as it ended."""

    run: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
