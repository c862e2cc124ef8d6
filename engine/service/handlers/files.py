"""File assets (HI-1 kind "file", FI-1): chunked upload and download over IPC.

An upload is ``file_begin`` → ``file_chunk`` × N (≤ 8 chunks of 256 KiB each as base64, or
≤ 32 as the frame's binary part), or ``file_pull`` × N when the engine reads the file the
client opened (engine/files/source.py) → ``file_commit``: every chunk is sealed and
written as it arrives, and the commit signs one revision over the chunk digests (the same
DAG as every other kind), with its audit entry, in one transaction. A download is ``file_open`` (an authorized read: the intent is
committed first) → ``file_read`` by chunk index → ``file_close``; it is pinned to one
revision, so later writes do not change what it delivers. Both kinds of handle belong to
the caller that opened them and die with a lock. Engine memory per transfer is a few
chunks, whatever the file size.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.crypto.chunks import CHUNK_BYTES
from engine.errors import MemoriesError
from engine.files import (
    FILE_KIND,
    MAX_FILE_BYTES,
    FileUpload,
    file_info,
    is_searchable,
    open_file_chunk,
    open_file_chunks,
    text_of_sample,
    uses_pack,
)
from engine.files.source import open_client_file
from engine.files.space import check_room_for_upload
from engine.service import requests_files as rq
from engine.service.caller import Caller
from engine.service.handlers.assets import SECRET_BODY_KINDS, make_summary, visible_entry, write_one
from engine.service.handlers.vaults import vault_for
from engine.service.projections import asset_summary, revision_ref
from engine.service.registry import op
from engine.service.service import EXTENSIONS, Service
from engine.vault.core import Unlocked
from engine.vault.revision import Revision, build_streamed_revision

# A file body is never returned, diffed or exported by a generic op (it may be GiBs of
# binary): `get` shows its metadata, `diff` its title and tags; `file get` streams it.
SECRET_BODY_KINDS.add(FILE_KIND)

log = logging.getLogger("memories.files")

MAX_OPEN = 16  # transfers open at once per engine
# Orphaned content rows (an upload cut short by a crash) removed per unlock: 256 MiB of
# chunks at most, so an unlock stays quick; any rest goes at the next unlock.
SWEEP_ROWS = 1024
IDLE_SECONDS = 600.0  # a transfer untouched this long is dropped (its chunks removed)


@dataclass
class _Upload:
    upload: FileUpload
    owner: str
    title: str
    tags: list[str]
    name: str
    searchable: bool = False
    touched: float = field(default_factory=time.monotonic)


# Reads ahead for downloads: while an answer travels to the client and is written to disk,
# the next batch is read, checked and decrypted here (SQLite, hashlib and libsodium release
# the GIL). One batch ahead per open read, so memory stays bounded.
_READ_AHEAD = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memories-file-read")


@dataclass
class _Read:
    rev: Revision
    owner: str
    touched: float = field(default_factory=time.monotonic)
    # The next batch, being decrypted: its (start, end) and its result.
    ahead: tuple[int, int, Future[tuple[list[int], bytearray]]] | None = None

    def take_ahead(self, start: int, end: int) -> tuple[list[int], bytearray] | None:
        """The batch read ahead if it is ``start`` … ``end - 1``; else None (it is dropped)."""
        ahead, self.ahead = self.ahead, None
        if ahead is None or ahead[:2] != (start, end):
            self._settle(ahead)
            return None
        return ahead[2].result()

    def stop(self) -> None:
        """Wait for (or cancel) the read ahead: no plaintext is made after a lock returns."""
        ahead, self.ahead = self.ahead, None
        self._settle(ahead)

    @staticmethod
    def _settle(ahead: tuple[int, int, Future[tuple[list[int], bytearray]]] | None) -> None:
        if ahead is not None and not ahead[2].cancel():
            ahead[2].exception()  # wait; its error belongs to a batch nobody asked for


class Transfers:
    def __init__(self) -> None:
        self.uploads: dict[str, _Upload] = {}
        self.reads: dict[str, _Read] = {}
        # Ended uploads whose chunks the store refused to delete (a full disk): retried
        # when a transfer starts and at a lock; the unlock sweep is the last resort.
        self.leftovers: list[FileUpload] = []
        self.lock = threading.Lock()

    def discard(self, upload: FileUpload) -> None:
        if not upload.discard():
            log.warning("an ended upload's chunks could not be removed yet; retrying later")
            self.leftovers.append(upload)

    def retry_leftovers(self) -> None:
        leftovers, self.leftovers = self.leftovers, []
        for upload in leftovers:
            self.discard(upload)

    def drop_all(self) -> None:
        with self.lock:
            uploads, reads = list(self.uploads.values()), list(self.reads.values())
            self.uploads, self.reads = {}, {}
        for pending in uploads:
            self.discard(pending.upload)
        for read in reads:
            read.stop()
        self.retry_leftovers()

    def _expire(self) -> None:
        now = time.monotonic()
        for key, pending in list(self.uploads.items()):
            if now - pending.touched > IDLE_SECONDS:
                del self.uploads[key]
                self.discard(pending.upload)
        for key, read in list(self.reads.items()):
            if now - read.touched > IDLE_SECONDS:
                del self.reads[key]
                read.stop()

    def room(self) -> None:
        self._expire()
        self.retry_leftovers()
        if len(self.uploads) + len(self.reads) >= MAX_OPEN:
            raise MemoriesError("busy", f"{MAX_OPEN} file transfers are open; finish one first.")

    def upload(self, handle: str, caller: Caller) -> _Upload:
        pending = self.uploads.get(handle)
        if pending is None or pending.owner != caller.namespace:
            raise MemoriesError("not_found", "No open file upload has that handle; start again.")
        pending.touched = time.monotonic()
        return pending

    def read(self, handle: str, caller: Caller) -> _Read:
        read = self.reads.get(handle)
        if read is None or read.owner != caller.namespace:
            raise MemoriesError("not_found", "No open file read has that handle; open the file again.")
        read.touched = time.monotonic()
        return read


_TRANSFERS: weakref.WeakKeyDictionary[Service, Transfers] = weakref.WeakKeyDictionary()


def transfers_of(service: Service) -> Transfers:
    found = _TRANSFERS.get(service)
    if found is None:
        found = _TRANSFERS[service] = Transfers()
    return found


SWEEP_DELAY_SECONDS = 3.0


def _sweep(service: Service) -> None:
    """Remove chunks of uploads a crash cut short (referenced by no revision), bounded."""
    store = service.vault.require_store()
    store.keep_reserve()  # used on a full disk since; made again once there is room (FI-2)
    try:
        orphans = store.orphan_content(SWEEP_ROWS)
        if orphans:
            store.sweep_orphan_content(orphans)
            log.info("removed %d orphaned file chunks", len(orphans))
    except MemoriesError as exc:  # the unlock itself succeeded; the next one tries again
        log.warning("orphaned file chunks were not removed: error=%s", exc.code)
        return
    # Pack files no row names: an upload a crash cut short before its first rows were written,
    # or whose rows were just swept (engine/store/packs.py).
    stale = store.sweep_stale_packs()
    if stale:
        log.info("removed %d stale pack files", stale)


def _setup(service: Service) -> None:
    transfers = transfers_of(service)
    service.on_lock.append(transfers.drop_all)

    # In the background, a few seconds after the unlock: listing every content row takes ~10 ms
    # at 10k items under the store's lock, which the first requests after an unlock need.
    def sweep_later(_state: Unlocked) -> None:
        service.background.start("file-sweep", lambda _: _sweep(service), delay=SWEEP_DELAY_SECONDS)

    service.on_unlock.append(sweep_later)


EXTENSIONS.append(_setup)


def _decode(text: str) -> bytes:
    try:
        return binascii.a2b_base64(text, strict_mode=True)  # 2x faster than b64decode(validate=True)
    except (binascii.Error, ValueError):
        raise MemoriesError("invalid_input", "A file chunk is not valid base64.") from None


def _pieces(request: rq.FileChunk) -> Sequence[bytes | memoryview]:
    """The chunks of a request: base64 ``data``, or the binary part cut at ``sizes``."""
    if request.payload is None:
        if request.sizes or not request.data:
            raise MemoriesError("invalid_input", "A file chunk request needs its chunks as `data` or as a binary part.")
        return [_decode(text) for text in request.data]
    if request.data or not request.sizes:
        raise MemoriesError("invalid_input", "A binary file chunk request needs `sizes` and no `data`.")
    if sum(request.sizes) != len(request.payload):
        raise MemoriesError("invalid_input", "The chunk sizes do not add up to the binary part's length.")
    # Views, not copies: the sealer reads each chunk straight from the received frame.
    view = memoryview(request.payload)
    pieces, start = [], 0
    for size in request.sizes:
        pieces.append(view[start : start + size])
        start += size
    return pieces


def _file_entry(state: Unlocked, ref: str) -> Any:
    entry = visible_entry(state, ref)
    if entry.kind != FILE_KIND:
        raise MemoriesError("invalid_input", "That item is not a file; `memories get` shows it.")
    return entry


@op(rq.FileBegin)
def file_begin(service: Service, request: rq.FileBegin, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    transfers = transfers_of(service)
    if request.id is not None:
        entry = _file_entry(state, request.id)
        if entry.in_conflict:
            raise MemoriesError("conflict")
        asset_id, parents = entry.asset_id, list(entry.heads)
        vault = service.vault.writable_vault(state, asset_id, None)
        head = max(state.index.head_revisions(entry), key=lambda r: (r.created_ms, r.seq))
        current = service.vault.summary_of(state, head)
        title = request.title
        if title is None:  # a new revision keeps the file's title unless one is given
            title = str(current.get("title", "")) or request.name or "file"
        # ... and whether its text is searched (issue 27)
        searchable = request.searchable if request.searchable is not None else is_searchable(current)
    else:
        asset_id, parents = os.urandom(16), []
        vault = service.vault.writable_vault(state, asset_id, vault_for(state, request.vault))
        title = request.title if request.title is not None else (request.name or "file")
        searchable = bool(request.searchable)
    with transfers.lock:
        transfers.room()  # first: an ended upload's chunks may be removed now, making room
        if 0 <= request.size <= MAX_FILE_BYTES:  # else FileUpload refuses the size itself
            store = service.vault.require_store()
            check_room_for_upload(store, request.size, packed=uses_pack(store, request.size))
        source = None
        if request.fd is not None and request.identity is not None:
            source = open_client_file(caller.pid, request.fd, request.identity, request.size)
        upload = FileUpload(
            store=service.vault.require_store(),
            vault=vault,
            asset_id=asset_id,
            parents=parents,
            size=request.size,
            owner=caller.namespace,
            source=source,
        )
        handle = os.urandom(16).hex()
        transfers.uploads[handle] = _Upload(upload, caller.namespace, title, list(request.tags), request.name, searchable)
    return {
        "upload": handle,
        "chunk_bytes": CHUNK_BYTES,
        "chunks": upload.total,
        "per_request": rq.CHUNKS_PER_FRAME,
        "per_binary": rq.CHUNKS_PER_BINARY,
        "pull": upload.pulled,
        "per_pull": rq.CHUNKS_PER_PULL,
    }


@op(rq.FileChunk)
def file_chunk(service: Service, request: rq.FileChunk, caller: Caller) -> dict[str, Any]:
    service.require_unlocked()
    transfers = transfers_of(service)
    with transfers.lock:
        pending = transfers.upload(request.upload, caller)
    pieces = _pieces(request)
    try:
        pending.upload.add(request.index, pieces)
    except MemoriesError:
        _abort(transfers, request.upload)
        raise
    return {"received": pending.upload.received, "next": pending.upload.next_index}


@op(rq.FilePull)
def file_pull(service: Service, request: rq.FilePull, caller: Caller) -> dict[str, Any]:
    """The engine reads the next chunks from the file the client offered (engine/files/source.py)."""
    service.require_unlocked()
    transfers = transfers_of(service)
    with transfers.lock:
        pending = transfers.upload(request.upload, caller)
    try:
        pending.upload.pull(request.index, request.count)
    except MemoriesError:
        _abort(transfers, request.upload)
        raise
    return {"received": pending.upload.received, "next": pending.upload.next_index}


def _abort(transfers: Transfers, handle: str) -> None:
    with transfers.lock:
        pending = transfers.uploads.pop(handle, None)
    if pending is not None:
        transfers.discard(pending.upload)


@op(rq.FileCommit)
def file_commit(service: Service, request: rq.FileCommit, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    transfers = transfers_of(service)
    with transfers.lock:
        pending = transfers.upload(request.upload, caller)
    upload = pending.upload
    try:
        digest = upload.complete()  # every chunk stored, or the pipeline's first error
        if request.sha256 is None and not upload.pulled:
            raise MemoriesError("invalid_input", "A file sent in chunks is committed with the SHA-256 the client read.")
        if request.sha256 is not None and digest != request.sha256:
            raise MemoriesError("file_changed", "The file changed while it was read; nothing was saved.")
        text = text_of_sample(bytes(upload.sample))
        info = {
            "size": upload.size,
            "sha256": digest,
            "text": text is not None,
            "name": pending.name,
            "searchable": pending.searchable,
        }
        summary = make_summary(pending.title, pending.tags, {}, file=info)
        for guard in service.vault.revision_guards:  # the same guards as every revision (no body text here)
            summary, _ = guard(service.vault, state, upload.asset_id, summary, "")
        rev = upload.finish(state, summary)
        result = write_one(service, state, caller, "file_add", rev, [])
    except MemoriesError:
        _abort(transfers, request.upload)
        raise
    with transfers.lock:
        transfers.uploads.pop(request.upload, None)
    upload.store.keep_reserve()  # if a full disk used it since, now that there was room again (FI-2)
    return {**result, "size": upload.size, "sha256": digest, "title": pending.title}


@op(rq.FileAbort)
def file_abort(service: Service, request: rq.FileAbort, caller: Caller) -> dict[str, Any]:
    transfers = transfers_of(service)
    with transfers.lock:
        transfers.upload(request.upload, caller)
    _abort(transfers, request.upload)
    return {"aborted": True}


@op(rq.FileOpen)
def file_open(service: Service, request: rq.FileOpen, caller: Caller) -> dict[str, Any]:
    """An authorized read: the intent is committed before any byte is delivered."""
    state = service.require_unlocked()
    entry = _file_entry(state, request.id)
    if request.rev is not None:
        rev = state.index.resolve_revision(entry, request.rev)
        if rev.tombstone:
            raise MemoriesError("not_found", "That revision deleted the file; name an earlier one.")
    else:
        if entry.in_conflict:
            raise MemoriesError("conflict")
        rev = max((r for r in state.index.head_revisions(entry) if not r.tombstone), key=lambda r: (r.created_ms, r.seq))
    summary = service.vault.summary_of(state, rev)
    transfers = transfers_of(service)
    with transfers.lock:
        transfers.room()
    service.vault.commit_intent(state, "file_get", caller, [entry.asset_id])
    handle = os.urandom(16).hex()
    with transfers.lock:
        transfers.reads[handle] = _Read(rev, caller.namespace)
    info = file_info(summary)
    return {
        "read": handle,
        "id": entry.asset_id.hex(),
        "short_id": state.index.short_id(entry.asset_id),
        **revision_ref(rev),
        "title": summary.get("title", ""),
        "name": str(info.get("name", "")),
        "size": int(rev.body["body_len"]),
        "sha256": str(info.get("sha256", "")),
        "chunks": len(rev.body["body"]),
        "per_request": rq.CHUNKS_PER_FRAME,
        "per_binary": rq.CHUNKS_PER_BINARY,
    }


@op(rq.FileRead)
def file_read(service: Service, request: rq.FileRead, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    transfers = transfers_of(service)
    with transfers.lock:
        read = transfers.read(request.read, caller)
    rev = read.rev
    vault = state.vaults[rev.vault_id]
    epoch_key = vault.epoch_keys[rev.epoch]
    store = service.vault.require_store()
    total = len(rev.body["body"])
    end = min(total, request.index + request.count)
    if request.index >= total:
        raise MemoriesError("invalid_input", "That chunk is outside the file.")
    if request.binary:
        batch = read.take_ahead(request.index, end) or open_file_chunks(rev, epoch_key, store, request.index, end)
        if end < total:  # most clients ask for the next batch next
            following = min(total, end + request.count)
            read.ahead = (end, following, _READ_AHEAD.submit(open_file_chunks, rev, epoch_key, store, end, following))
        return {"index": request.index, "sizes": batch[0], "payload": batch[1]}
    if request.count > rq.CHUNKS_PER_FRAME:
        raise MemoriesError("invalid_input", f"At most {rq.CHUNKS_PER_FRAME} chunks travel as base64 in one answer.")
    data = [base64.b64encode(open_file_chunk(rev, epoch_key, store, i)).decode("ascii") for i in range(request.index, end)]
    return {"index": request.index, "data": data}


@op(rq.FileClose)
def file_close(service: Service, request: rq.FileClose, caller: Caller) -> dict[str, Any]:
    transfers = transfers_of(service)
    with transfers.lock:
        transfers.read(request.read, caller)
        read = transfers.reads.pop(request.read, None)
    if read is not None:
        read.stop()
    return {"closed": True}


@op(rq.FileList)
def file_list(service: Service, request: rq.FileList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault_id = vault_for(state, request.vault).vault_id
    items = []
    for entry in state.index.visible():
        if entry.vault_id != vault_id or entry.kind != FILE_KIND:
            continue
        summary = asset_summary(service, state, entry)
        if request.tag is not None and request.tag not in summary["tags"]:
            continue
        heads = [r for r in state.index.head_revisions(entry) if not r.tombstone]
        newest = max(heads, key=lambda r: (r.created_ms, r.seq))
        info = file_info(service.vault.summary_of(state, newest))
        items.append(
            {
                **summary,
                "size": int(newest.body["body_len"]),
                "name": str(info.get("name", "")),
                "text": bool(info.get("text")),
                "searchable": info.get("searchable") is True,
            }
        )
    items.sort(key=lambda s: (s["updated_ms"], s["id"]), reverse=True)
    return {"items": items, "total": len(items)}


@op(rq.FileEdit)
def file_edit(service: Service, request: rq.FileEdit, caller: Caller) -> dict[str, Any]:
    """A new revision with the head's bytes and a changed title, tags or search setting (issue 27).

    The bytes are not copied: the revision names the head's sealed chunks and data key, signed
    anew (HI-2). Only within the epoch those were sealed in: a data key of an older epoch is
    known to whoever held that epoch's key, and must not seal the new title and tags.
    """
    state = service.require_unlocked()
    if request.title is None and request.tags is None and request.searchable is None:
        raise MemoriesError("invalid_input", "Name what to change: a title, tags, or whether the file's text is searched.")
    entry = _file_entry(state, request.id)
    if entry.in_conflict:
        raise MemoriesError("conflict")
    head = max((r for r in state.index.head_revisions(entry) if not r.tombstone), key=lambda r: (r.created_ms, r.seq))
    vault = service.vault.writable_vault(state, entry.asset_id, None)
    if head.epoch != vault.policy.epoch:
        raise MemoriesError(
            "invalid_input",
            "The vault's key changed since this file was saved; add it again with "
            "`memories file add PATH --update ID` and the options you want.",
        )
    old = service.vault.summary_of(state, head)
    info = {**file_info(old)}
    if request.searchable is not None:
        info["searchable"] = request.searchable
    summary = make_summary(
        request.title if request.title is not None else str(old.get("title", "")),
        list(request.tags) if request.tags is not None else list(old.get("tags", [])),
        dict(old.get("meta", {})),
        file=info,
    )
    for guard in service.vault.revision_guards:  # the same guards as every revision (no body text here)
        summary, _ = guard(service.vault, state, entry.asset_id, summary, "")
    rev = build_streamed_revision(
        identity=state.identity,
        vault_id=vault.vault_id,
        policy_head=vault.policy.head,
        epoch=vault.policy.epoch,
        epoch_key=vault.current_key,
        asset_id=entry.asset_id,
        kind=FILE_KIND,
        parents=list(entry.heads),
        summary=summary,
        dek=head.data_key(vault.epoch_keys[head.epoch]),
        body_digests=list(head.body["body"]),
        body_len=int(head.body["body_len"]),
        content_seqs=list(head.body_seqs),
    )
    result = write_one(service, state, caller, "file_edit", rev, [])
    return {**result, "title": summary["title"], "tags": summary["tags"], "searchable": info.get("searchable") is True}
