"""What a backup holds (BK-1) and how it is written from an unlocked vault.

In: every vault this device shares (policy history, discarded branches, every epoch key: the
recovery material), every revision of those vaults with its sealed content chunks (signed, as
stored), and the card-link events of those vaults. Out: the device's private keys (a restore
makes new ones), device-only vaults and everything in them, MCP grants, sync and cloud tokens,
receipts, watermarks, quarantine (and the revisions it hides) and any other device bookkeeping:
only the kinds named here are ever copied (an allowlist), so a feature added later stays out
until it is listed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from engine.backup.envelope import BackupWriter
from engine.cards.device_vaults import device_only_vaults
from engine.cards.links import LINK_RECORD
from engine.crypto.kdf import KdfParams
from engine.crypto.keys import sign
from engine.vault.core import Unlocked
from engine.vault.revision import Revision, holding

__all__ = ["write_backup", "BackupCounts"]

Progress = Callable[[int, int], None]
BackupCounts = dict[str, int]


def write_backup(
    out: IO[bytes],
    password: str,
    kdf: KdfParams,
    state: Unlocked,
    read_content: Callable[[list[int]], list[bytes]],
    progress: Progress | None = None,
) -> BackupCounts:
    """Stream the backup of ``state`` into ``out``; returns counts for the caller to report."""
    writer = BackupWriter(out, password, kdf)
    excluded = device_only_vaults(state)
    included = [v for v in state.vaults.values() if v.vault_id not in excluded]
    ids = {v.vault_id for v in included}
    for vault in included:
        writer.add(
            {
                "t": "vault",
                "vault_id": vault.vault_id,
                "name": vault.name,
                "default": vault.vault_id == state.default_vault,
                "history": [p.to_record() for p in vault.history],
                "discarded": [p.to_record() for p in vault.discarded],
                "epoch_keys": [{"epoch": e, "key": k} for e, k in sorted(vault.epoch_keys.items())],
            }
        )
    links = 0
    for _seq, record in state.extra_records.get(LINK_RECORD, []):
        if bytes(record.get("vault", b"")) in ids:
            writer.add({"t": "link", "record": record})
            links += 1
    heads = {h for entry in state.index.assets.values() if entry.vault_id in ids for h in entry.heads}
    # Insertion order of the index is load/commit order: every parent comes before its children.
    # Revisions quarantine hides (SY-2: own offline writes a newer policy no longer allowed, with
    # everything built on them) stay out, like the quarantine records that hold them for review:
    # they are no head, so a restore that rebuilt heads from them refused the whole file.
    revisions: list[Revision] = state.index.shown_revisions(ids)
    total = len(revisions)
    for done, rev in enumerate(holding(revisions), 1):  # signed bytes read back in batches (issue 32)
        signed, sig = rev.signed_pair()
        writer.add({"t": "revision", "signed": signed, "sig": sig, "n": len(rev.body_seqs), "head": rev.rev_id in heads})
        for seq in rev.body_seqs:
            writer.add({"t": "content", "data": read_content([seq])[0]})
        if progress is not None and (done % 200 == 0 or done == total):
            progress(done, total)
    identity = state.identity

    def signer(message: bytes) -> tuple[bytes, dict[str, Any]]:
        return sign(identity.device_key, message), {
            "device": identity.device_pub,
            "certificate": identity.certificate,
            "certificate_sig": identity.certificate_sig,
        }

    items = writer.finish(signer)
    return {"vaults": len(included), "revisions": total, "links": links, "items": items, "bytes": writer.bytes_written}
