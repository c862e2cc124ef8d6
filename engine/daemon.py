"""The engine daemon process: writer lock, Service, IPC server, idle auto-lock.

Started by ``memories daemon run`` (foreground) or ``memories daemon start`` /
``memories unlock`` (detached). It is the only process that opens the store.

Lock means lock (ST-12): Python cannot wipe the strings an unlocked engine made (note
bodies, titles, secrets, transcripts live in countless objects and freed heap pages), so a
lock of a process that has held decrypted state ends that address space: the daemon stops
accepting, lets every connection finish its request, and re-executes itself (``execve`` of
the same interpreter with the same interpreter flags and arguments, same PID). The
listening socket, the idle connections and the writer lock's descriptor stay open across
the ``exec``; a small description of them (and the few content-free facts that outlive a
lock, ``Service.carried``) travels in an anonymous file named by ``MEMORIES_ENGINE_HANDOVER``.
Clients never see the socket missing: what they send meanwhile waits in the kernel.

The successor loads its modules (about a second of one core, several on a busy machine)
while it already serves the handed-over socket. An unlock that arrives meanwhile starts its
KDF at once (the store's public KDF parameters come with the hand-over), so the load and
the derivation share the two cores instead of adding up; and once loaded, a re-executed
engine warms what an unlock needs next (the segmenter's dictionary) right away, from its
own code and data files only: it has seen no password and opens no vault row for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import signal
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from logging.handlers import RotatingFileHandler
from typing import TYPE_CHECKING, Any

from engine.config import Paths, load_config
from engine.errors import MemoriesError
from engine.ipc.peer import Peer, caller_namespace
from engine.ipc.server import Handover, IpcServer
from engine.service.caller import Caller, take_client_label
from engine.store.writer_lock import WriterLock

if TYPE_CHECKING:
    from engine.crypto.kdf import DerivationAhead
    from engine.service.service import Service, Unlocked
    from engine.vault.revision import Revision

__all__ = ["run_daemon"]

log = logging.getLogger("memories.engine")
EXIT_STORE_IN_USE = 3
EXIT_DISK_FULL = 4  # the CLI's auto-start maps this exit status to disk_full
_DISK_FULL_START = "The disk is full, so the engine could not start; free some space."
# The descriptor number of the anonymous file that describes what a predecessor handed over.
HANDOVER_ENV = "MEMORIES_ENGINE_HANDOVER"
# How long a lock's re-execution waits for the requests in flight to be answered (a lock
# cancels the long ones: jobs, sync, job-status waits); the rest are cut off.
DRAIN_SECONDS = 15.0
# How long a stop waits for the answers of requests in flight (its own first) before it closes
# every connection: a request that waits longer (a `search --wait`) is cut, as it always was.
STOP_ANSWER_SECONDS = 2.0


@dataclasses.dataclass
class _Inherited:
    """What the engine that re-executed into this one passed on (ST-12)."""

    lock_fd: int
    handover: Handover
    carried: dict[str, Any]
    # The store's KDF parameters (public: they sit in clear in the store header), so an unlock
    # that arrives while this engine loads can start its derivation at once.
    kdf: dict[str, Any] | None = None


def _take_inherited() -> _Inherited | None:
    """Read (once) and forget the predecessor's hand-over; children never see it."""
    raw = os.environ.pop(HANDOVER_ENV, None)
    if raw is None:
        return None
    with os.fdopen(int(raw), "rb") as handle:
        data = json.loads(handle.read())
    handover = Handover(int(data["listener"]), [int(fd) for fd in data["connections"]])
    carried = data["carried"] if isinstance(data.get("carried"), dict) else {}
    kdf = data.get("kdf") if isinstance(data.get("kdf"), dict) else None
    return _Inherited(int(data["lock"]), handover, carried, kdf)


