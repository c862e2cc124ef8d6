"""Append-only pack files beside the store for the sealed chunks of large files (issue 32).

A file's chunks used to be SQLite rows: each byte was written to the write-ahead log, copied
from it into the database file by a checkpoint and synced twice, which cost the engine more CPU
than sealing the bytes (bench/files.py: SQLite's log write and checkpoint ~2.9 ms per MiB,
sealing ~1.1) and the disk three times the file. Now one upload appends its sealed chunks to a
pack file of its own, ``store.db-packs/<first content row, 16 hex digits>.pack``, and the store
keeps for each chunk only where it lies (``content_packed``: row number, pack, offset, length;
engine/store/database.py). The bytes are the same sealed chunks as before, checked by their
readers against the revision's signed digests (HI-2), so a pack file needs no integrity of
its own: a changed, cut or swapped byte fails that check like a changed row did.

One pack per upload: an aborted or orphaned upload is removed by deleting its file, and a
committed file's chunks are never rewritten (a file's history keeps them), so nothing needs
compacting. A pack holds ciphertext only (SECURITY.md says what its sizes reveal).

Writes bypass the page cache (``O_DIRECT`` where the filesystem has it): a batch's sealed chunks
go from the upload's reused buffer to the disk, each batch at a multiple of ``ALIGN`` and padded
with zeros to one. Through the page cache each written MiB cost a copy into freshly allocated
cache pages (on this project's VMs ~3 ms of CPU per MiB, more than sealing it) and the final
fsync waited for all of it; the bytes read back are the same either way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.errors import MemoriesError

__all__ = ["ALIGN", "PACKED_ROW_MIN", "PACK_MIN_BYTES", "PackDir", "PackWriter", "aligned", "is_pack_name", "packs_path"]

_NAME = re.compile(r"^([0-9a-f]{16})\.pack$")
# A sealed chunk is at most 256 KiB and its nonce and tag; a place claiming more was changed, and
# is refused before anything that large is read.
MAX_CHUNK = 256 * 1024 + 64
# Offsets and lengths of direct writes (a page: a multiple of any disk's logical block).
ALIGN = 4096
# A file from this size on is packed when uploaded (engine/files/stream.py); chunks that arrive
# whole in one commit (sync, cloud sync, restore) are packed once they add up to as much.
PACK_MIN_BYTES = 1024 * 1024
# Such a commit's rows from this size on are the chunks of large files (a full one is 256 KiB
# sealed); a note's body, a card or a file's short last chunk stays a row of its own.
PACKED_ROW_MIN = 64 * 1024
# How much of a commit's chunks is copied into page-aligned memory before it is written.
_COMMIT_BUFFER = 8 * 1024 * 1024


def aligned(size: int) -> int:
    """``size`` rounded up to a multiple of ``ALIGN``."""
    return -(-size // ALIGN) * ALIGN


def packs_path(store: Path) -> Path:
    """The folder of ``store``'s pack files (beside it, like its log and reserve)."""
    return store.with_name(store.name + "-packs")


def is_pack_name(name: str) -> bool:
    """Whether ``name`` is a pack file's name (anything else in the folder is not ours)."""
    return _NAME.match(name) is not None


def _name(pack: int) -> str:
    return f"{pack:016x}.pack"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(target: Path) -> int:
    """A new file, written directly to the disk where the filesystem allows it (tmpfs does not)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(target, flags | direct, 0o600)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            with contextlib.suppress(FileNotFoundError):
                target.unlink()  # some filesystems create the file before refusing the flag
    return os.open(target, flags, 0o600)


def _buffered(fd: int) -> bool:
    """Turn off ``O_DIRECT`` on ``fd``; whether it was on (then the write is worth trying again)."""
    direct = getattr(os, "O_DIRECT", 0)
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if not direct or not flags & direct:
        return False
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~direct)
    return True


class PackWriter:
    """One pack file being appended to by one upload (its writer stage: one thread)."""

    def __init__(self, folder: PackDir, pack: int, fd: int) -> None:
        self.folder = folder
        self.pack = pack
        self._fd: int | None = fd
        self.size = 0

    def append(self, batch: memoryview) -> int:
        """Write ``batch`` (page-aligned memory, a multiple of ``ALIGN`` long) after what is there;
        its offset in the pack. OSError as the system gives it (the caller types it)."""
        if self._fd is None:
            raise MemoriesError("io_error", "The file could not be written; nothing was changed.")
        if len(batch) % ALIGN:
            raise ValueError("a pack batch is a multiple of ALIGN long")
        start = self.size
        written = 0
        while written < len(batch):  # a short write is resumed where it stopped (a nearly full disk)
            try:
                n = os.pwrite(self._fd, batch[written:], start + written)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not _buffered(self._fd):
                    raise
                continue  # a filesystem that took O_DIRECT at open but not this write: through the cache
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            written += n
        self.size = start + len(batch)
        return start

    def sync(self) -> None:
        """Make the appended bytes durable (before the commit that names them)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self.folder.writing_ended(self.pack)


