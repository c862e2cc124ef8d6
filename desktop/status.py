"""What the tray and the dashboard show, derived from the latest probe (SPEC DT-4).

Shared by ``desktop/tray`` and ``desktop/dashboard``: the dashboard never imports the tray.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from desktop.prober import Probe
from engine.terminal_text import one_line

__all__ = [
    "TrayState",
    "tray_state",
    "tooltip_text",
    "activity_text",
    "TOOLTIP_CHARS",
    "attention_text",
    "Badges",
    "sync_problem",
    "delivery_text",
]

# Windows cuts notification-area tooltips at 127 characters; stay inside everywhere.
TOOLTIP_CHARS = 120


class TrayState(StrEnum):
    NOT_RUNNING = "not_running"
    NOT_RESPONDING = "not_responding"
    LOCKED = "locked"
    UNLOCKED = "unlocked"
    BUSY = "busy"
    ATTENTION = "attention"

    @property
    def tooltip(self) -> str:
        return _TITLES[self]


_TITLES = {
    TrayState.NOT_RUNNING: "Memories: engine not running",
    TrayState.NOT_RESPONDING: "Memories: engine not responding",
    TrayState.LOCKED: "Memories: locked",
    TrayState.UNLOCKED: "Memories: unlocked",
    TrayState.BUSY: "Memories: syncing / busy",
    TrayState.ATTENTION: "Memories: needs attention",
}


def tray_state(probe: Probe) -> TrayState:
    """Attention wins over busy: a pending ticket or an error needs the user, busy does not."""
    if probe.state in ("not_running", "starting"):
        return TrayState.NOT_RUNNING
    if probe.state == "not_responding":
        return TrayState.NOT_RESPONDING
    if probe.state == "error":
        return TrayState.ATTENTION
    if probe.state in ("locked", "uninitialized"):
        return TrayState.LOCKED
    status = probe.status
    if status.get("attention"):
        return TrayState.ATTENTION
    # Busy is work under way: an op holding the engine, or received changes being merged. An
    # outbox waiting for a peer is not (a laptop away from its desktop would look busy for days);
    # the dashboard shows that count instead.
    queue = status.get("sync_queue")
    merging = isinstance(queue, dict) and isinstance(queue.get("inbox"), int) and queue["inbox"] > 0
    if status.get("busy") or merging:
        return TrayState.BUSY
    return TrayState.UNLOCKED


@dataclass(frozen=True)
class Badges:
    """What the icon adds to its state (issue 17): tickets waiting for approval, a failed sync."""

    tickets: int = 0
    sync_problem: bool = False

    def describe(self) -> str:
        parts = []
        if self.tickets:
            parts.append(f"{self.tickets} ticket{'s' if self.tickets != 1 else ''} waiting")
        if self.sync_problem:
            parts.append("last sync failed")
        return ", ".join(parts)


def sync_problem(sync_status: dict[str, Any]) -> bool:
    """The engine's `sync_status`: True when its most recent sync session ended in an error
    (ours or the peer's) or left a vault unmerged; a later successful session clears it."""
    recent = sync_status.get("recent")
    if not isinstance(recent, list) or not recent or not isinstance(recent[-1], dict):
        return False
    last = recent[-1]
    if last.get("error") or last.get("peer_error"):
        return True
    # A session that ran but left a vault unmerged on either side (each vault merges on its own).
    reports = [*(last.get("vaults") or []), *(last.get("peer_vaults") or [])]
    return any(isinstance(r, dict) and r.get("error") for r in reports)


# What a running background job is called in the tray (the prober passes only these names).
_JOB_TEXT = {
    "search-build": "Indexing",
    "search-catch-up": "Indexing new items",
    "verify": "Checking signatures",
    "segmenter-warm": "Preparing search",
    "sync": "Syncing",
    "cloud-sync": "Syncing with the cloud",
    "job-run": "Running an approved job",
    "memory-cycle": "Distilling new conversation turns",  # AG-9: the cycle after a transcript import
}
# Jobs whose counts are items a person would count; the others report steps, said as "…".
_COUNTED_JOBS = frozenset({"search-build", "search-catch-up"})


def activity_text(probe: Probe) -> str:
    """The first running job as a person reads it: "Indexing 3,000 of 10,000…" (issue 17).

    Empty while locked or idle: the prober keeps ``activity`` only for an unlocked engine.
    """
    jobs = probe.status.get("activity") if probe.state == "unlocked" else None
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        return ""
    job = jobs[0]
    name = str(job.get("job"))
    label = _JOB_TEXT.get(name)
    if label is None:
        return ""
    done, total = job.get("done"), job.get("total")
    if name in _COUNTED_JOBS and isinstance(total, int) and total > 0 and isinstance(done, int):
        return f"{label} {done:,} of {total:,}…"
    return f"{label}…"


def delivery_text(probe: Probe) -> str:
    """The cloud delivery attention item (CL-5) as a person reads it, from the two counts of the
    status projection: "cloud: 1 device's writes not arriving"; empty when there is none."""
    delivery = probe.status.get("cloud_delivery") if probe.state == "unlocked" else None
    if not isinstance(delivery, dict):
        return ""
    parts = []
    arriving, taken = delivery.get("not_arriving"), delivery.get("not_taken")
    if _positive(arriving):
        parts.append("1 device's writes not arriving" if arriving == 1 else f"{arriving} devices' writes not arriving")
    if _positive(taken):
        parts.append("1 device has not taken ours" if taken == 1 else f"{taken} devices have not taken ours")
    return "cloud: " + ", ".join(parts) if parts else ""


def attention_text(probe: Probe) -> str:
    """Why the engine needs attention (DT-7), from the status's fixed reason codes: "1 item in
    conflict"; cloud delivery and tickets are said by their own texts. Empty when none."""
    reasons = probe.status.get("attention_reasons") if probe.state == "unlocked" else None
    if not isinstance(reasons, list):
        return ""
    parts = []
    if "conflicts" in reasons:
        count = probe.status.get("conflicts")
        n = count if _positive(count) else 0
        parts.append("1 item in conflict" if n == 1 else f"{n:,} items in conflict")
    if "quarantine" in reasons:
        parts.append("revisions held back by a sync")
    if "forks" in reasons:
        parts.append("vault members changed on two devices")
    return ", ".join(parts)


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def tooltip_text(state: TrayState, probe: Probe | None = None, badges: Badges | None = None) -> str:
    """The icon's tooltip: the state's title, plus the error code when a probe failed.

    Everything that came from outside (the probe's error code) goes through the same
    escaper as the CLI's text output, so the desktop shell never receives control
    characters or a second line, whatever a (foreign or future) engine reported.
    """
    text = state.tooltip
    if probe is not None and probe.error and state in (TrayState.ATTENTION, TrayState.NOT_RESPONDING):
        text += f" ({probe.error})"
    if probe is not None and activity_text(probe):
        text += f"; {activity_text(probe)}"
    if probe is not None and attention_text(probe):
        text += f"; {attention_text(probe)}"
    if probe is not None and delivery_text(probe):
        text += f"; {delivery_text(probe)}"
    if badges is not None and badges.describe():
        text += f"; {badges.describe()}"
    text = one_line(text)
    return text if len(text) <= TOOLTIP_CHARS else text[: TOOLTIP_CHARS - 1] + "…"
