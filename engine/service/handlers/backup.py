"""Backup and restore ops (BK-1, BK-2): backup_create (sudo), backup_verify, restore, backup_progress.

The engine reads and writes the backup file itself (bounded memory, chunk by chunk); the
CLI passes an absolute path. A backup is written beside its target and published with
link(2), never overwriting; a restore builds the new store in a staging directory inside
the data home and publishes ``store.db`` with link(2) only after the whole file verified,
so a damaged file leaves no store behind; the unlock that follows is the published store's
check, and a store that fails it is removed again (SECURITY.md, "Backup and restore").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import msgspec

from engine.backup.archive import ArchiveIndex
from engine.backup.envelope import BackupReader
from engine.backup.restore import Restorer
from engine.backup.snapshot import write_backup
from engine.cards.links import add_record
from engine.cards.schema import CARD_KINDS
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import calibrate
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError
from engine.files import FILE_KIND
from engine.search.eligibility import INDEXED_KINDS
from engine.service import requests_backup as brq
from engine.service.caller import Caller
from engine.service.handlers.assets import (
    ARCHIVED_REVISIONS,
    HISTORY_EXTRAS,
    META_VALIDATORS,
    ORDINARY_KINDS,
    SECRET_BODY_KINDS,
    new_revision,
)
from engine.service.handlers.cards import link_index
from engine.service.handlers.vaults import vault_for
from engine.service.projections import BODY_REDACTORS, revision_ref, visible_body
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.store.database import StoreFile, create_store, is_disk_full
from engine.store.packs import packs_path
from engine.vault.core import Unlocked
from engine.vault.credentials import CREDENTIAL_KIND
from engine.vault.diff import text_projection
from engine.vault.index import AssetEntry
from engine.vault.revision import Revision, chunk_count, held

__all__ = ["archive_of"]

_STAGING_PREFIX = ".restore-"
# The kinds whose bodies the index build reads whole: a restore hands it those it opened (issue
# 32). Not a file (the index reads a sample of its first chunk, if any) nor a credential.
_HANDED_BODY_KINDS = INDEXED_KINDS - {FILE_KIND}
_BATCH_BYTES = 8 * 1024 * 1024

# What a running backup has done so far (revisions done, total), for `backup_progress`.
_progress: dict[str, int] = {}
_progress_lock = threading.Lock()


def _set_progress(done: int, total: int) -> None:
    with _progress_lock:
        _progress.update(done=done, total=total)


@op(brq.BackupProgress, lock_free=True, touches_idle=False)
def backup_progress(service: Service, request: brq.BackupProgress, caller: Caller) -> dict[str, Any]:
    with _progress_lock:
        return {"running": bool(_progress), "done": _progress.get("done", 0), "total": _progress.get("total", 0)}


def _open_file(path: str) -> IO[bytes]:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise MemoriesError("not_found", "No backup file at that path.") from None
    except IsADirectoryError:
        raise MemoriesError("invalid_input", "That path is a directory, not a backup file.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"The backup file could not be read ({exc.__class__.__name__}).") from None


@op(brq.BackupCreate, needs_elevation=True)
def backup_create(service: Service, request: brq.BackupCreate, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    store = service.require_store()
    target = Path(request.path)
    if target.exists():
        raise MemoriesError("io_error", f"{target.name} already exists; a backup never overwrites a file.")
    if not target.parent.is_dir():
        raise MemoriesError("not_found", "The folder for the backup file does not exist.")
    staging = target.with_name(f".{target.name}.part-{os.getpid()}-{os.urandom(4).hex()}")
    service.vault.commit_intent(state, "backup", caller, [])
    try:
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb", buffering=1024 * 1024) as out:
            _set_progress(0, 0)
            counts = write_backup(out, request.password, calibrate(), state, store.read_content, _set_progress)
            out.flush()
            os.fsync(out.fileno())
        os.link(staging, target)  # never overwrites
        _fsync_dir(target.parent)
    except FileExistsError:
        raise MemoriesError("io_error", f"{target.name} already exists; a backup never overwrites a file.") from None
    except OSError as exc:
        if is_disk_full(exc, target):
            raise MemoriesError("disk_full", "The disk is full; the backup was not written.") from None
        raise MemoriesError("io_error", f"The backup file could not be written ({exc.__class__.__name__}).") from None
    finally:
        with _progress_lock:
            _progress.clear()
        with contextlib.suppress(OSError):
            os.unlink(staging)
    return {"path": str(target), **counts}


@op(brq.BackupVerify, needs_unlock=False, lock_free=True)
def backup_verify(service: Service, request: brq.BackupVerify, caller: Caller) -> dict[str, Any]:
    """Read and authenticate every chunk, signature and content; write nothing."""
    with _open_file(request.path) as src:
        reader = BackupReader(src, request.password)
        restorer = Restorer(reader)
        restorer.run()
    manifest = reader.manifest or {}
    return {
        "ok": True,
        "created_ms": reader.created_ms,
        "bytes": reader.bytes_read,
        "vaults": restorer.counts["vaults"],
        "items": restorer.counts["assets"],
        "revisions": restorer.counts["revisions"],
        "links": restorer.counts["links"],
        "device": bytes(manifest.get("device", b"")).hex()[:16],
    }


def _remove_stale_staging(home: Path) -> None:
    """Leftovers of killed restores: only the engine holding the writer lock ever makes them."""
    for child in home.glob(_STAGING_PREFIX + "*"):
        shutil.rmtree(child, ignore_errors=True)


def _build(staging: Path, master: bytes, restorer: Restorer) -> None:
    """Fill the empty new store inside ``staging`` (sealed under ``master``) from the backup."""
    store = StoreFile.open(staging / "store.db")
    try:
        store.install_master(master)
        batch: list[tuple[int, bytes]] = []
        size = 0
        for row in restorer.content_rows():
            batch.append(row)
            size += len(row[1])
            if size >= _BATCH_BYTES:
                store.commit([], batch)
                batch, size = [], 0
        store.commit(list(restorer.records()), batch)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    fd = os.open(staging / "store.db", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@op(brq.Restore, needs_unlock=False, lock_free=True)
def restore(service: Service, request: brq.Restore, caller: Caller) -> dict[str, Any]:
    """A new device from a backup (BK-2): new keys and vault IDs, current heads re-signed, history archived."""
    with service.lock:
        target = service.paths.store
        if service.store is not None or target.exists():
            raise MemoriesError(
                "already_initialized", "This data directory already has a vault; restore into a new one with --home."
            )
        home = service.paths.home
        _remove_stale_staging(home)
        staging = home / f"{_STAGING_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        staging.mkdir(mode=0o700)
        try:
            with _open_file(request.path) as src:
                # Calibrated alone, as `init` does: a probe slowed by other work would pick a weaker KDF.
                kdf = calibrate()
                # The new store's Argon2id and the backup's are independent and libsodium runs
                # without the GIL, so on two cores they overlap instead of adding up (the largest
                # fixed cost of a restore beyond the verify it includes). The pool joins its thread
                # before any error propagates, so the staging cleanup below sees a finished store.
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-kdf") as pool:
                    empty_store = pool.submit(create_store, staging / "store.db", request.password, kdf, [])
                    restorer = Restorer(
                        BackupReader(src, request.backup_password),
                        build=True,
                        leave_shared=request.leave_shared,
                        body_kinds=_HANDED_BODY_KINDS,
                    )
                    master = empty_store.result()
                    _build(staging, master, restorer)
            # The chunks of large files went to pack files beside the staging store (issue 32):
            # their folder moves in first, so the store, once linked, never names a missing pack.
            # A folder already there belongs to no store (there is none: checked above, under the
            # writer lock), a leftover of an earlier attempt.
            _publish_packs(staging / "store.db", target)
            try:
                os.link(staging / "store.db", target)  # the one step that makes the home whole
            except FileExistsError:
                raise MemoriesError("already_initialized") from None
            _fsync_dir(home)
        except OSError as exc:
            if is_disk_full(exc, target):
                raise MemoriesError("disk_full", "The disk is full; nothing was restored.") from None
            raise MemoriesError("io_error", f"The restore could not write its store ({exc.__class__.__name__}).") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        # The new store opens like any store (every row, chain, policy) before the restore
        # answers: that decode is the unlock's own, done once (issue 32: a separate check of the
        # staging copy decoded the whole store a second time). The backup itself verified whole
        # before the store was published; should its store still not open (a fault of this
        # engine, not of the file), the store is taken back, so the home is left as it was.
        store = StoreFile.open(target)
        try:
            store.install_master(master)
            # The new heads as built and their bodies as opened: the unlock takes those objects
            # for the rows that hold exactly them, and the index build the bodies (issue 32).
            state = service.load_state(store, {rev.signed: rev for rev in restorer.new_heads}, restorer.opened_bodies)
        except MemoriesError:
            store.close()
            _unpublish(target)
            raise
        service.store = store
        service.state = state
        service.session.touch()
        counts = restorer.counts
        audit = service.vault.audit_record(state, "restore", caller, outcome="ok", vaults=counts["vaults"])
        service.vault.commit(state, [], [], [audit])
        return {
            "restored": True,
            "unlocked": True,
            "vaults": counts["vaults"],
            "items": counts["assets"],
            "heads": counts["heads"],
            "archived_revisions": counts["revisions"],
            "links": counts["links"],
            # Issue 29 (BK-2): vaults shared with other people before; their restored copies are
            # this device's alone, and the old membership is not claimed.
            "shared_vaults": restorer.shared,
            "user_fingerprint": fingerprint(state.identity.user_pub),
        }


def _publish_packs(built: Path, target: Path) -> None:
    """Move the built store's pack folder beside ``target`` (which has no store yet)."""
    moved, old = packs_path(built), packs_path(target)
    shutil.rmtree(old, ignore_errors=True)
    if moved.is_dir():
        os.rename(moved, old)
        _fsync_dir(old.parent)


