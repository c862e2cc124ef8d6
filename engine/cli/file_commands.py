"""file add|edit|get|list|history|exec: files in the vault, streamed in 256 KiB chunks (FI-1, JB-4)."""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from engine.cli.context import Context, UsageError
from engine.cli.sizes import size_text
from engine.errors import MemoriesError
from engine.terminal_text import one_line

__all__ = ["register", "upload", "download"]

CHUNK_BYTES = 256 * 1024  # engine/crypto/chunks.py CHUNK_BYTES (the CLI does not import crypto)
# Generous per-request deadline: a request moves at most 2 MiB.
_REQUEST_TIMEOUT = 120.0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("file", parents=[common], help="store files in the vault and get them back")
    fsub = p.add_subparsers(dest="file_command", metavar="ACTION", required=True)

    a = fsub.add_parser("add", parents=[common], help="encrypt a file into the vault (any size, streamed)")
    a.add_argument("path", metavar="PATH", help="the file to add")
    a.add_argument("--title", help="its title (default: the file name)")
    a.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    a.add_argument("--vault", help="the vault to add it to (default: the default vault)")
    a.add_argument("--update", metavar="ID", help="save PATH as a new revision of this file instead of a new file")
    a.add_argument(
        "--searchable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let `memories search` find words in the file's text (its first 64 KiB); off by default: "
        "a file is found by its title and tags only. --update keeps the file's setting unless given",
    )
    a.set_defaults(func=cmd_add)

    e = fsub.add_parser(
        "edit",
        parents=[common],
        help="change a file's title, tags or whether its text is searched (the bytes stay)",
    )
    e.add_argument("id", metavar="ID", help="the file's ID or short ID")
    e.add_argument("--title", help="its new title")
    e.add_argument("--tag", action="append", help="set the tags to exactly these (repeatable)")
    e.add_argument(
        "--searchable",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether `memories search` finds words in the file's text (its first 64 KiB)",
    )
    e.set_defaults(func=cmd_edit)

    g = fsub.add_parser("get", parents=[common], help="decrypt a file from the vault")
    g.add_argument("id", metavar="ID", help="the file's ID or short ID")
    g.add_argument("--output", "-o", metavar="PATH", help="where to write it (default: stdout when it is not a terminal)")
    g.add_argument("--rev", help="an older revision (see `memories file history ID`)")
    g.add_argument("--force", action="store_true", help="replace PATH if it exists")
    g.set_defaults(func=cmd_get)

    ls = fsub.add_parser("list", parents=[common], help="list the files in a vault")
    ls.add_argument("--vault", help="the vault to list (default: the default vault)")
    ls.add_argument("--tag", help="only files with this tag")
    ls.set_defaults(func=cmd_list)

    h = fsub.add_parser("history", parents=[common], help="the revisions of a file")
    h.add_argument("id", metavar="ID", help="the file's ID or short ID")
    h.set_defaults(func=cmd_history)

    x = fsub.add_parser("exec", parents=[common], help="run a program on a private temporary copy of a file")
    x.add_argument("id", metavar="ID", help="the file's ID or short ID")
    x.add_argument("--rev", help="an older revision")
    x.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the program; {file} is replaced by the copy's path"
    )
    x.set_defaults(func=cmd_exec)


# -- progress on a terminal ----------------------------------------------------------------
class _Progress:
    def __init__(self, ctx: Context, verb: str, total: int) -> None:
        self.on = not ctx.json_output and sys.stderr.isatty()
        self.verb, self.total, self.shown = verb, total, -1

    def update(self, done: int) -> None:
        if not self.on:
            return
        percent = 100 if self.total == 0 else done * 100 // self.total
        if percent != self.shown:
            self.shown = percent
            sys.stderr.write(f"\r{self.verb} {done / 1048576:,.1f} of {self.total / 1048576:,.1f} MiB ({percent}%)")
            sys.stderr.flush()

    def done(self) -> None:
        if self.on:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