def _reexec(lock_fd: int, handover: Handover, carried: dict[str, Any], kdf: dict[str, Any] | None = None) -> None:
    """Replace this process's image with a fresh engine that serves the same descriptors.

    ``sys.orig_argv`` keeps the interpreter's own flags (-I, -P, -X ...) as we were started.
    """
    blob = json.dumps(
        {"lock": lock_fd, "listener": handover.listener, "connections": handover.connections, "carried": carried, "kdf": kdf}
    )
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        fd = memfd("memories-handover")
    else:  # macOS/BSD: an unlinked temporary file
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
    os.write(fd, blob.encode("utf-8"))
    os.lseek(fd, 0, os.SEEK_SET)
    for inherited in (fd, lock_fd, *handover.fds()):
        os.set_inheritable(inherited, True)
    env = {**os.environ, HANDOVER_ENV: str(fd)}
    # A bundled engine's executable is the program itself; an interpreter keeps its flags.
    frozen = getattr(sys, "frozen", False)
    argv = [sys.executable, *(sys.argv[1:] if frozen else sys.orig_argv[1:])]
    log.info("locked: the engine re-executes to clear its memory (pid=%d)", os.getpid())
    logging.shutdown()  # flush and close the log before the image goes
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        os.execve(sys.executable, argv, env)  # noqa: S606 (our own interpreter and arguments)
    except OSError as exc:  # the interpreter went away (an upgrade): exit; the next command starts one
        with contextlib.suppress(OSError):
            print(f"memories: the engine could not restart after the lock ({type(exc).__name__}).", file=sys.stderr)


def _refuse_core_files() -> None:
    """No core file of the engine, locked or not (it receives passwords); children may raise it."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))


def _setup_logging(paths: Paths) -> None:
    """Op names, outcomes and error codes only: never content, IDs or passwords (ST-1)."""
    paths.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    handler = RotatingFileHandler(paths.log_dir / "engine.log", maxBytes=2_000_000, backupCount=3)
    os.chmod(paths.log_dir / "engine.log", 0o600)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("memories")
    root.setLevel(logging.INFO)
    root.addHandler(handler)


WARM_AFTER_SECONDS = 3.0

# TEST-ONLY fault injection, read once when the daemon starts; inert unless set. A
# comma-separated list; ``on_commit`` adds a feature hook that fails after every durable
# commit of a revision, ``put_after_commit`` makes ``put`` fail after its commit, so tests
# can check the caller is told the write happened (tests/integration/test_honest_results.py).
TEST_FAULTS_ENV = "MEMORIES_TEST_FAULTS"


def _inject_test_faults(service: Service) -> None:
    faults = {f.strip() for f in os.environ.get(TEST_FAULTS_ENV, "").split(",") if f.strip()}
    if not faults:
        return
    log.warning("test fault injection active: %s", ",".join(sorted(faults)))
    if "on_commit" in faults:

        def failing_hook(state: Unlocked, revisions: list[Revision], extra: list[dict[str, Any]]) -> None:
            if revisions:
                raise RuntimeError("injected on_commit fault")

        service.on_commit.append(failing_hook)
    if "put_after_commit" in faults:
        # ``put`` saves, then fails: the caller must hear committed_with_errors with the ID.
        from engine.service.registry import OPS

        spec = OPS["put"]

        def failing_put(service: Service, request: Any, caller: Caller) -> dict[str, Any]:
            spec.handler(service, request, caller)
            raise RuntimeError("injected fault after commit")

        OPS["put"] = dataclasses.replace(spec, handler=failing_put)
    if "lock_in_place" in faults:
        # bench/unlock.py's peer: a lock that keeps the process, as before ST-12 (never in use).
        service.restart_on_lock = False


@dataclasses.dataclass
class _Restart:
    handover: Handover
    carried: dict[str, Any]
    kdf: dict[str, Any] | None = None


def _kdf_of(service: Service) -> dict[str, Any] | None:
    """The store's public KDF parameters, for the hand-over (JSON: the salt as hex)."""
    store = service.store
    if store is None:
        return None
    return {"salt": store.kdf.salt.hex(), "opslimit": store.kdf.opslimit, "memlimit": store.kdf.memlimit}


def _derive_ahead(body: dict[str, Any], kdf: dict[str, Any] | None) -> DerivationAhead | None:
    """Start an unlock's KDF while the engine still loads (the unlock handler checks it)."""
    password = body.get("password")
    if kdf is None or not isinstance(password, str):
        return None
    from engine.crypto.kdf import DerivationAhead, KdfParams
    from engine.service.memory import refuse_dumps

    try:
        params = KdfParams(salt=bytes.fromhex(str(kdf["salt"])), opslimit=int(kdf["opslimit"]), memlimit=int(kdf["memlimit"]))
    except (KeyError, TypeError, ValueError):
        return None  # the unlock derives its own key as usual
    refuse_dumps()  # as the unlock handler does before a password becomes a key
    return DerivationAhead(password, params)


