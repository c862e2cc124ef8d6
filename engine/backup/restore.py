"""Check a backup's items and rebuild them as a new device's store (BK-2).

:class:`Restorer` consumes the items of a :class:`~engine.backup.envelope.BackupReader` once, in
order. It verifies every policy history, every revision (signature, policy, epoch, parents),
decrypts every summary and body (so each sealed chunk is authenticated), and checks the head
flags against the DAG it rebuilt. With ``build=True`` it also produces the new store's rows:

* a new identity (user, device and exchange keys) and, per backed-up vault, a NEW vault ID
  with a genesis policy whose only member is the new user (no old shared membership);
* each current head (conflict heads included, tombstone heads too) signed by the new device
  as a parentless revision of the same asset ID in the new vault, so secret maps, links, card
  kinds, protected cards, OTP seeds and counters and credentials carry over. Its signed body
  names the original head and carries the item's original creation time and the head's change
  time (``Restored``), which lists show: the restore happened now, the content is older. A
  live head keeps its data key (re-wrapped under the new vault's epoch key) and so names the
  very content rows its archived original names: the store holds each body once, however
  large, and both signatures verify the same bytes. Heads are signed last, once the whole
  file verified, oldest change first, so conflict heads keep their original order;
* the original signed history, read-only: ``archived_vault`` rows (old ID, new ID, policy
  history, epoch keys) and ``archived_revisions`` rows of up to ``_ARCHIVE_BATCH`` revisions
  each (signed bytes, signature, content rows), which history and diff read
  (engine/backup/archive.py; stores restored before issue 32's third pass hold one
  ``archived_revision`` row per revision, still read);
* the card links, with their vault field mapped to the new vault ID.

Nothing is written here: the caller publishes the rows atomically (create_store) only after
the whole file verified, so a damaged file or a killed restore leaves no store.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.backup.envelope import BackupReader
from engine.crypto.aead import AeadError
from engine.crypto.chunks import ChunkError, open_chunk
from engine.crypto.keys import DeviceIdentity, SignatureError, new_identity, verify
from engine.errors import MemoriesError
from engine.vault.body_encoding import BodyEncodingError, inflate_body
from engine.vault.core import VaultCore, VaultKeys
from engine.vault.policy import Policy, owner_policy, verify_chain
from engine.vault.revision import Restored, Revision, build_revision, build_streamed_revision, chunk_count, sign_revisions

__all__ = ["Restorer", "ARCHIVED_VAULT", "ARCHIVED_REVISION", "ARCHIVED_BATCH", "RESTORED_FROM"]

ARCHIVED_VAULT = "archived_vault"
ARCHIVED_REVISION = "archived_revision"  # one revision a row: stores restored before the batches
ARCHIVED_BATCH = "archived_revisions"
RESTORED_FROM = "restored_from"
# Archived revisions per state row (issue 32): a row each cost a restore as much in the store
# (encoding, deflate set-up, sealing, chaining; opening it again at every unlock) as the rest of
# the revision's handling; 256 revisions of ~1.4 KB make rows of ~350 KB before deflate.
_ARCHIVE_BATCH = 256
# The heads' bodies, opened here to check them, are handed to the index build that follows the
# restore (Unlocked.opened_bodies) up to this many bytes in all: it then neither reads nor opens
# them again (issue 32). Beyond it the build reads them from the store, as after any unlock.
_OPENED_BODIES_BUDGET = 64 * 1024 * 1024  # bytes of memory the kept bodies take


def _content(items: Iterator[dict[str, Any]], n: int) -> Iterator[bytes]:
    """The ``n`` content items that follow a revision item, one at a time."""
    for _ in range(n):
        content = next(items, None)
        if content is None or content.get("t") != "content" or not isinstance(content.get("data"), bytes):
            raise _invalid("a revision without its content")
        yield bytes(content["data"])


# Revisions whose Ed25519 signatures are checked together on a helper thread while the main
# loop goes on (issue 32: the largest single cost of a restore; libsodium runs without the GIL).
# One hand-over per batch, not per revision: a hand-over per item made the two threads take
# turns at the GIL (each cffi call gives it up), slower than no thread on a loaded machine. The
# rows made meanwhile go only to the staging store, and every batch is waited for before the
# file is accepted; at most _IN_FLIGHT batches of references are held.
_BATCH = 512
_IN_FLIGHT = 2


def _all_verify(batch: list[tuple[bytes, bytes, bytes]]) -> bool:
    """Whether every (public key, signed bytes, signature) of ``batch`` verifies."""
    for public_key, signed, signature in batch:
        try:
            verify(public_key, signed, signature)
        except (SignatureError, TypeError, ValueError):
            return False
    return True


class _SignatureChecks:
    """The signature checks of the revisions read so far; :meth:`finish` waits for all of them.

    Nothing here decides what a revision means: a failed batch refuses the whole file, as a
    failed single check did (the same message), and a file is accepted only after finish().
    """

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._batch: list[tuple[bytes, bytes, bytes]] = []
        self._pending: deque[Future[bool]] = deque()

    def add(self, rev: Revision) -> None:
        try:
            self._batch.append((rev.author, rev.signed, rev.signature))
        except (KeyError, TypeError, ValueError):
            raise _invalid("a revision's signature, policy or content") from None
        if len(self._batch) >= _BATCH:
            self._submit()

    def _submit(self) -> None:
        if self._batch:
            self._pending.append(self._pool.submit(_all_verify, self._batch))
            self._batch = []
        while len(self._pending) > _IN_FLIGHT:
            self._wait(self._pending.popleft())

    def finish(self) -> None:
        self._submit()
        while self._pending:
            self._wait(self._pending.popleft())

    @staticmethod
    def _wait(check: Future[bool]) -> None:
        if not check.result():
            raise _invalid("a revision's signature, policy or content")


def _parsed(item: dict[str, Any]) -> tuple[Revision, dict[str, Any], int]:
    """A revision item's signed revision, its signed body (decoded once: every later step reads
    it from here, issue 32) and its chunk count; malformed items are refused here, before their
    signature is considered."""
    try:
        rev, body = Revision.with_body(bytes(item["signed"]), bytes(item["sig"]), [])
        n = int(item["n"])
    except (KeyError, TypeError, ValueError, msgspec.MsgspecError):
        raise _invalid("a malformed revision") from None
    if not 1 <= n <= 1_000_000:
        raise _invalid("a malformed revision")
    return rev, body, n


def _invalid(detail: str) -> MemoriesError:
    return MemoriesError("backup_invalid", f"The backup does not verify ({detail}); nothing was written.")


@dataclass
class _NewVault:
    vault_id: bytes
    policy: Policy
    key: bytes


@dataclass
class _Head:
    """A verified current head, signed anew once the whole file verified."""

    rev: Revision
    summary: dict[str, Any]
    dek: bytes
    content_seqs: list[int]
    body_len: int
    body_digests: list[bytes]
    sealed_summary: list[bytes]
    body_text: str | None  # the body as opened, if kept for the index build (_OPENED_BODIES_BUDGET)


@dataclass
class Restorer:
    reader: BackupReader
    build: bool = False
    identity: DeviceIdentity = field(default_factory=new_identity)
    old_vaults: dict[bytes, VaultKeys] = field(default_factory=dict)
    new_vaults: dict[bytes, _NewVault] = field(default_factory=dict)
    head_records: list[dict[str, Any]] = field(default_factory=list)
    archive_records: list[dict[str, Any]] = field(default_factory=list)
    link_records: list[dict[str, Any]] = field(default_factory=list)
    vault_records: list[dict[str, Any]] = field(default_factory=list)
    # Vaults whose backed-up policy had members besides one user: shared with other people.
    # Their restored copies have one member (BK-2), so the restore says so (issue 29).
    shared: list[dict[str, Any]] = field(default_factory=list)
    # ``restore --leave-shared``: those vaults (but never the default one) are verified and left
    # out, so the shared vault itself can arrive here when its Owner adds this device again (a
    # restored copy keeps the item IDs, and an item lives in one vault).
    leave_shared: bool = False
    left: set[bytes] = field(default_factory=set)
    _left_assets: set[bytes] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: {"vaults": 0, "revisions": 0, "heads": 0, "links": 0, "assets": 0})
    _next_seq: int = 1
    _defaults: int = 0
    _heads: list[_Head] = field(default_factory=list)
    _first_ms: dict[bytes, int] = field(default_factory=dict)  # asset -> its first revision's time
    _archived: list[dict[str, Any]] = field(default_factory=list)  # the archive batch being filled
    # The re-signed heads as built (their records are in head_records): the unlock that ends the
    # restore takes these objects for the rows that hold exactly them instead of decoding again.
    new_heads: list[Revision] = field(default_factory=list)
    # Their bodies as opened and checked here, by the new head's revision ID (_OPENED_BODIES_BUDGET),
    # of the kinds whose bodies the index reads whole (the caller names them; none by default, so
    # no credential's body is held beyond its check).
    opened_bodies: dict[bytes, str] = field(default_factory=dict)
    body_kinds: frozenset[str] = frozenset()
    _opened_bytes: int = 0

    def records(self) -> Iterable[dict[str, Any]]:
        """Every state row of the new store, in order; complete once :meth:`content_rows` is exhausted."""
        yield {"t": "identity", **self.identity.to_record()}
        yield from self.vault_records
        yield from self.archive_records
        yield from self.head_records
        yield from self.link_records
        yield {
            "t": RESTORED_FROM,
            "device": bytes(self.reader.manifest["device"]) if self.reader.manifest else b"",
            "backup_created_ms": self.reader.created_ms,
            "vaults": [{"old": old, "new": new.vault_id} for old, new in self.new_vaults.items()],
        }

    def run(self) -> None:
        """Verify only (``backup verify``)."""
        for _row in self.content_rows():
            pass

    def content_rows(self) -> Iterator[tuple[int, bytes]]:
        """Consume the whole file; yield content rows of the new store as they are made."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-verify") as pool:
            try:
                yield from self._checked_rows(self.reader.items(), _SignatureChecks(pool))
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

    def _checked_rows(self, items: Iterator[dict[str, Any]], signatures: _SignatureChecks) -> Iterator[tuple[int, bytes]]:
        heads: dict[bytes, set[bytes]] = {}
        flagged: set[bytes] = set()
        known: dict[bytes, bytes] = {}  # rev_id -> asset_id
        links: list[dict[str, Any]] = []
        for item in items:
            kind = item.get("t")
            if kind == "vault":
                self._vault(item)
            elif kind == "link":
                links.append(item)
            elif kind == "revision":
                rev, body, n = _parsed(item)
                signatures.add(rev)
                yield from self._revision(rev, body, _content(items, n), n, bool(item.get("head")), heads, known)
                if item.get("head"):
                    flagged.add(rev.rev_id)
            else:
                raise _invalid(f"an unknown item kind {str(kind)[:20]!r}")
        signatures.finish()  # every signature verified before anything else is concluded
        if self.reader.manifest is None:
            raise _invalid("no manifest")
        if self._defaults != 1:
            raise _invalid("not exactly one default vault")
        actual = {h for hs in heads.values() for h in hs}
        if actual != flagged:
            raise _invalid("the marked heads are not the heads of the history")
        for item in links:
            self._link(item)
        self.counts["assets"] = len(heads) - len(self._left_assets)
        self._close_archive_batch()
        yield from self._sign_heads()

    def _vault(self, item: dict[str, Any]) -> None:
        try:
            vault_id = bytes(item["vault_id"])
            history = [Policy.parse(r) for r in item["history"]]
            discarded = [Policy.parse(r) for r in item.get("discarded", [])]
            keys = {int(e["epoch"]): bytes(e["key"]) for e in item["epoch_keys"]}
            head = verify_chain(history)
            name = str(item["name"])
        except (KeyError, TypeError, ValueError, SignatureError, MemoriesError):
            raise _invalid("a vault's policy history") from None
        if vault_id in self.old_vaults or head.epoch not in keys:
            raise _invalid("a vault's keys")
        old = VaultKeys(vault_id, name, head, keys, history, discarded)
        self.old_vaults[vault_id] = old
        self._defaults += 1 if item.get("default") else 0
        leave = self.build and self.leave_shared and len(head.members()) > 1 and not item.get("default")
        if len(head.members()) > 1:
            self.shared.append({"name": name, "people": len(head.members()), "left_out": leave})
        if leave:
            self.left.add(vault_id)
            return
        self.counts["vaults"] += 1
        if not self.build:
            return
        new_id = os.urandom(16)
        policy = owner_policy(self.identity, new_id)
        new = _NewVault(new_id, policy, os.urandom(32))
        self.new_vaults[vault_id] = new
        self.vault_records.append(
            {
                "t": "vault",
                "vault_id": new_id,
                "name": name,
                "default": bool(item.get("default")),
                "policy": policy.to_record(),
                "epoch_keys": [{"epoch": 1, "key": new.key}],
            }
        )
        self.archive_records.append(
            {
                "t": ARCHIVED_VAULT,
                "old": vault_id,
                "new": new_id,
                "name": name,
                "history": [p.to_record() for p in history],
                "discarded": [p.to_record() for p in discarded],
                "epoch_keys": [{"epoch": e, "key": k} for e, k in sorted(keys.items())],
            }
        )

    def _revision(
        self,
        rev: Revision,
        body: dict[str, Any],
        chunks: Iterator[bytes],
        n: int,
        head: bool,
        heads: dict[bytes, set[bytes]],
        known: dict[bytes, bytes],
    ) -> Iterator[tuple[int, bytes]]:
        """Check one revision (its signature is checked in its batch) and stream its body chunk by chunk
        (memory: one chunk at a time, whatever the body's size)."""
        try:
            # The signature is checked in its batch (_SignatureChecks), before the file is accepted.
            VaultCore.check_revision(rev, self.identity, self.old_vaults)
            vault = self.old_vaults[rev.vault_id]
            epoch_key = vault.epoch_keys[rev.epoch]
            dek = rev.data_key(epoch_key, body)
            summary = rev.open_summary_with(dek, body, keep=False)
            digests = [bytes(d) for d in body["body"]]
            sealed_summary = [bytes(c) for c in body["summary"]]
        except (SignatureError, ChunkError, AeadError, KeyError, TypeError, ValueError):
            raise _invalid("a revision's signature, policy or content") from None
        if len(digests) != n:
            raise _invalid("a revision's content does not match its signed digests")
        if rev.rev_id in known:
            raise _invalid("a revision appears twice")
        asset = rev.asset_id
        for parent in rev.parents:
            if known.get(parent) != asset:
                raise _invalid("a revision's parent is missing")
        if rev.parents and asset not in heads:
            raise _invalid("a revision's parent is missing")
        archived: list[int] = []
        body_len = 0
        # Format 2 (issue 32): the chunks hold a compressed body, checked below to inflate to exactly
        # its signed length, as a merge checks it (a note's stream is held for that, not a file's).
        compressed = rev.body_z is not None
        context = asset + b"body"
        skip = rev.vault_id in self.left  # verified, not written (--leave-shared)
        claimed = body.get("body_len")  # checked against the chunks below; here it only bounds what is kept
        keep = (
            self.build
            and head
            and not skip
            and not rev.tombstone
            and rev.kind in self.body_kinds
            and self._opened_bytes < _OPENED_BODIES_BUDGET
            # One body at most a sixteenth of it: a str takes up to 4 bytes a character.
            and claimed.__class__ is int
            and claimed <= _OPENED_BODIES_BUDGET // 16
            # A compressed body (format 2) is held inflated: its signed length bounds that.
            and (rev.body_z is None or rev.body_z <= _OPENED_BODIES_BUDGET // 16)
        )
        opened: list[bytes] = []
        for index, chunk in enumerate(chunks):
            if hashlib.sha256(chunk).digest() != digests[index]:
                raise _invalid("a content chunk does not match its signed digest")
            try:
                plain = open_chunk(dek, chunk, context, index, n)
            except ChunkError:
                raise _invalid("a content chunk failed authentication") from None
            body_len += len(plain)
            if keep or compressed:
                opened.append(plain)
            if not self.build or skip:
                continue
            archived.append(self._take())
            yield archived[-1], chunk
        if body_len != body.get("body_len", body_len):
            raise _invalid("a revision's body length does not match")
        inflated: bytes | None = None
        if rev.body_z is not None:
            try:
                inflated = inflate_body(b"".join(opened), rev.body_z)
            except BodyEncodingError:
                raise _invalid("a revision's compressed body does not inflate to its signed length") from None
        if head and not rev.tombstone and n != chunk_count(body_len):  # its chunks become the new head's
            raise _invalid("a revision's body is not cut into chunks as a head's must be")
        known[rev.rev_id] = asset
        heads[asset] = (heads.get(asset, set()) - set(rev.parents)) | {rev.rev_id}
        if not rev.parents:
            # An item may have several first revisions (a restore or a memories-json import makes
            # one per conflict head); a restored store's own backup carries the original times.
            self._first_ms[asset] = min(self._first_ms.get(asset, rev.item_created_ms), rev.item_created_ms)
        if skip:
            self._left_assets.add(asset)
            return
        self.counts["revisions"] += 1
        if not self.build:
            return
        self._archived.append({"signed": rev.signed, "sig": rev.signature, "body_seqs": archived})
        if len(self._archived) >= _ARCHIVE_BATCH:
            self._close_archive_batch()
        if head:
            text = None
            if keep:
                try:
                    text = (inflated if inflated is not None else b"".join(opened)).decode("utf-8")
                    self._opened_bytes += sys.getsizeof(text)  # what it holds in memory
                except UnicodeDecodeError:  # left to the store, which says so when it is read
                    pass
            self._heads.append(_Head(rev, summary, dek, archived, body_len, digests, sealed_summary, text))

    def _close_archive_batch(self) -> None:
        """One ``archived_revisions`` row for the revisions gathered so far. Its own ``body_seqs``
        names every content row its revisions name: the store keeps a content row only while
        a record names it there (StoreFile.orphan_content sweeps the others at unlock)."""
        if self._archived:
            seqs = [seq for entry in self._archived for seq in entry["body_seqs"]]
            self.archive_records.append({"t": ARCHIVED_BATCH, "revisions": self._archived, "body_seqs": seqs})
            self._archived = []

    def _sign_heads(self) -> Iterator[tuple[int, bytes]]:
        """Sign the new vaults' heads (after the whole file verified), oldest change first:
        revisions of one restore tie on their own times, and store order then keeps the
        original order of conflict heads (the newest one is the one a summary shows). All are
        laid out first and then signed together on two cores (issue 32)."""
        built: list[Revision] = []
        texts: list[tuple[Revision, str]] = []
        for head in sorted(self._heads, key=lambda h: (h.rev.changed_ms, h.rev.created_ms)):
            rev = head.rev
            new = self.new_vaults[rev.vault_id]
            common: dict[str, Any] = {
                "identity": self.identity,
                "vault_id": new.vault_id,
                "policy_head": new.policy.head,
                "epoch": 1,
                "epoch_key": new.key,
                "asset_id": rev.asset_id,
                "kind": rev.kind,
                "parents": [],
                "summary": head.summary,
                "restored": Restored(rev.rev_id, self._first_ms[rev.asset_id], rev.changed_ms),
                "unsigned": True,
            }
            if not rev.tombstone:
                # The original data key and sealed chunks, already verified and stored once as the
                # archived revision's rows: no second copy of the body, and nothing to re-seal.
                made_head = build_streamed_revision(
                    **common,
                    dek=head.dek,
                    body_digests=head.body_digests,
                    body_len=head.body_len,
                    content_seqs=head.content_seqs,
                    # The original's sealed summary: the same key, asset and plaintext, opened
                    # and authenticated above, so it is carried instead of sealed again.
                    sealed_summary=head.sealed_summary,
                    # The chunks hold what the original's do: a compressed body (format 2) stays one.
                    body_z=rev.body_z,
                )
                built.append(made_head)
                if head.body_text is not None:
                    texts.append((made_head, head.body_text))
            else:  # a tombstone head: an empty body
                made = build_revision(**common, tombstone=True, body=b"", content_seqs=[self._take()])
                yield from made.content_rows
                built.append(made.revision)
        self._heads.clear()
        sign_revisions(self.identity, built)  # the revision IDs do not depend on the signatures
        self.opened_bodies.update((signed_head.rev_id, text) for signed_head, text in texts)
        self.head_records.extend(revision.to_record() for revision in built)
        self.new_heads.extend(built)
        self.counts["heads"] += len(built)

    def _take(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _link(self, item: dict[str, Any]) -> None:
        record = item.get("record")
        if not isinstance(record, dict) or record.get("t") != "card_link":
            raise _invalid("a malformed link")
        vault = record.get("vault")
        if not isinstance(vault, bytes) or vault not in self.old_vaults:
            raise _invalid("a link of an unknown vault")
        if vault in self.left:
            return
        self.counts["links"] += 1
        if self.build:
            self.link_records.append({**record, "vault": self.new_vaults[vault].vault_id})