# -- upload ----------------------------------------------------------------------------------
def upload(
    ctx: Context,
    source: BinaryIO,
    size: int,
    begin: dict[str, Any],
    unchanged: Callable[[], None] | None = None,
    identity: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Send ``size`` bytes of ``source`` as a file revision; memory stays a few chunks.

    ``unchanged`` runs once every byte was read, before the engine is asked to commit: it
    raises if the source changed meanwhile (FI-2), and the upload is aborted.

    With ``identity`` (of ``source``, a regular file) the engine is offered the file itself: an
    engine on this machine that can open it reads it (engine/files/source.py) and no byte
    travels over the socket; otherwise the bytes are sent.
    """
    started = None
    if identity is not None and sys.platform.startswith("linux"):
        try:
            started = ctx.request({"op": "file_begin", "size": size, **begin, "fd": source.fileno(), "identity": list(identity)})
        except MemoriesError as exc:
            if exc.code != "unknown_field":
                raise
            # An engine started before this `memories` was installed: it takes the bytes.
    if started is None:
        started = ctx.request({"op": "file_begin", "size": size, **begin})
    handle = started["upload"]
    if started.get("pull") is True:
        return _pulled(ctx, handle, size, int(started["chunks"]), int(started["per_pull"]), unchanged)
    # An engine that takes chunks as the frame's binary part says how many per request.
    binary = "per_binary" in started
    per = int(started["per_binary"] if binary else started["per_request"])
    hasher = hashlib.sha256()
    progress = _Progress(ctx, "adding", size)
    sent = index = 0

    def read_block() -> bytes:
        block = source.read(CHUNK_BYTES * per)
        hasher.update(block)
        return block

    # The next block is read and hashed on a second thread while this one travels and the
    # engine works on it (file reads and hashlib release the GIL); one block ahead at most.
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memories-read")
    ahead = reader.submit(read_block)
    try:
        while True:
            block = ahead.result()
            if len(block) == CHUNK_BYTES * per:
                ahead = reader.submit(read_block)
            sizes = [min(CHUNK_BYTES, len(block) - i) for i in range(0, len(block), CHUNK_BYTES)]
            if index == 0 and not sizes:
                sizes = [0]  # an empty file is one empty chunk
            if not sizes:
                break
            if sent + len(block) > size:
                raise MemoriesError("file_changed", "The file grew while it was read; nothing was saved.")
            chunk: dict[str, Any] = {"op": "file_chunk", "upload": handle, "index": index}
            if binary:  # the block itself is the frame's binary part: no copy, no base64
                chunk.update(sizes=sizes, payload=block)
            else:
                chunk["data"] = [
                    base64.b64encode(block[i : i + CHUNK_BYTES]).decode("ascii") for i in range(0, len(block) or 1, CHUNK_BYTES)
                ]
            ctx.request(chunk, timeout=_REQUEST_TIMEOUT)
            index += len(sizes)
            sent += len(block)
            progress.update(sent)
            if len(block) < CHUNK_BYTES * per:
                break
        if sent != size:
            raise MemoriesError("file_changed", "The file shrank while it was read; nothing was saved.")
        if unchanged is not None:
            unchanged()
        result = ctx.request({"op": "file_commit", "upload": handle, "sha256": hasher.hexdigest()}, timeout=_REQUEST_TIMEOUT)
    except BaseException:
        with contextlib.suppress(MemoriesError, OSError):
            ctx.request({"op": "file_abort", "upload": handle}, timeout=10)
        raise
    finally:
        reader.shutdown(wait=True, cancel_futures=True)
        progress.done()
    return result


def _pulled(ctx: Context, handle: str, size: int, chunks: int, per: int, unchanged: Callable[[], None] | None) -> dict[str, Any]:
    """An upload the engine reads from our open file: ask for the chunks in batches (each
    answer comes when the engine has room for the next), then commit."""
    progress = _Progress(ctx, "adding", size)
    try:
        for index in range(0, chunks, per):
            ctx.request(
                {"op": "file_pull", "upload": handle, "index": index, "count": min(per, chunks - index)}, timeout=_REQUEST_TIMEOUT
            )
            progress.update(min(size, (index + per) * CHUNK_BYTES))
        if unchanged is not None:
            unchanged()
        result = ctx.request({"op": "file_commit", "upload": handle}, timeout=_REQUEST_TIMEOUT)
    except BaseException:
        with contextlib.suppress(MemoriesError, OSError):
            ctx.request({"op": "file_abort", "upload": handle}, timeout=10)
        raise
    finally:
        progress.done()
    return result


# What identifies a file's content without reading it (FI-2; engine/files/source.py checks the
# same): a rewrite in place changes the times even when the size stays; a replacement (an
# editor's save-by-rename) changes the inode.
def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


_NOT_REGULAR = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _refuse_unless_regular(mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise MemoriesError("invalid_input", "That is a directory; add files one by one.")
    if not stat.S_ISREG(mode):
        what = _NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")
        raise MemoriesError("invalid_input", f"That is {what}; only a regular file can be added.")


def _open_regular(path: Path) -> tuple[BinaryIO, os.stat_result]:
    """``path`` opened for reading, and its status, if it is a regular file.

    A FIFO, socket or device is refused before it is opened: opening a FIFO for reading waits
    for a writer, and a device may never end. ``O_NONBLOCK`` keeps the open itself from
    waiting should the path be swapped for a FIFO between the check and the open.
    """
    try:
        _refuse_unless_regular(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MemoriesError("not_found", "That file does not exist.") from None
    except OSError as exc:
        raise MemoriesError("io_error", f"The file could not be read ({exc.strerror}).") from None
    try:
        info = os.fstat(fd)
        _refuse_unless_regular(info.st_mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info
    except BaseException:
        os.close(fd)
        raise


def cmd_add(ctx: Context, args: argparse.Namespace) -> int:
    path = Path(args.path)
    source, info = _open_regular(path)

    def unchanged() -> None:
        """FI-2: the file read is the file as it was opened, and still the one at ``path``."""
        try:
            now = [_identity(os.fstat(source.fileno())), _identity(os.stat(path))]
        except OSError:
            now = []
        if now != [_identity(info)] * 2:
            raise MemoriesError(
                "file_changed",
                "The file changed while it was read (its size, times or inode differ); nothing was saved. "
                "Add it again once nothing writes to it.",
            )

    with source:
        begin: dict[str, Any] = {"tags": args.tag, "name": path.name[:255]}
        # A new file is titled by its name; --update without --title keeps the current title.
        title = args.title if args.title is not None else (None if args.update is not None else path.name)
        if title is not None:
            begin["title"] = title
        if args.vault is not None:
            begin["vault"] = args.vault
        if args.update is not None:
            begin["id"] = args.update
        if args.searchable is not None:
            begin["searchable"] = args.searchable
        result = upload(ctx, source, info.st_size, begin, unchanged, _identity(info))
    shown = str(result.get("title", title or ""))
    ctx.emit(result, f"{result['short_id']}  {one_line(shown)}  ({size_text(result['size'])})")
    return 0


# -- download --------------------------------------------------------------------------------
@contextlib.contextmanager
def _opened(ctx: Context, ref: str, rev: str | None) -> Iterator[dict[str, Any]]:
    body: dict[str, Any] = {"op": "file_open", "id": ref}
    if rev is not None:
        body["rev"] = rev
    opened = ctx.request(body)
    try:
        yield opened
    finally:
        with contextlib.suppress(MemoriesError, OSError):
            ctx.request({"op": "file_close", "read": opened["read"]}, timeout=10)


def download(ctx: Context, opened: dict[str, Any], sink: BinaryIO) -> str:
    """Write every chunk of an opened file to ``sink``; return the SHA-256 checked against the signed one."""
    hasher = hashlib.sha256()
    progress = _Progress(ctx, "getting", int(opened["size"]))
    done = 0

    def consume(payload: bytes | bytearray) -> None:
        hasher.update(payload)
        sink.write(payload)

    # Each answer is hashed and written on a second thread while the next one is asked for
    # and received (writes and hashlib release the GIL); one answer behind at most.
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memories-write")
    writing: Future[None] | None = None
    try:
        binary = "per_binary" in opened  # the engine can answer with a binary part
        index, total = 0, int(opened["chunks"])
        per = int(opened["per_binary"] if binary else opened["per_request"])
        while index < total:
            ask: dict[str, Any] = {"op": "file_read", "read": opened["read"], "index": index, "count": per}
            if binary:
                ask["binary"] = True
            answer = ctx.request(ask, timeout=_REQUEST_TIMEOUT)
            if binary:
                payload = answer.get("payload")
                if not isinstance(payload, bytes | bytearray) or not answer["sizes"]:
                    raise MemoriesError("internal", "The engine sent a malformed file chunk.")
                if writing is not None:
                    writing.result()
                writing = writer.submit(consume, payload)
                done += len(payload)
                index += len(answer["sizes"])
            else:
                for text in answer["data"]:
                    data = base64.b64decode(text)
                    hasher.update(data)
                    sink.write(data)
                    done += len(data)
                index += len(answer["data"])
            progress.update(done)
        if writing is not None:
            writing.result()
    finally:
        writer.shutdown(wait=True)
        progress.done()
    digest = hasher.hexdigest()
    if done != int(opened["size"]) or (opened["sha256"] and digest != opened["sha256"]):
        raise MemoriesError("store_corrupt", "The file read back does not match its signed length and digest.")
    return digest


def cmd_get(ctx: Context, args: argparse.Namespace) -> int:
    if args.output is None:
        if sys.stdout.isatty() or ctx.json_output:
            raise UsageError("name the file to write with --output PATH (or redirect stdout)")
        with _opened(ctx, args.id, args.rev) as opened:
            download(ctx, opened, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return 0
    target = Path(args.output)
    if target.is_dir():
        raise MemoriesError("invalid_input", f"The output path {target} is a folder; name a file inside it.")
    if target.exists() and not args.force:
        raise MemoriesError("invalid_input", "The output file exists; add --force to replace it.")
    directory = target.parent if str(target.parent) else Path(".")
    # Checked before the engine is asked (and audits a read): a typo in the folder is a
    # typed error, not a traceback that also breaks --json (issue 27).
    if not directory.is_dir():
        raise MemoriesError(
            "invalid_input", f"The folder {directory} does not exist; create it first or choose another --output path."
        )
    with _opened(ctx, args.id, args.rev) as opened:
        try:
            fd, temp = tempfile.mkstemp(prefix=".memories-", dir=directory)  # 0600
        except OSError as exc:
            raise MemoriesError("io_error", f"No file can be written in {directory} ({exc.strerror}).") from None
        try:
            with os.fdopen(fd, "wb") as sink:
                digest = download(ctx, opened, sink)
                sink.flush()
                os.fsync(sink.fileno())
            os.replace(temp, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if isinstance(exc, OSError):
                code = "disk_full" if exc.errno == errno.ENOSPC else "io_error"
                raise MemoriesError(code, f"The output file {target} could not be written ({exc.strerror}).") from None
            raise
    result = {
        "id": opened["id"],
        "short_id": opened["short_id"],
        "revision": opened["revision"],
        "size": opened["size"],
        "sha256": digest,
        "output": str(target),
    }
    ctx.emit(result, f"wrote {size_text(int(opened['size']))} to {target}")
    return 0


# -- list, history ---------------------------------------------------------------------------
def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "file_list"}
    if args.vault is not None:
        body["vault"] = args.vault
    if args.tag is not None:
        body["tag"] = args.tag
    result = ctx.request(body)
    # A column says which files search finds by their text too (issue 27); the rest only by title and tags.
    lines = [
        f"{one_line(i['short_id'])}  {size_text(int(i['size'])):>10}  {'searchable' if i.get('searchable') else '':10}  "
        f"{one_line(i['title'])}"
        for i in result["items"]
    ]
    ctx.emit(result, "\n".join(lines) if lines else "no files")
    return 0


def cmd_edit(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "file_edit", "id": args.id}
    if args.title is not None:
        body["title"] = args.title
    if args.tag is not None:
        body["tags"] = args.tag
    if args.searchable is not None:
        body["searchable"] = args.searchable
    if len(body) == 2:
        raise UsageError("name what to change: --title, --tag or --searchable/--no-searchable")
    result = ctx.request(body)
    how = "its text is searched" if result["searchable"] else "found by its title and tags only"
    ctx.emit(result, f"{result['short_id']}  {one_line(str(result['title']))}  ({how})")
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "history", "id": args.id})
    lines = []
    for rev in result["revisions"]:
        when = datetime.fromtimestamp(rev["created_ms"] / 1000).astimezone().isoformat(timespec="seconds")
        mark = " (deleted)" if rev["tombstone"] else (" (head)" if rev["head"] else "")
        lines.append(f"{rev['short_revision']}  {when}  {one_line(rev['author'])}  {one_line(rev['title'])}{mark}")
    ctx.emit(result, "\n".join(lines))
    return 0


# -- exec (JB-4) -----------------------------------------------------------------------------
def cmd_exec(ctx: Context, args: argparse.Namespace) -> int:
    from engine.cli.run_child import run_child
    from engine.cli.scratch import new_scratch_dir

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("name the program after --, e.g. memories file exec ID -- cat {file}")
    if not any("{file}" in word for word in command):
        raise UsageError("write {file} where the program takes the file's path")
    # The file in clear: in a 0700 folder under the data home's private scratch/ folder, never
    # the shared temp folder; a killed CLI's folder is swept by the next call (SECURITY.md).
    workspace = str(new_scratch_dir(ctx.paths.home, "file"))
    try:
        with _opened(ctx, args.id, args.rev) as opened:
            name = Path(str(opened.get("name") or "file")).name or "file"
            path = os.path.join(workspace, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as sink:
                download(ctx, opened, sink)
        ctx.close()  # the snapshot is ours now: the child does not hold the engine
        return run_child([word.replace("{file}", path) for word in command])
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