def _new_service(paths: Paths, inherited: _Inherited | None) -> Service:
    from engine.service import handlers  # noqa: F401  (registers every op)
    from engine.service.service import Service

    if inherited is None:
        # A fresh engine loads what engine/lazy_import.py defers before it serves, as it always
        # did: nothing waits on its start but the start itself. Only a re-executed engine, whose
        # load an unlock right after the lock may be waiting for, leaves them to its warm-up.
        from engine import lazy_import

        lazy_import.warm()

    service = Service(paths, load_config(paths))
    # POSIX only: Windows has no execve that keeps the process (SECURITY.md says so).
    service.restart_on_lock = os.name == "posix"
    if inherited is not None:
        for name, value in inherited.carried.items():
            if name in service.carried:
                service.carried[name][1](value)
    _inject_test_faults(service)
    return service


def _warm(service: Service) -> None:
    """The warm-ups (Jieba's dictionary, the modules imported on first use): each starts its own
    thread and loads library code and data files only, no vault data."""
    for warm in service.before_unlock:
        warm()


def _while_loading(op: object, paths: Paths) -> dict[str, Any] | None:
    """A re-executed engine answers the desktop's status probes while it still loads its
    modules (about a second of CPU): it is locked and initialized, as the one before it left
    it. Every other request waits for the load."""
    if op == "desktop_status":
        return {"state": "locked"}
    if op == "daemon_info":
        from engine import __version__

        return {"pid": os.getpid(), "version": __version__, "home": str(paths.home), "initialized": True, "locked": True}
    return None


