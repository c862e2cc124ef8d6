"""Cloud accounts, outbox and inbox as sealed, device-local state records (CL-2, CL-3).

Every record is a sealed extra record of this device's store (``{"t": kind, ...}``); none is
ever part of a sync bundle, a backup (engine/backup keeps an allowlist) or an IPC answer:
:meth:`Account.view` is the only shape that leaves the engine, and it has no secret.

* ``cloud_account`` — name, provider kind, endpoint, bucket, prefix, region, and ``secret``
  (the provider's keys or tokens); ``cloud_account_removed`` ends one; ``cloud_tokens`` replaces an OAuth account's secret
  after a refresh (latest wins).
* ``cloud_out`` — one enqueued bundle for one receiving device: the exact sealed object bytes,
  their descriptor and what they carry, written before any transport I/O (CL-3).
  ``cloud_sent`` acknowledges its upload.
* ``cloud_in`` — the first sequence number of a sender that is not taken yet and why (CL-5):
  ``missing`` (its descriptor is good, objects are not all there), ``refused`` (what is at
  the slot, or the bundle, was refused: the SHA-256 of those bytes and the error code are
  kept), ``absent`` (nothing at the slot though something later is), or ``clear`` (no longer
  a gap), with attempts and the next try (exponential back-off, persisted) and since when.
  ``cloud_done`` with outcome ``merged`` takes a sequence number, plus what the sender then
  holds. Nothing else closes one: a refused or missing slot is looked at again on every
  later sync (older engines wrote ``rejected`` outcomes; those are looked at again too).

Records are append-only: the latest record for a key wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from engine.cloud.objects import Covers
from engine.errors import MemoriesError

__all__ = [
    "ACCOUNT",
    "REMOVED",
    "OUT",
    "SENT",
    "SEEN",
    "DONE",
    "TOKENS",
    "Account",
    "Records",
    "accounts",
    "find_account",
    "outbox",
    "next_seq",
    "holds",
    "inbox",
    "floors",
    "sent_seqs",
    "sent_out",
    "GAP_WHY",
    "backoff_ms",
    "PROVIDER_KINDS",
]

ACCOUNT = "cloud_account"
REMOVED = "cloud_account_removed"
OUT = "cloud_out"
SENT = "cloud_sent"
SEEN = "cloud_in"
DONE = "cloud_done"
TOKENS = "cloud_tokens"  # an OAuth account's refreshed tokens (OneDrive, Drive): latest wins
PROVIDER_KINDS = ("s3", "onedrive", "gdrive")
Records = dict[str, list[tuple[int, dict[str, Any]]]]

_BACKOFF_MAX_MS = 3600 * 1000


@dataclass(frozen=True)
class Account:
    account_id: bytes
    name: str
    kind: str
    endpoint: str
    bucket: str
    prefix: str
    region: str
    secret: dict[str, str]
    created_ms: int

    def view(self) -> dict[str, Any]:
        """Account metadata only (CL-2): never the secret, not even its length."""
        return {
            "name": self.name,
            "kind": self.kind,
            "endpoint": self.endpoint,
            "bucket": self.bucket,
            "prefix": self.prefix,
            "region": self.region,
            "created_ms": self.created_ms,
        }


def new_account_record(
    name: str, kind: str, endpoint: str, bucket: str, prefix: str, region: str, secret: dict[str, str], now_ms: int
) -> dict[str, Any]:
    return {
        "t": ACCOUNT,
        "id": os.urandom(8),
        "name": name,
        "kind": kind,
        "endpoint": endpoint,
        "bucket": bucket,
        "prefix": prefix,
        "region": region,
        "secret": dict(secret),
        "created_ms": now_ms,
    }


def accounts(records: Records) -> list[Account]:
    removed = {bytes(r["id"]) for _, r in records.get(REMOVED, [])}
    refreshed = {bytes(r["id"]): dict(r["secret"]) for _, r in records.get(TOKENS, [])}
    out = []
    for _, r in records.get(ACCOUNT, []):
        if bytes(r["id"]) in removed:
            continue
        out.append(
            Account(
                bytes(r["id"]),
                str(r["name"]),
                str(r["kind"]),
                str(r["endpoint"]),
                str(r["bucket"]),
                str(r["prefix"]),
                str(r["region"]),
                {str(k): str(v) for k, v in refreshed.get(bytes(r["id"]), dict(r["secret"])).items()},
                int(r["created_ms"]),
            )
        )
    return out


def find_account(records: Records, name: str | None) -> Account:
    live = accounts(records)
    if name is None:
        if len(live) == 1:
            return live[0]
        if not live:
            raise MemoriesError("not_found", "No cloud account: add one with `memories cloud add s3 …`.")
        raise MemoriesError("invalid_input", "More than one cloud account: name the one to sync.")
    for account in live:
        if account.name == name:
            return account
    raise MemoriesError("not_found", "No cloud account has that name (see `memories cloud accounts`).")


def outbox(records: Records, account: bytes) -> list[dict[str, Any]]:
    """Enqueued bundles of ``account`` whose upload is not acknowledged, oldest first."""
    sent = {bytes(r["out"]) for _, r in records.get(SENT, []) if bytes(r["account"]) == account}
    return [r for _, r in records.get(OUT, []) if bytes(r["account"]) == account and bytes(r["id"]) not in sent]


def next_seq(records: Records, account: bytes, to: bytes) -> int:
    seqs = [int(r["seq"]) for _, r in records.get(OUT, []) if bytes(r["account"]) == account and bytes(r["to"]) == to]
    return max(seqs, default=0) + 1


def holds(records: Records, account: bytes, vault: bytes, device: bytes) -> Covers:
    """What ``device`` holds of ``vault`` as far as this account's traffic shows: what we
    enqueued for it and what it sent us (so nothing is echoed back)."""
    heads: list[bytes] = []
    revs: set[bytes] = set()
    audits: set[bytes] = set()

    def add(covers: dict[str, Any]) -> None:
        nonlocal heads
        got = Covers.from_wire(covers)
        if len(got.heads) > len(heads):
            heads = got.heads
        revs.update(got.revs)
        audits.update(got.audits)

    for _, r in records.get(OUT, []):
        if bytes(r["account"]) == account and bytes(r["to"]) == device and bytes(r["vault"]) == vault:
            add(r["covers"])
    for _, r in records.get(DONE, []):
        if bytes(r["account"]) == account and bytes(r["from"]) == device and r.get("vault") == vault and r.get("covers"):
            add(r["covers"])
    return Covers(heads, sorted(revs), sorted(audits))


def floors(records: Records, account: bytes) -> dict[bytes, int]:
    """Per sender: the highest sequence number taken (merged). Bundles merge in sequence order,
    so every one below it is taken too (older engines skipped refused ones: those stay behind)."""
    out: dict[bytes, int] = {}
    for _, r in records.get(DONE, []):
        if bytes(r["account"]) == account and r.get("outcome") == "merged":
            sender = bytes(r["from"])
            out[sender] = max(out.get(sender, 0), int(r["seq"]))
    return out


GAP_WHY = ("missing", "refused", "absent")


def inbox(records: Records, account: bytes) -> dict[tuple[bytes, int], dict[str, Any]]:
    """Open slots: (sender, seq) -> latest ``cloud_in`` record, for sequence numbers not taken
    and not cleared. Records of older engines have no ``why``: their objects were missing."""
    floor = floors(records, account)
    latest: dict[tuple[bytes, int], dict[str, Any]] = {}
    for _, r in records.get(SEEN, []):
        if bytes(r["account"]) == account:
            latest[(bytes(r["from"]), int(r["seq"]))] = r
    return {key: r for key, r in latest.items() if key[1] > floor.get(key[0], 0) and r.get("why", "missing") in GAP_WHY}


def sent_seqs(records: Records, account: bytes) -> dict[bytes, int]:
    """Per receiving device: the highest sequence number whose upload is acknowledged."""
    sent = {bytes(r["out"]) for _, r in records.get(SENT, []) if bytes(r["account"]) == account}
    out: dict[bytes, int] = {}
    for _, r in records.get(OUT, []):
        if bytes(r["account"]) == account and bytes(r["id"]) in sent:
            to = bytes(r["to"])
            out[to] = max(out.get(to, 0), int(r["seq"]))
    return out


def sent_out(records: Records, account: bytes) -> dict[tuple[bytes, int], dict[str, Any]]:
    """Every enqueued bundle of ``account``: (receiving device, seq) -> its ``cloud_out`` record
    (kept to upload again what a receiver reports it has not taken, CL-5)."""
    return {(bytes(r["to"]), int(r["seq"])): r for _, r in records.get(OUT, []) if bytes(r["account"]) == account}


def backoff_ms(attempts: int) -> int:
    """Delay before try ``attempts + 1``: base · 2^(attempts-1), at most an hour."""
    base = int(os.environ.get("MEMORIES_CLOUD_BACKOFF_MS", "2000"))
    return int(min(_BACKOFF_MAX_MS, max(1, base) * 2 ** max(0, attempts - 1)))