def _append_all(writer: PackWriter, blobs: Sequence[bytes]) -> list[tuple[int, int]]:
    """Append ``blobs`` through one reused page-aligned buffer; each one's (offset, length).
    A blob never straddles two writes: each write is padded to ``ALIGN``, so the next starts
    on a page (at most a page of zeros per 8 MiB)."""
    places: list[tuple[int, int]] = []
    with mmap.mmap(-1, _COMMIT_BUFFER) as buffer:
        filled = 0
        pending: list[tuple[int, int]] = []  # (offset in buffer, length) of what the buffer holds

        def flush() -> None:
            nonlocal filled
            if not pending:
                return
            with memoryview(buffer) as view, view[: aligned(filled)] as batch:
                buffer[filled : aligned(filled)] = bytes(aligned(filled) - filled)
                start = writer.append(batch)
            places.extend((start + at, size) for at, size in pending)
            pending.clear()
            filled = 0

        for blob in blobs:
            if len(blob) > MAX_CHUNK:
                raise ValueError("a packed chunk is at most MAX_CHUNK long")
            if filled + len(blob) > _COMMIT_BUFFER:
                flush()
            buffer[filled : filled + len(blob)] = blob
            pending.append((filled, len(blob)))
            filled += len(blob)
        flush()
    return places


class PackDir:
    """The pack files of one store: created, read and removed here, never changed in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._writing: set[int] = set()  # packs an upload holds open: never swept

    def create(self, pack: int) -> PackWriter:
        """A new, empty pack file ``pack`` (0600, in a 0700 folder), its name made durable.

        A file of that name can only be a leftover no row names (a crash before its first rows,
        or a store made again beside an old folder: pack numbers are content row numbers not yet
        used), so it is replaced."""
        writer = self._create(pack, replace=True)
        assert writer is not None  # replace: a name in use is taken over, never refused
        return writer

    def _create(self, pack: int, *, replace: bool) -> PackWriter | None:
        """:meth:`create`; without ``replace``, None if the name is taken or being written
        (checked and claimed under one lock, so two writers never share a name)."""
        with self._lock:
            if not replace and pack in self._writing:
                return None
            self._writing.add(pack)
        try:
            made = not self.path.is_dir()
            self.path.mkdir(mode=0o700, exist_ok=True)
            if made:
                _fsync_dir(self.path.parent)
            target = self.path / _name(pack)
            if replace:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
            try:
                fd = _create(target)  # O_EXCL: never opens a file that is there
            except FileExistsError:
                if replace:
                    raise
                self.writing_ended(pack)
                return None
            _fsync_dir(self.path)
        except BaseException:
            self.writing_ended(pack)
            raise
        return PackWriter(self, pack, fd)

    def write_whole(self, pack: int, blobs: Sequence[bytes]) -> list[tuple[int, int]] | None:
        """A new pack ``pack`` holding ``blobs`` (a commit's chunks), synced; each one's (offset,
        length). None, and nothing written, if a pack of that name exists or is being written:
        the caller keeps the blobs as rows (a leftover from a crash is for the unlock's sweep,
        and an upload's pack is never replaced under it). OSError as the system gives it, with
        the file removed."""
        writer = self._create(pack, replace=False)
        if writer is None:
            return None
        try:
            places = _append_all(writer, blobs)
            writer.sync()
        except BaseException:
            writer.close()
            self.remove([pack])
            raise
        writer.close()
        return places

    def writing_ended(self, pack: int) -> None:
        with self._lock:
            self._writing.discard(pack)

    def read(self, places: Sequence[tuple[int, int, int]]) -> list[bytes]:
        """The bytes at each (pack, offset, length); store_corrupt if a pack is missing or short."""
        out: list[bytes] = []
        fds: dict[int, int] = {}
        try:
            for pack, offset, length in places:
                if not (0 <= pack < 1 << 63 and 0 <= offset < 1 << 62 and 0 <= length <= MAX_CHUNK):
                    raise MemoriesError("store_corrupt", "A content chunk is missing.")  # a changed place
                fd = fds.get(pack)
                if fd is None:
                    try:
                        fd = fds[pack] = os.open(self.path / _name(pack), os.O_RDONLY | os.O_CLOEXEC)
                    except FileNotFoundError:
                        raise MemoriesError("store_corrupt", "A content chunk is missing.") from None
                blob = os.pread(fd, length, offset)
                if len(blob) != length:
                    raise MemoriesError("store_corrupt", "A content chunk is missing.")
                out.append(blob)
        except OSError as exc:
            raise MemoriesError("store_corrupt", "A content chunk could not be read.") from exc
        finally:
            for fd in fds.values():
                os.close(fd)
        return out

    def remove(self, packs: Sequence[int]) -> None:
        """Delete these packs' files (their rows are gone; best effort, a sweep retries)."""
        for pack in packs:
            with contextlib.suppress(FileNotFoundError):
                (self.path / _name(pack)).unlink()

    def on_disk(self) -> list[int]:
        """The pack numbers whose files exist."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1), 16) for name in names if (m := _NAME.match(name)))

    def sweep(self, named: Callable[[], set[int]]) -> int:
        """Remove pack files that no row names and no upload is writing; how many.

        ``named`` (the packs rows name) is asked after the files are listed, under the lock an
        upload takes to start a pack: a pack listed here was either still being written then or
        had its rows in the store already, so a live upload's pack is never taken."""
        with self._lock:
            listed = self.on_disk()
            if not listed:
                return 0
            keep = named() | self._writing
            stale = [pack for pack in listed if pack not in keep]
            self.remove(stale)
        return len(stale)
