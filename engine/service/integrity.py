"""Signature re-verification of the loaded state, off the unlock's critical path.

Why unlock does not wait for it: every state row is XChaCha20-Poly1305 ciphertext under the
master key, bound to its sequence number, and the sealed checkpoint's hash chain covers the
rows in order (ST-1, ST-5). A row can therefore only exist if this device sealed it, and the
device seals a revision only after signing it (or, for a revision from elsewhere, after
verifying it). Re-checking 10k Ed25519 signatures at every unlock proves nothing the AEAD
has not already proved to anyone without the master key, and it was a third of the time to
a searchable vault (issue 3's "first search ≤ 2 s beyond the KDF").

So the check still runs on every unlock, as defence in depth against a bug in our own
writer, but in the background. If any signature fails, the vault locks at once and this
process remembers it: the next unlock verifies synchronously and refuses with
``store_corrupt`` while the bad record is still there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from engine.crypto.keys import DeviceIdentity, SignatureError, verify
from engine.errors import MemoriesError
from engine.jobs.background import BackgroundWork, JobContext, JobHandle
from engine.vault.core import AUDIT_TAG
from engine.vault.revision import Revision, holding

__all__ = ["AUDIT_TAG", "verify_all", "verify_audit", "BackgroundVerifier", "UnlockWork"]

log = logging.getLogger("memories.engine")
# How long the check waits for the unlock's foreground work before it runs regardless.
YIELD_SECONDS = 30.0


def verify_audit(record: dict[str, Any], identity: DeviceIdentity) -> None:
    """An audit entry is signed by this device over its exact signed bytes."""
    signed = record["signed"]
    if not signed.startswith(AUDIT_TAG.encode("ascii") + b"\x00\x01"):
        raise SignatureError("not a version-1 audit entry")
    verify(identity.device_pub, signed, record["sig"])


def verify_all(identity: DeviceIdentity, revisions: Sequence[Revision], audits: Sequence[dict[str, Any]]) -> None:
    """Raise SignatureError (or KeyError/TypeError on a malformed record) at the first bad signature."""
    for rev in holding(revisions):  # stored revisions' bytes read back in batches (issue 32)
        rev.verify_signature()
    for record in audits:
        verify_audit(record, identity)


class UnlockWork:
    """Counts the work an unlock starts that a user waits for (the search index build).

    The signature check yields to it: on two cores both would otherwise share the GIL and
    the build, which decides when searches are complete, would take longer.
    """

    def __init__(self) -> None:
        self._running = 0
        self._changed = threading.Condition()

    def begin(self) -> None:
        with self._changed:
            self._running += 1

    def end(self) -> None:
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._running <= 0, timeout)


class BackgroundVerifier:
    """Runs ``verify_all`` as a background job per unlock and calls ``on_failure`` if anything is wrong."""

    def __init__(self, work: BackgroundWork) -> None:
        self.work = work
        self.failed = False  # sticky for this process: the next unlock verifies before answering
        self.handle: JobHandle | None = None

    @property
    def done(self) -> threading.Event:
        """Set once the latest check has ended (or when none ran)."""
        if self.handle is None:
            idle = threading.Event()
            idle.set()
            return idle
        return self.handle.finished

    def start(
        self,
        identity: DeviceIdentity,
        revisions: Sequence[Revision],
        audits: Sequence[dict[str, Any]],
        *,
        still_current: Callable[[], bool],
        on_failure: Callable[[], None],
        after: UnlockWork | None = None,
    ) -> None:
        def run(context: JobContext) -> None:
            if after is not None:
                after.wait_idle(YIELD_SECONDS)
            total = len(revisions) + len(audits)
            context.progress(0, total)
            try:
                # Batches let a lock (or a newer unlock) stop the work early.
                for start in range(0, max(len(revisions), 1), 512):
                    if context.cancelled.is_set() or not still_current():
                        return
                    verify_all(identity, revisions[start : start + 512], audits if start == 0 else ())
                    context.progress(min(start + 512, len(revisions)) + len(audits), total)
            except (SignatureError, KeyError, TypeError, ValueError) as exc:
                self.failed = True
                log.error("integrity: a stored signature failed verification (%s); locking", type(exc).__name__)
                on_failure()
                raise MemoriesError("store_corrupt", "A signed record failed verification.") from None

        self.handle = self.work.start("verify", run)