async def _serve(paths: Paths, inherited: _Inherited | None) -> _Restart | None:
    """Serve until stopped (None) or until a lock asks for a re-execution (what to pass on)."""
    executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="memories-op")
    loop = asyncio.get_running_loop()
    loaded: asyncio.Future[Service] = loop.create_future()
    ahead: list[DerivationAhead] = []  # at most one: the first unlock that arrived during the load

    async def handle(body: dict[str, Any], peer: Peer) -> dict[str, Any]:
        op = body.get("op") if isinstance(body.get("op"), str) else "?"
        if not loaded.done():
            early = _while_loading(op, paths)
            if early is not None:
                return early
            if op == "unlock" and not ahead and inherited is not None:
                started = _derive_ahead(body, inherited.kdf)
                if started is not None:
                    ahead.append(started)
                    log.info("unlock: its KDF started while the engine loads")
        service = await asyncio.shield(loaded)
        # Namespace, surface and uid come from the kernel; the label only names the program.
        client = take_client_label(body)
        caller = Caller(namespace=caller_namespace(peer), surface="ipc", uid=peer.uid, client=client, pid=peer.pid)
        try:
            result = await loop.run_in_executor(executor, service.dispatch, body, caller)
        except MemoriesError as exc:
            log.info("op=%s error=%s", op, exc.code)
            raise
        except Exception as exc:
            # Only the type: an exception's text could carry request data.
            log.error("op=%s internal error type=%s", op, type(exc).__name__)
            raise MemoriesError("internal") from None
        # Written on the loop's next turn, after the answer has gone out: the line (a write and
        # the rotating handler's checks, ~0.5 ms) is no part of what the caller waits for.
        loop.call_soon(log.info, "op=%s ok", op)
        if service.restart_pending.is_set():
            # This request locked (ST-12): no next request is read here, from this answer on.
            server.stop_accepting()
        return result

    server = IpcServer(paths.socket, handle)
    if inherited is not None:
        # A restart after a lock: serve the handed-over socket at once (what clients send waits
        # for the load below, except the status probes) while the modules load.
        await server.start(adopt=inherited.handover)
        try:
            service = await loop.run_in_executor(executor, _new_service, paths, inherited)
        except BaseException as exc:
            if isinstance(exc, Exception):
                loaded.set_exception(exc)  # the waiting requests hear it as `internal`
            await server.close()
            executor.shutdown(wait=False, cancel_futures=True)
            raise
    else:
        service = _new_service(paths, None)
        await server.start()
    if ahead:
        service.kdf_ahead = ahead.pop()  # set before any waiting request runs
    loaded.set_result(service)
    stop = asyncio.Event()
    wake = asyncio.Event()  # a lock asked for the re-execution, or a shutdown op for the exit

    def wake_loop() -> None:  # called from the worker thread that locked
        loop.call_soon_threadsafe(wake.set)

    service.wake = wake_loop
    # SIGHUP: the terminal or login session that started the engine ended (logout). Like
    # SIGTERM, it locks and drops remote sessions and proxies before exiting (RM-5, PX-4),
    # instead of the default abrupt death.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    log.info("engine %s pid=%d", "restarted after a lock" if inherited is not None else "started", os.getpid())
    # Warm what the first unlock will need (Jieba's dictionary: ~1 s of one core holding the
    # GIL, ~70 MB, no secrets) a few seconds after start, so the first requests are not
    # delayed and a later first unlock is as fast as any other. An unlock that comes sooner
    # warms it itself, during its KDF. An engine that re-executed after a lock warms at once:
    # the lock's answer is out, and the next request is most likely the next unlock (ST-12) —
    # unless that unlock is already here (its KDF ran during the load): then its decoding
    # comes first, and the warm-up waits as in a fresh engine.
    unlock_waiting = service.kdf_ahead is not None
    warm_after = 0.0 if inherited is not None and not unlock_waiting else WARM_AFTER_SECONDS
    loop.call_later(warm_after, _warm, service)
    restart: _Restart | None = None
    try:
        while not stop.is_set() and not service.shutdown_event.is_set() and not service.restart_pending.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=0.5)
            if not service.restart_pending.is_set():
                await loop.run_in_executor(executor, service.check_idle)
    finally:
        for stopping in service.on_stop:
            stopping()
        if service.restart_pending.is_set() and not stop.is_set() and not service.shutdown_event.is_set():
            handover = await server.hand_over(DRAIN_SECONDS)
            restart = _Restart(handover, {}, _kdf_of(service))
        else:
            # The stop's own answer (and any other in flight) goes out before the connections close.
            await server.settle(STOP_ANSWER_SECONDS)
            await server.close()
        service.lock_now("shutdown")
        if service.store is not None:
            service.store.close()
        # A restart must not wait for a request the drain gave up on (a transfer stuck on the
        # network): its connection is closed already, the store is closed, and the exec ends
        # its thread. A plain stop still lets every thread finish.
        executor.shutdown(wait=restart is None, cancel_futures=True)
        if restart is not None:
            restart.carried = {name: save() for name, (save, _) in service.carried.items()}
        log.info("engine stopped")
    return restart


def _start_failed(exc: MemoriesError) -> int:
    """Say why in the log and on stderr (the CLI that started us shows its last line)."""
    log.error("engine could not start: error=%s", exc.code)
    with contextlib.suppress(OSError):  # stderr may be a file on the very disk that is full
        print(f"memories: error [{exc.code}]: {exc.message}", file=sys.stderr, flush=True)
    return EXIT_DISK_FULL if exc.code == "disk_full" else 1


def run_daemon(paths: Paths) -> int:
    os.umask(0o077)
    _refuse_core_files()
    inherited = _take_inherited()
    paths.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = WriterLock(paths.lock_file)
    try:
        if inherited is not None:
            lock.adopt(inherited.lock_fd)
        else:
            lock.acquire()
    except MemoriesError as exc:
        print(f"memories: error [{exc.code}]: {exc.message}", file=sys.stderr)
        return EXIT_STORE_IN_USE
    except OSError as exc:  # writing the holder's PID into engine.lock
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return _start_failed(MemoriesError("disk_full", _DISK_FULL_START))
    try:
        _setup_logging(paths)
        restart = asyncio.run(_serve(paths, inherited))
        if restart is not None and lock.fd is not None:
            _reexec(lock.fd, restart.handover, restart.carried, restart.kdf)
            return 1  # only when the exec failed
        return 0
    except MemoriesError as exc:
        return _start_failed(exc)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return _start_failed(MemoriesError("disk_full", _DISK_FULL_START))
    finally:
        lock.release()
