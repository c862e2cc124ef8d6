"""WAL checkpoints on a thread of their own, off the path of commits and file uploads (issue 16).

In WAL mode SQLite appends each commit's pages to the write-ahead log and, by default, the
commit that takes the log past 1,000 pages copies the log back into the database file and
syncs both before it returns (an automatic checkpoint). For a file upload, whose every 8 MiB
batch crosses that mark, this was two thirds of the writer stage's time: the copy and two
fsyncs per batch, while the sealer and the CLI waited for it.

Here the store's connection checkpoints automatically only as a backstop (``BACKSTOP_PAGES``,
when this thread has fallen far behind), and each commit tells :meth:`WalCheckpointer.wrote`
about the bytes it appended; once that adds up to ``THRESHOLD_BYTES`` this thread runs a
PASSIVE checkpoint on a connection of its own. A PASSIVE checkpoint takes no lock that a writer or reader waits
for: it copies the frames committed so far while the next batch is sealed and appended, and
the writer rewinds the log at its next commit once all of it was copied. The store holds
only ciphertext, so the log holds nothing the database file would not.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

__all__ = ["WalCheckpointer", "THRESHOLD_BYTES", "BACKSTOP_PAGES", "JOURNAL_SIZE_LIMIT"]

log = logging.getLogger("memories.store")

# SQLite's own automatic checkpoint starts at 1,000 pages (~4 MiB): the same mark here.
THRESHOLD_BYTES = 4 * 1024 * 1024
# The store connection's own automatic checkpoint, for when this thread cannot keep up.
BACKSTOP_PAGES = 64 * 1024  # 256 MiB of 4 KiB pages
# After a large upload the rewound log is truncated to this on its next reset.
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


class WalCheckpointer:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._unchecked = 0  # bytes appended to the log since the last checkpoint began
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self.checkpoints = 0  # how many this thread ran (status and tests)
        self._thread = threading.Thread(target=self._run, name="memories-checkpoint", daemon=True)
        self._thread.start()

    def wrote(self, size: int) -> None:
        """A commit appended about ``size`` bytes to the log (its rows; pages add a little)."""
        with self._lock:
            self._unchecked += size
            if self._unchecked < THRESHOLD_BYTES:
                return
            self._unchecked = 0
        self._idle.clear()
        self._wake.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every checkpoint asked for so far has run (tests)."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                        conn.execute("PRAGMA synchronous=FULL")  # the copy is synced like the commits
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                except sqlite3.Error as exc:
                    # A full disk or a lock: the next threshold retries, and the store
                    # connection's backstop checkpoints if this keeps failing.
                    log.warning("a background WAL checkpoint failed type=%s", type(exc).__name__)
                if not self._wake.is_set():
                    self._idle.set()
        finally:
            if conn is not None:
                conn.close()
            self._idle.set()
