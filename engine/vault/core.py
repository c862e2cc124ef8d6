"""The vault core: the one owner of the open store, the unlocked keys and the decoded state.

Every write of the engine goes through this object — building, encrypting and signing a
revision, committing it with its audit entry, committing a read intent — and nothing else
opens the store. Local ops use it through the service's handlers today; sync will apply
foreign revisions through exactly the same ``check_revision`` / ``commit`` path.

The core knows nothing of requests, callers, gates or features. It exposes two hook lists
the service fills: ``revision_guards`` (every new revision passes them, e.g. the secret-map
guard of CD-7) and ``durable``/``committed`` listeners (what a request committed, then
feature updates such as the search index).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.crypto.canonical import domain_bytes
from engine.crypto.chunks import ChunkError
from engine.crypto.keys import DeviceIdentity, SignatureError, sign
from engine.errors import MemoriesError
from engine.store.database import SealedRows, StoreFile
from engine.vault.index import HIDE_FIELD, AssetEntry, AssetIndex
from engine.vault.policy import Change, Policy, RemoveMember, RevokeDevice, propose, verify_chain
from engine.vault.revision import Revision, StoredRevisions, build_revision

__all__ = ["AUDIT_TAG", "COMPRESSED_BODY_KINDS", "Actor", "Unlocked", "VaultCore", "VaultKeys", "DecodedState"]

# Domain tag of signed audit entries (also what the background verifier checks).
AUDIT_TAG = "memories.audit"
# The kinds whose bodies are deflated before they are sealed (issue 32, revision format 2): what
# the user writes as text. Compression before encryption lets the stored length tell how much a body
# repeats itself (SECURITY.md), so not credentials, logins or protected cards (secrets), nor agent
# transcripts (text from tools and web pages, which someone else may choose, beside whatever the
# redaction missed: the setting of a compression oracle); not files (streamed and read by chunk),
# nor device-local configuration. (Spelled here: the vault imports no feature module.)
COMPRESSED_BODY_KINDS = frozenset({"memory", "note", "knowledge", "brain", "persona"})


class Actor(Protocol):
    """Who asked: what an audit entry records (the service's Caller is one)."""

    @property
    def namespace(self) -> str: ...

    @property
    def surface(self) -> str: ...

    @property
    def client(self) -> str: ...


@dataclass
class VaultKeys:
    """One vault as this device holds it: its policy history (PO-1) and every epoch key."""

    vault_id: bytes
    name: str
    policy: Policy
    epoch_keys: dict[int, bytes]
    # The signed linear policy history, genesis first; ``policy`` is its last entry.
    history: list[Policy] = field(default_factory=list)
    # Policies of a branch an Owner discarded when resolving a permission fork (SY-3): they
    # still verify the revisions written under them, but are no longer in the history.
    discarded: list[Policy] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.history:
            self.history = [self.policy]

    @property
    def current_key(self) -> bytes:
        return self.epoch_keys[self.policy.epoch]

    def policy_at(self, head: bytes) -> Policy | None:
        """The policy of this vault whose head is ``head`` (a revision names the one it was written under)."""
        for policy in reversed(self.history):
            if policy.head == head:
                return policy
        for policy in self.discarded:
            if policy.head == head:
                return policy
        return None

    def record(self, *, default: bool) -> dict[str, Any]:
        """The sealed state row that stores this vault as it is now (appended on every policy change)."""
        return {
            "t": "vault",
            "vault_id": self.vault_id,
            "name": self.name,
            "default": default,
            "policy": self.policy.to_record(),
            "epoch_keys": [{"epoch": epoch, "key": key} for epoch, key in sorted(self.epoch_keys.items())],
            **({"discarded": [p.to_record() for p in self.discarded]} if self.discarded else {}),
        }


def _accepted_heads(state: Unlocked, vault: VaultKeys, change: Change) -> list[bytes]:
    """SY-6: for a change that revokes devices, the heads of those devices' revisions in the
    vault this device holds (applied, so accepted; quarantined ones are not in the index). A
    device joining later applies these and their ancestors instead of quarantining them."""
    prev = vault.policy
    if isinstance(change, RevokeDevice):
        gone = {bytes(change.device)}
    elif isinstance(change, RemoveMember):
        gone = {d for d in prev.devices() if prev.device_user(d) == bytes(change.user)}
    else:
        return []
    gone -= prev.revoked()
    if not gone:
        return []
    theirs = [
        rev
        for rev in state.index.revisions.values()
        if rev.author in gone and rev.vault_id == vault.vault_id and rev.rev_id not in state.index.hidden
    ]
    parents = {p for rev in theirs for p in rev.parents}
    return sorted(rev.rev_id for rev in theirs if rev.rev_id not in parents)


@dataclass
class Unlocked:
    """Everything that exists only while the vault is unlocked; dropped by lock."""

    identity: DeviceIdentity
    vaults: dict[bytes, VaultKeys]
    default_vault: bytes
    index: AssetIndex = field(default_factory=AssetIndex)
    audit_entries: int = 0
    extra_records: dict[str, list[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    # The signed bytes of every audit entry, oldest first; handlers/audit.py reads and extends it (AU-1).
    audit_log: list[bytes] = field(default_factory=list)
    # sha256(signed) -> signature of each of this device's audit entries (sync sends them), and
    # the digest of the newest one: the next entry names it as ``prev`` (a per-device hash
    # chain, so a peer that reorders or drops entries is caught; docs/sync.md).
    audit_sigs: dict[bytes, bytes] = field(default_factory=dict)
    audit_tip: bytes | None = None
    # Records of ``VaultCore.deferred_kinds``, authenticated but not decoded: their reader
    # takes them (``store.decode_record``) in the background instead of the unlock paying.
    deferred: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    # Rows of those kinds written as deferred rows, still sealed: their reader opens them.
    sealed: SealedRows | None = None
    # Reads a stored revision's signed bytes back from its row: revisions do not keep them (issue 32).
    stored: StoredRevisions | None = None
    # Bodies a restore has just opened and checked against their signed digests, by revision ID,
    # each taken once by ``body_of`` (the index build after the restore) instead of reading and
    # opening its rows again (issue 32). Plaintext held like the index's own; dropped with the state.
    opened_bodies: dict[bytes, str] = field(default_factory=dict)
    # What the wikilinks of a note that named something not there yet gave, by note ID, until the
    # sync that ends an import takes it (handlers/wikilinks.py ``LinkedNames``): that sync reads
    # again only the notes where a name now resolves otherwise (issue 32). Link names, held like
    # the index's text; dropped with the state.
    linked_names: dict[bytes, Any] = field(default_factory=dict)

    @property
    def vault(self) -> VaultKeys:
        return self.vaults[self.default_vault]


def _written(written: Mapping[bytes, Revision], record: dict[str, Any], seq: int) -> Revision | None:
    """The revision of ``written`` this row holds, exactly (signed bytes, signature and content
    rows), now numbered ``seq``; None if the row holds anything else."""
    try:
        rev = written.get(record["signed"])
    except (KeyError, TypeError):  # malformed: from_record raises the store's own error
        return None
    if rev is None or rev.seq not in (0, seq) or rev.signature != record.get("sig") or rev.body_seqs != record.get("body_seqs"):
        return None
    rev.seq = seq  # its summary stays kept, as a revision an import commits keeps it
    return rev


@dataclass
class DecodedState:
    """The result of opening every row: the state plus what the background verifier re-checks."""

    state: Unlocked
    revisions: list[Revision]
    audits: list[dict[str, Any]]


Records = list[dict[str, Any]]
RevisionGuard = Callable[["VaultCore", Unlocked, bytes, dict[str, Any], str], tuple[dict[str, Any], str]]


def _check_key(rev: Revision) -> tuple[Any, ...] | None:
    """What check_revision's outcome depends on, for a well-formed revision (None otherwise:
    checked in full, failing where it always did)."""
    try:
        key = (rev.vault_id, rev.policy_head, rev.author, rev.epoch, rev.cert)
    except (KeyError, TypeError, ValueError):
        return None
    return key if key[4].__class__ is bytes else None


class VaultCore:
    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self.store: StoreFile | None = StoreFile.open(store_path) if store_path.exists() else None
        self.state: Unlocked | None = None
        # Every new non-tombstone revision passes these, whatever built it:
        # (core, state, asset_id, summary, body) → (summary, body).
        self.revision_guards: list[RevisionGuard] = []
        # Called right after the store transaction is durable, before memory changes:
        # from here on a request must say it saved something.
        self.durable: list[Callable[[list[Revision], Records], None]] = []
        # Called after memory reflects the commit (index, extra records).
        self.committed: list[Callable[[Unlocked, list[Revision], Records], None]] = []
        # Extra-record kinds an unlock leaves undecoded in ``Unlocked.deferred`` (a feature's
        # cache read in the background, e.g. search token streams): nothing the core reads.
        self.deferred_kinds: set[str] = set()

    # -- state ---------------------------------------------------------------------------
    def require_store(self) -> StoreFile:
        if self.store is None:
            raise MemoriesError("not_initialized")
        return self.store

    def require_unlocked(self) -> Unlocked:
        if self.store is None:
            raise MemoriesError("not_initialized")
        if self.state is None or not self.store.unlocked:
            raise MemoriesError("locked")
        return self.state

    def wipe(self) -> None:
        """Drop the master key and the decoded state (ST-10)."""
        if self.store is not None:
            self.store.wipe()
        self.state = None

    # -- loading -------------------------------------------------------------------------
    def decode(
        self, store: StoreFile, *, open_deferred: bool = False, written: Mapping[bytes, Revision] | None = None
    ) -> DecodedState:
        """Open and authenticate every row; check policy, device and certificate of each revision.

        Ed25519 signatures are verified in bulk by the caller (in the background, or at once
        after an earlier failure); the AEAD and checkpoint chain already authenticated the rows.

        ``written``: revisions this engine has just built and stored, by their signed bytes (a
        restore's new heads, issue 32). A row whose signed bytes, signature and content rows are
        those of one of them yields that object instead of decoding the same bytes again; the
        row itself is opened and authenticated, and the revision checked, like any other.
        """
        # Rows are opened on a helper thread while this loop decodes those already opened.
        loaded, records = store.load_stream(frozenset(self.deferred_kinds), open_deferred=open_deferred)
        identity: DeviceIdentity | None = None
        vaults: dict[bytes, VaultKeys] = {}
        default_vault = b""
        extra: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        revisions: list[Revision] = []
        audits: list[dict[str, Any]] = []
        stored = StoredRevisions(store.read_records)
        passed: set[tuple[Any, ...]] = set()  # check_revision's, for the vaults as they are so far
        try:
            for seq, record in records:
                kind = record.get("t")
                if kind == "identity":
                    identity = DeviceIdentity.from_record(record)
                elif kind == "vault":
                    # Each policy change appends the vault's row again: the rows of one vault,
                    # in order, are its signed linear policy history (verified below).
                    vault_id = bytes(record["vault_id"])
                    policy = Policy.parse(record["policy"])
                    keys = {int(e["epoch"]): bytes(e["key"]) for e in record["epoch_keys"]}
                    earlier = vaults.get(vault_id)
                    history = [*earlier.history, policy] if earlier is not None else [policy]
                    discarded = earlier.discarded if earlier is not None else []
                    if "discarded" in record:
                        discarded = [Policy.parse(r) for r in record["discarded"]]
                    if "history" in record:
                        # A resolved permission fork (SY-3, engine/sync/forks.py) stores the
                        # kept history whole; the discarded branch still verifies old revisions.
                        history = [Policy.parse(r) for r in record["history"]]
                        kept = {p.head for p in history}
                        old = earlier.history if earlier is not None else []
                        discarded = [*discarded, *(p for p in old if p.head not in kept)]
                        earlier = None
                    if earlier is not None and earlier.policy.head == policy.head:
                        # The same policy stored again (its signature is outside the head):
                        # only a byte-identical copy is harmless.
                        if bytes(earlier.policy.signature) != bytes(policy.signature):
                            raise MemoriesError("store_corrupt", "A vault policy failed verification.")
                        history = earlier.history
                    vaults[vault_id] = VaultKeys(vault_id, str(record["name"]), policy, keys, history, discarded)
                    passed.clear()  # checked again against the vault as it is now
                    if record.get("default"):
                        default_vault = vault_id
                elif kind == "revision":
                    if identity is None:
                        raise MemoriesError("store_corrupt", "A revision precedes the device identity.")
                    rev = _written(written, record, seq) if written else None
                    if rev is None:
                        rev = Revision.from_record(record, seq)
                    self.check_revision(rev, identity, vaults, passed)
                    # Read back when needed (the signature check reads them in batches): at
                    # 100k notes they were ~85 MiB held from the unlock to the lock.
                    rev.stored(stored)
                    revisions.append(rev)
                elif kind == "audit":
                    audits.append(record)
                else:
                    extra.setdefault(str(kind), []).append((seq, record))
            audit_log = [bytes(record["signed"]) for record in audits]
            for vault in vaults.values():
                verify_chain(vault.history)
        except MemoriesError as exc:
            if exc.code == "store_corrupt":
                raise
            raise MemoriesError("store_corrupt", "A vault policy failed verification.") from exc
        except (SignatureError, KeyError, TypeError, ValueError) as exc:
            raise MemoriesError("store_corrupt", "A signed record failed verification.") from exc
        if identity is None or default_vault not in vaults:
            raise MemoriesError("store_corrupt", "The store has no identity or default vault.")
        index = AssetIndex()
        index.begin_bulk_load()
        for rev in revisions:
            index.apply(rev)
        index.hide(bytes(r[HIDE_FIELD]) for records in extra.values() for _, r in records if HIDE_FIELD in r)
        state = Unlocked(
            identity,
            vaults,
            default_vault,
            index,
            len(audits),
            extra,
            audit_log,
            deferred=loaded.deferred,
            sealed=loaded.sealed,
            stored=stored,
        )
        for record in audits:
            digest = hashlib.sha256(bytes(record["signed"])).digest()
            state.audit_sigs[digest] = bytes(record["sig"])
            state.audit_tip = digest
        return DecodedState(state, revisions, audits)

    @staticmethod
    def check_revision(
        rev: Revision, identity: DeviceIdentity, vaults: dict[bytes, VaultKeys], passed: set[tuple[Any, ...]] | None = None
    ) -> None:
        """Policy, device and certificate checks (the signature is verified in bulk).

        ``passed``: the (vault, policy head, author, epoch, certificate) of revisions that passed
        with these ``vaults``, which decide the outcome alone: a revision like one of them passes
        without the policy lookup, which hashes each policy of the history (issue 32: an unlock
        checks every revision, nearly all written under one policy by few devices)."""
        key = _check_key(rev) if passed is not None else None
        if passed is not None and key is not None and key in passed:
            return
        vault = vaults.get(rev.vault_id)
        if vault is None:
            raise SignatureError("revision of an unknown vault")
        # The policy the revision was written under must be in the vault's history and
        # authorize its author at that point, under that policy's epoch (PO-1, HI-2).
        policy = vault.policy_at(rev.policy_head)
        if policy is None or not policy.authorizes_device(rev.author):
            raise SignatureError("revision not authorized by the vault policy")
        if rev.epoch != policy.epoch:
            raise SignatureError("revision names another epoch than its policy")
        if rev.author == identity.device_pub and rev.cert != identity.certificate_hash:
            raise SignatureError("revision names a different device certificate")
        if passed is not None and key is not None:
            passed.add(key)

    # -- reading -------------------------------------------------------------------------
    def summary_of(self, state: Unlocked, rev: Revision, *, keep: bool = True) -> dict[str, Any]:
        """The revision's summary; ``keep`` False: not kept beside the revision (Revision.open_summary)."""
        vault = state.vaults[rev.vault_id]
        try:
            return rev.open_summary(vault.epoch_keys[rev.epoch], keep=keep)
        except (ChunkError, KeyError) as exc:
            raise MemoriesError("store_corrupt", "A revision summary failed authentication.") from exc

    def body_of(self, state: Unlocked, rev: Revision) -> str:
        """The signed body as stored. Clients are shown ``projections.visible_body`` instead."""
        if state.opened_bodies:
            opened = state.opened_bodies.pop(rev.rev_id, None)
            if opened is not None:
                return opened
        store = self.require_store()
        vault = state.vaults[rev.vault_id]
        try:
            plain = rev.open_body(vault.epoch_keys[rev.epoch], store.read_content(rev.body_seqs))
        except (ChunkError, KeyError) as exc:
            raise MemoriesError("store_corrupt", "A revision body failed authentication.") from exc
        return plain.decode("utf-8")

    def _remember_content_key(self, state: Unlocked, entry: AssetEntry) -> None:
        if state.index.content_keys is None or state.index.is_deleted(entry):
            return
        for rev in state.index.head_revisions(entry):
            key = self.summary_of(state, rev).get("content_key")
            if isinstance(key, str):
                state.index.content_keys[key] = entry.asset_id

    def _content_keys(self, state: Unlocked) -> dict[str, bytes]:
        if state.index.content_keys is None:
            state.index.content_keys = {}
            for entry in state.index.assets.values():
                self._remember_content_key(state, entry)
        return state.index.content_keys

    def has_content(self, state: Unlocked, key: str) -> bool:
        """Is there a current asset whose head has exactly this content key?"""
        asset_id = self._content_keys(state).get(key)
        entry = state.index.assets.get(asset_id) if asset_id else None
        if entry is None or state.index.is_deleted(entry):
            return False
        return any(self.summary_of(state, r).get("content_key") == key for r in state.index.head_revisions(entry))

    # -- building ------------------------------------------------------------------------
    def new_revision(
        self,
        state: Unlocked,
        *,
        asset_id: bytes,
        kind: str,
        parents: list[bytes],
        summary: dict[str, Any],
        body: str,
        tombstone: bool = False,
        reserved: list[int] | None = None,
        vault: VaultKeys | None = None,
        unsigned: bool = False,
    ) -> tuple[Revision, list[tuple[int, bytes]]]:
        """Encrypt and sign a revision; no write. ``unsigned``: the caller signs it with others
        (engine.vault.revision.sign_revisions) before it commits them.

        The vault is ``vault``, else the vault the asset already lives in, else the default
        vault. Roles decide writes here, in this one place (PO-2): only an Owner, Admin or
        Editor of the vault's current policy, on a device that policy authorizes, may write.
        """
        from engine.vault.revision import chunk_count

        vault = self.writable_vault(state, asset_id, vault)
        store = self.require_store()
        if not tombstone:
            for guard in self.revision_guards:
                summary, body = guard(self, state, asset_id, summary, body)
        data = body.encode("utf-8")
        seqs = reserved if reserved is not None else store.reserve_content(chunk_count(len(data)))
        built = build_revision(
            identity=state.identity,
            vault_id=vault.vault_id,
            policy_head=vault.policy.head,
            epoch=vault.policy.epoch,
            epoch_key=vault.current_key,
            asset_id=asset_id,
            kind=kind,
            parents=parents,
            tombstone=tombstone,
            summary=summary,
            body=data,
            content_seqs=seqs,
            unsigned=unsigned,
            compress=kind in COMPRESSED_BODY_KINDS,
        )
        return built.revision, built.content_rows

    @staticmethod
    def writable_vault(state: Unlocked, asset_id: bytes, vault: VaultKeys | None) -> VaultKeys:
        """The vault a new revision of ``asset_id`` goes to, if this user may write there."""
        existing = state.index.assets.get(asset_id)
        if vault is None:
            vault = state.vaults[existing.vault_id] if existing is not None else state.vault
        elif existing is not None and existing.vault_id != vault.vault_id:
            raise MemoriesError("invalid_input", "That item belongs to another vault; its revisions stay there.")
        role = vault.policy.role_of(state.identity.user_pub)
        if role == "reader":
            raise MemoriesError("read_only", f"You are a Reader of vault {vault.name!r}; readers cannot write.")
        if role is None:
            raise MemoriesError("read_only", f"You are not a member of vault {vault.name!r}; you cannot write there.")
        if not vault.policy.authorizes_device(state.identity.device_pub):
            raise MemoriesError("read_only", f"This device is not authorized in vault {vault.name!r}; it cannot write there.")
        return vault

    def audit_record(self, state: Unlocked, op: str, actor: Actor, **fields: Any) -> dict[str, Any]:
        """An encrypted, signed audit entry. It records ops and asset IDs, never content.

        ``prev`` is the SHA-256 of this device's previous committed entry (absent on its
        first entry and on entries written before sync existed): a per-device hash chain.
        """
        chain = {} if state.audit_tip is None else {"prev": state.audit_tip}
        entry = {
            "v": 1,
            "op": op,
            "caller": actor.namespace,
            "surface": actor.surface,
            # The program's self-given name ("dashboard"): shown as who acted, never authority.
            **({"client": actor.client} if actor.client else {}),
            "ts_ms": int(time.time() * 1000),
            "nonce": os.urandom(8),
            **fields,
            **chain,
        }
        signed = domain_bytes(AUDIT_TAG, 1, entry)
        return {"t": "audit", "signed": signed, "sig": sign(state.identity.device_key, signed)}

    # -- committing ----------------------------------------------------------------------
    def commit(
        self,
        state: Unlocked,
        revisions: list[Revision],
        content_rows: list[tuple[int, bytes]],
        extra_records: Records,
        *,
        essential: bool = False,
        lead: Records | None = None,
    ) -> None:
        """Persist in one transaction, then (only then) update memory (ST-5).

        ``essential``: a read's intent, which may use the store's reserve on a full disk.
        ``lead`` records are stored before the revisions (a vault that arrives by sync with its
        first revisions: unlock reads a vault's row before any revision of it).
        """
        store = self.require_store()
        if lead:
            extra_records = [*lead, *extra_records]
            records = [*lead, *(rev.to_record() for rev in revisions), *extra_records[len(lead) :]]
        else:
            records = [rev.to_record() for rev in revisions] + extra_records
        seqs = store.commit(records, content_rows, essential=essential)
        if lead:  # the same seqs in the order the code below reads them: revisions, then records
            seqs = [*seqs[len(lead) : len(lead) + len(revisions)], *seqs[: len(lead)], *seqs[len(lead) + len(revisions) :]]
        for listener in self.durable:
            listener(revisions, extra_records)
        for rev, seq in zip(revisions, seqs, strict=False):
            rev.seq = seq
            state.index.apply(rev)
            self._remember_content_key(state, state.index.assets[rev.asset_id])
        state.audit_entries += sum(1 for r in extra_records if r.get("t") == "audit")
        for record in extra_records:
            if record.get("t") == "audit":
                digest = hashlib.sha256(bytes(record["signed"])).digest()
                state.audit_sigs[digest] = bytes(record["sig"])
                state.audit_tip = digest
        for record, seq in zip(extra_records, seqs[len(revisions) :], strict=True):
            kind = str(record.get("t"))
            if kind != "audit":
                state.extra_records.setdefault(kind, []).append((seq, record))
        state.index.hide(bytes(r[HIDE_FIELD]) for r in extra_records if HIDE_FIELD in r)
        for committed in self.committed:
            committed(state, revisions, extra_records)
        if state.stored is not None:
            # After the hooks (the search index reads each new body once): from here on read back.
            for rev in revisions:
                rev.stored(state.stored)

    def change_policy(
        self, state: Unlocked, vault_id: bytes, change: Change, actor: Actor, *, extra_records: Records | None = None
    ) -> VaultKeys:
        """Sign the next policy of one vault and commit it; see :meth:`change_policies`."""
        return self.change_policies(state, [(vault_id, change)], actor, extra_records=extra_records)[0]

    def change_policies(
        self,
        state: Unlocked,
        changes: list[tuple[bytes, Change]],
        actor: Actor,
        *,
        extra_records: Records | None = None,
    ) -> list[VaultKeys]:
        """Sign the next policy of each named vault with this user's key; commit them all at once.

        The role rules are checked against each vault's previous policy by ``propose`` before
        anything is written (PO-1, PO-2). A change that removes a member or revokes a device
        starts a new epoch with a fresh random vault key: whatever is written afterwards is
        sealed under a key the removed party never held. Older epoch keys are kept (history
        stays readable here). Everything — every vault's new row, ``extra_records`` (e.g. a
        consumed join request, ID-3) and the audit entry — is one transaction: a crash leaves
        all vaults before or all after.
        """
        certificates = [(state.identity.certificate, state.identity.certificate_sig)]
        updated: list[VaultKeys] = []
        # Several changes of one vault are consecutive policies (an invited member and their
        # devices, PO-3): each is proposed on the one before it, and each is stored as a row.
        working: dict[bytes, VaultKeys] = {}
        for vault_id, change in changes:
            vault = working.get(vault_id) or state.vaults.get(vault_id)
            if vault is None:
                raise MemoriesError("not_found", "No vault has that name.")
            policy = propose(
                vault.policy,
                state.identity.user_key,
                change,
                certificates=certificates,
                accepted=_accepted_heads(state, vault, change),
            )
            keys = dict(vault.epoch_keys)
            if policy.epoch != vault.policy.epoch:
                keys[policy.epoch] = os.urandom(32)
            step = VaultKeys(vault.vault_id, vault.name, policy, keys, [*vault.history, policy], vault.discarded)
            working[vault_id] = step
            updated.append(step)
        audit = self.audit_record(
            state,
            "policy_change",
            actor,
            outcome="ok",
            changes=[type(change).__name__ for _, change in changes],
            vaults=list(dict.fromkeys(vault.vault_id for vault in updated)),
        )
        rows = [vault.record(default=vault.vault_id == state.default_vault) for vault in updated]
        self.commit(state, [], [], [*rows, *(extra_records or []), audit])
        for vault in working.values():  # only once the new policies are durable (ST-5)
            state.vaults[vault.vault_id] = vault
        return updated

    def commit_intent(self, state: Unlocked, op: str, actor: Actor, assets: list[bytes]) -> None:
        """Read/execution intents are committed before delivery: a disk failure blocks it."""
        # Essential: reads keep working on a full disk (FI-2, engine/store/room.py).
        self.commit(state, [], [], [self.audit_record(state, op, actor, phase="intent", assets=assets)], essential=True)