def _unpublish(store: Path) -> None:
    for path in (store, store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    shutil.rmtree(packs_path(store), ignore_errors=True)
    _fsync_dir(store.parent)


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":  # pragma: no cover
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_archive: list[tuple[Unlocked, ArchiveIndex]] = []


def archive_of(state: Unlocked) -> ArchiveIndex:
    """The read-only archive of a restored store's original history (built on first use, dropped on lock)."""
    if not _archive or _archive[0][0] is not state:
        _archive[:] = [(state, ArchiveIndex(state))]
    return _archive[0][1]


def _archived_history(service: Service, state: Unlocked, entry: AssetEntry) -> list[dict[str, Any]]:
    archive = archive_of(state)
    rows = []
    for rev in archive.history(entry.asset_id):
        summary = archive.summary(rev)
        rows.append(
            {
                **revision_ref(rev),
                "parents": [p.hex() for p in rev.parents],
                "title": summary.get("title", ""),
                "tombstone": rev.tombstone,
                "created_ms": rev.created_ms,
                "author": fingerprint(rev.author)[:16],
                "head": False,
                "archived": True,
            }
        )
    return rows


def _archived_revision(service: Service, state: Unlocked, entry: AssetEntry, prefix: str) -> tuple[Revision, list[str]] | None:
    archive = archive_of(state)
    rev = archive.resolve(entry.asset_id, prefix)
    if rev is None:
        return None
    summary = archive.summary(rev)
    body = ""
    if not rev.tombstone and rev.kind not in SECRET_BODY_KINDS:
        body = archive.body(rev, service.vault.require_store().read_content)
        for redactor in BODY_REDACTORS:
            body = redactor(service.vault, state, rev.asset_id, body)
    return rev, text_projection({k: v for k, v in summary.items() if k in ("title", "tags", "meta")}, body, rev.tombstone)


HISTORY_EXTRAS.append(_archived_history)
ARCHIVED_REVISIONS.append(_archived_revision)


def _setup(service: Service) -> None:
    def on_lock() -> None:
        _archive.clear()

    service.on_lock.append(on_lock)


EXTENSIONS.append(_setup)


# -- export --format memories-json and its import (issue 15) -------------------------------------
# Every kind a memories-json file carries: ordinary memories, every card kind, and the
# credentials protected and login cards and secret maps point to (their bodies only with
# --include-secrets). Files and device-local kinds are not part of it.
JSON_KINDS = frozenset({*ORDINARY_KINDS, *CARD_KINDS, CREDENTIAL_KIND})


def _json_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary as JSON with bytes tagged the canonical way ({"$b": base64url})."""
    value: dict[str, Any] = json.loads(canonical_bytes(summary))
    return value


@op(brq.ExportJson, needs_elevation=True)
def export_memories_json(service: Service, request: brq.ExportJson, caller: Caller) -> dict[str, Any]:
    """Every current item of one vault with every head (conflicts stay conflicts), and its links."""
    state = service.require_unlocked()
    vault_id = vault_for(state, request.vault).vault_id
    entries = sorted(
        (e for e in state.index.visible() if e.kind in JSON_KINDS and e.vault_id == vault_id),
        key=lambda e: (e.kind != CREDENTIAL_KIND, state.index.revisions[e.revisions[0]].created_ms, e.asset_id),
    )
    page = entries[request.offset : request.offset + request.limit]
    items = []
    # The page's heads' signed bytes read back together, not once per summary and body (issue 32).
    with held([rev for entry in page for rev in state.index.head_revisions(entry)]):
        for entry in page:
            heads = []
            for rev in sorted(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.rev_id)):
                if rev.tombstone:
                    continue
                body: str | None
                if entry.kind == CREDENTIAL_KIND:
                    body = service.vault.body_of(state, rev) if request.include_secrets else None
                else:
                    body = visible_body(service, state, rev)
                heads.append({"summary": _json_summary(service.vault.summary_of(state, rev)), "body": body})
            items.append({"id": entry.asset_id.hex(), "kind": entry.kind, "heads": heads})
    links: list[dict[str, Any]] = []
    if request.offset == 0:
        for link in sorted(link_index(service).by_id.values(), key=lambda k: (k.created_ms, k.link_id)):
            if link.vault_id != vault_id:
                continue
            links.append(
                {
                    "src": link.src.hex(),
                    "dst": link.dst.hex(),
                    "rel": link.rel,
                    "confidence_ppm": link.confidence_ppm,
                    **({"valid_till_ms": link.valid_till_ms} if link.valid_till_ms is not None else {}),
                }
            )
    service.vault.commit_intent(state, "export", caller, [e.asset_id for e in page])
    return {"items": items, "links": links, "total": len(entries), "offset": request.offset}


def _refs(summary: dict[str, Any]) -> set[bytes]:
    """The credentials a card's summary names: its protected credential and its secret map."""
    found: set[bytes] = set()
    protected = summary.get("protected")
    if isinstance(protected, dict) and isinstance(protected.get("credential"), bytes):
        found.add(protected["credential"])
    secrets = summary.get("secrets")
    if isinstance(secrets, dict):
        found.update(v for v in secrets.values() if isinstance(v, bytes))
    return found


def _without_refs(summary: dict[str, Any], missing: set[bytes]) -> dict[str, Any]:
    out = dict(summary)
    protected = out.get("protected")
    if isinstance(protected, dict) and protected.get("credential") in missing:
        del out["protected"]
    secrets = out.get("secrets")
    if isinstance(secrets, dict):
        kept = {k: v for k, v in secrets.items() if v not in missing}
        if kept:
            out["secrets"] = kept
        else:
            del out["secrets"]
    return out


def _decode_item(item: brq.JsonItem) -> list[tuple[dict[str, Any], str | None]]:
    if item.kind not in JSON_KINDS:
        raise MemoriesError("invalid_input", f"Item {item.id[:12]}: {item.kind[:32]!r} is not a kind a memories-json file holds.")
    heads: list[tuple[dict[str, Any], str | None]] = []
    for head in item.heads:
        try:
            summary = decode_canonical(canonical_bytes(head.summary))
        except (ValueError, TypeError, msgspec.MsgspecError):
            raise MemoriesError("invalid_input", f"Item {item.id[:12]}: a summary is not valid.") from None
        if not isinstance(summary, dict) or not isinstance(summary.get("title"), str) or not summary["title"]:
            raise MemoriesError("invalid_input", f"Item {item.id[:12]}: every version needs a title.")
        meta = summary.get("meta", {})
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise MemoriesError("invalid_input", f"Item {item.id[:12]}: meta holds text values only.")
        validator = META_VALIDATORS.get(item.kind)
        if validator is not None:
            summary["meta"] = validator(item.kind, dict(meta))
        heads.append((summary, head.body))
    return heads


@op(brq.ImportJson)
def import_memories_json(service: Service, request: brq.ImportJson, caller: Caller) -> dict[str, Any]:
    """Create the batch's items with their own IDs (checked first, then ONE commit); existing IDs are skipped."""
    state = service.require_unlocked()
    store = service.require_store()
    vault = vault_for(state, request.vault)
    service.vault.writable_vault(state, b"", vault)
    decoded = [(item, _decode_item(item)) for item in request.items]  # every check before any write
    batch_ids = {bytes.fromhex(item.id) for item, _ in decoded}
    revisions: list[Revision] = []
    rows: list[tuple[int, bytes]] = []
    created, skipped, without_secret = 0, 0, 0
    next_seq = store.reserve_content(1)[0]
    available = {a for a, e in state.index.assets.items() if e.kind == CREDENTIAL_KIND and e.vault_id == vault.vault_id}
    for item, heads in decoded:
        asset_id = bytes.fromhex(item.id)
        if state.index.holds(asset_id):  # also an item hidden by quarantine: reviewed there, not re-imported
            skipped += 1
            continue
        if item.kind == CREDENTIAL_KIND and any(body is None for _, body in heads):
            without_secret += 1  # exported without --include-secrets: nothing to restore
            continue
        if item.kind == CREDENTIAL_KIND:
            available.add(asset_id)
        for summary, body in heads:
            missing = {r for r in _refs(summary) if r not in available and r not in batch_ids}
            text = body or ""
            need = chunk_count(len(text.encode("utf-8")))
            rev, rev_rows = new_revision(
                service,
                state,
                asset_id=asset_id,
                kind=item.kind,
                parents=[],
                summary=_without_refs(summary, missing) if missing else summary,
                body=text,
                reserved=list(range(next_seq, next_seq + need)),
                vault=vault,
            )
            next_seq += need
            revisions.append(rev)
            rows.extend(rev_rows)
        created += 1
    present = set(state.index.assets) | batch_ids
    index = link_index(service)
    records: list[dict[str, Any]] = []
    links_added = 0
    for link in request.links:
        src, dst = bytes.fromhex(link.src), bytes.fromhex(link.dst)
        if src not in present or dst not in present or index.between(src, dst, link.rel):
            continue
        records.append(
            add_record(
                vault_id=vault.vault_id,
                src=src,
                dst=dst,
                rel=link.rel,
                confidence_ppm=link.confidence_ppm,
                valid_till_ms=link.valid_till_ms,
            )
        )
        links_added += 1
    if revisions or records:
        audit = service.vault.audit_record(
            state, "import", caller, outcome="ok", assets=sorted({r.asset_id for r in revisions}), links=links_added
        )
        service.vault.commit(state, revisions, rows, [*records, audit])
    return {"created": created, "skipped": skipped, "without_secret": without_secret, "links": links_added}
