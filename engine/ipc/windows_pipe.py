"""Windows named-pipe transport for Wire v1 (SPEC API-2).

Windows has no ``SO_PEERCRED`` and (historically) no AF_UNIX in Python, so the engine
listens on ``\\\\.\\pipe\\memories-<digest>`` instead. Access control:

* The pipe is created with an explicit, *protected* DACL that grants ``GENERIC_ALL`` to
  the engine user's SID only (:func:`owner_only_sddl`) and denies network logons.
* ``PIPE_REJECT_REMOTE_CLIENTS`` refuses SMB clients; ``FILE_FLAG_FIRST_PIPE_INSTANCE``
  makes startup fail (``store_in_use``) if someone already created a pipe with our name
  (pipe squatting), instead of silently sharing it.
* Every client's process token SID is compared with ours (defence in depth on top of the
  ACL); the client likewise checks that the *server* process runs as the same user and
  opens the pipe with ``SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION`` so a rogue
  server can never impersonate the CLI user.
* At most ``max_instances`` pipe instances exist, so a 17th client gets
  ``ERROR_PIPE_BUSY`` and the client reports ``busy``. Every connection has its own
  thread with overlapped I/O, idle and per-frame timeouts, and the same frame bound as
  the Unix server, so a slow client only ever costs its own thread.

Only the pure helpers (:func:`owner_only_sddl`, :func:`pipe_name`) run on other
platforms; everything touching Win32 lives behind ``sys.platform == "win32"`` so this
module imports (and type-checks) everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import struct
import sys
import threading
import time
from typing import Any

from engine.errors import MemoriesError
from engine.ipc.framing import (
    HEADER_BYTES,
    MAX_FRAME_BYTES,
    TruncatedFrame,
    decode_body,
    encode_frame,
    frame_too_large,
    make_error,
    make_request,
    parse_request,
)
from engine.ipc.peer import Peer
from engine.ipc.server import Handler, dispatch

__all__ = [
    "PIPE_PREFIX",
    "owner_only_sddl",
    "pipe_name",
    "serve_named_pipe",
    "pipe_request",
]

PIPE_PREFIX = "\\\\.\\pipe\\memories-"
_SID_RE = re.compile(r"S-1-[0-9]+(?:-[0-9]+)+")
_DIGEST_RE = re.compile(r"[0-9A-Za-z_-]{1,128}")
_HEADER = struct.Struct(">I")


def owner_only_sddl(user_sid: str) -> str:
    """Return an SDDL string whose DACL lets only ``user_sid`` use the pipe.

    ``D:P`` - a *protected* DACL: nothing is inherited from the parent, so default
    permissions (Everyone read, Administrators, ...) never apply.

    ``(D;;GA;;;NU)`` - deny everything to the NETWORK logon SID (S-1-5-2), first because
    deny ACEs must precede allow ACEs. A token of the same user that arrived over the
    network (SMB pipe access, network logon) carries NU, so even the owner cannot reach the
    engine remotely: the API is local-only, and remote access has its own authenticated
    transports (API-4, API-5). This complements ``PIPE_REJECT_REMOTE_CLIENTS``.

    ``(A;;GA;;;<sid>)`` - allow GENERIC_ALL to the engine user and to no one else (no
    SYSTEM, no Administrators, no Everyone).
    """
    if not isinstance(user_sid, str) or _SID_RE.fullmatch(user_sid) is None:
        raise ValueError("user_sid must be a string SID such as S-1-5-21-...")
    return f"D:P(D;;GA;;;NU)(A;;GA;;;{user_sid})"


def pipe_name(home_digest: str) -> str:
    r"""Return ``\\.\pipe\memories-<home_digest>`` (digest: 1-128 of ``[0-9A-Za-z_-]``)."""
    if not isinstance(home_digest, str) or _DIGEST_RE.fullmatch(home_digest) is None:
        raise ValueError("home_digest must be 1-128 characters of [0-9A-Za-z_-]")
    return PIPE_PREFIX + home_digest


def _unsupported() -> MemoriesError:
    return MemoriesError("daemon_unavailable", "Named pipes are only available on Windows; use the socket.")


async def serve_named_pipe(
    name: str,
    handler: Handler,
    *,
    stop: asyncio.Event,
    user_sid: str | None = None,
    max_instances: int = 16,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    frame_read_timeout: float = 10.0,
    idle_timeout: float = 120.0,
) -> None:
    """Serve Wire v1 on the named pipe ``name`` until ``stop`` is set (Windows only).

    ``handler`` has the :data:`engine.ipc.server.Handler` shape
    (``async (body, Peer) -> result``); it runs on the calling event loop. The pipe's DACL
    is :func:`owner_only_sddl` of ``user_sid`` (default: the current process user).
    """
    if sys.platform != "win32":
        raise _unsupported()
    else:  # a real else block: mypy skips it on other platforms (Win32-only names)
        await _serve_win32(
            name,
            handler,
            stop=stop,
            user_sid=user_sid,
            max_instances=max_instances,
            max_frame_bytes=max_frame_bytes,
            frame_read_timeout=frame_read_timeout,
            idle_timeout=idle_timeout,
        )


def pipe_request(name: str, body: dict[str, Any], timeout: float = 30.0, *, request_id: int = 1) -> dict[str, Any]:
    """Send one request over the named pipe and return its result (Windows only).

    Raises the typed error from the engine, or ``daemon_unavailable`` / ``busy`` /
    ``timeout`` / ``permission_denied`` for transport failures.
    """
    if sys.platform != "win32":
        raise _unsupported()
    else:
        return _client_request(name, body, timeout, request_id)


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import _winapi
    import ctypes
    from ctypes import wintypes

    _kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _advapi32 = ctypes.WinDLL("advapi32", use_last_error=True)

    _PIPE_TYPE_BYTE = 0x0
    _PIPE_READMODE_BYTE = 0x0
    _PIPE_REJECT_REMOTE_CLIENTS = 0x8
    _SECURITY_SQOS_PRESENT = 0x00100000
    _SECURITY_IDENTIFICATION = 0x00010000
    _GENERIC_READ = 0x80000000
    _GENERIC_WRITE = 0x40000000
    _OPEN_EXISTING = 3
    _SDDL_REVISION_1 = 1
    _TOKEN_QUERY = 0x0008
    _TOKEN_USER_CLASS = 1
    _PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
    _WAIT_OBJECT_0 = 0
    _WAIT_TIMEOUT = 0x102
    _ERROR_FILE_NOT_FOUND = 2
    _ERROR_ACCESS_DENIED = 5
    _ERROR_PIPE_NOT_CONNECTED = 233
    _ERROR_OPERATION_ABORTED = 995
    _BUFFER = 64 * 1024
    _EOF_ERRORS = (
        _winapi.ERROR_BROKEN_PIPE,
        _ERROR_PIPE_NOT_CONNECTED,
        _winapi.ERROR_NO_DATA,
    )

    class _SecurityAttributes(ctypes.Structure):
        _fields_ = [
            ("nLength", wintypes.DWORD),
            ("lpSecurityDescriptor", wintypes.LPVOID),
            ("bInheritHandle", wintypes.BOOL),
        ]

    _kernel32.CreateEventW.restype = wintypes.HANDLE
    _kernel32.CreateEventW.argtypes = [wintypes.LPVOID, wintypes.BOOL, wintypes.BOOL, wintypes.LPCWSTR]
    _kernel32.SetEvent.argtypes = [wintypes.HANDLE]
    _kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
    _kernel32.LocalFree.argtypes = [wintypes.HLOCAL]
    _kernel32.OpenProcess.restype = wintypes.HANDLE
    _kernel32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
    _kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    _kernel32.GetNamedPipeClientProcessId.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.ULONG)]
    _kernel32.GetNamedPipeServerProcessId.argtypes = [wintypes.HANDLE, ctypes.POINTER(wintypes.ULONG)]
    _advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW.argtypes = [
        wintypes.LPCWSTR,
        wintypes.DWORD,
        ctypes.POINTER(wintypes.LPVOID),
        ctypes.POINTER(wintypes.ULONG),
    ]
    _advapi32.OpenProcessToken.argtypes = [wintypes.HANDLE, wintypes.DWORD, ctypes.POINTER(wintypes.HANDLE)]
    _advapi32.GetTokenInformation.argtypes = [
        wintypes.HANDLE,
        ctypes.c_int,
        wintypes.LPVOID,
        wintypes.DWORD,
        ctypes.POINTER(wintypes.DWORD),
    ]
    _advapi32.ConvertSidToStringSidW.argtypes = [wintypes.LPVOID, ctypes.POINTER(wintypes.LPWSTR)]

    def _winerror() -> OSError:
        code = ctypes.get_last_error()
        return OSError(None, ctypes.FormatError(code), None, code)

    def _token_sid(process_handle: int) -> str:
        token = wintypes.HANDLE()
        if not _advapi32.OpenProcessToken(process_handle, _TOKEN_QUERY, ctypes.byref(token)):
            raise _winerror()
        try:
            needed = wintypes.DWORD()
            _advapi32.GetTokenInformation(token, _TOKEN_USER_CLASS, None, 0, ctypes.byref(needed))
            buf = ctypes.create_string_buffer(needed.value)
            if not _advapi32.GetTokenInformation(token, _TOKEN_USER_CLASS, buf, needed, ctypes.byref(needed)):
                raise _winerror()
            # TOKEN_USER starts with SID_AND_ATTRIBUTES whose first member is PSID.
            psid = ctypes.c_void_p.from_buffer(buf).value
            text = wintypes.LPWSTR()
            if not _advapi32.ConvertSidToStringSidW(psid, ctypes.byref(text)):
                raise _winerror()
            try:
                return str(text.value)
            finally:
                _kernel32.LocalFree(ctypes.cast(text, wintypes.HLOCAL))
        finally:
            _kernel32.CloseHandle(token)

    def _current_user_sid() -> str:
        return _token_sid(_kernel32.GetCurrentProcess())

    def _process_sid(pid: int) -> str:
        handle = _kernel32.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
        if not handle:
            raise _winerror()
        try:
            return _token_sid(handle)
        finally:
            _kernel32.CloseHandle(handle)

    def _pipe_pid(handle: int, *, client: bool) -> int:
        pid = wintypes.ULONG()
        func = _kernel32.GetNamedPipeClientProcessId if client else _kernel32.GetNamedPipeServerProcessId
        if not func(handle, ctypes.byref(pid)):
            raise _winerror()
        return int(pid.value)

    class _Descriptor:
        """A self-relative security descriptor built from SDDL, freed with LocalFree."""

        def __init__(self, sddl: str) -> None:
            self._sd = wintypes.LPVOID()
            if not _advapi32.ConvertStringSecurityDescriptorToSecurityDescriptorW(
                sddl, _SDDL_REVISION_1, ctypes.byref(self._sd), None
            ):
                raise _winerror()
            self.attributes = _SecurityAttributes(ctypes.sizeof(_SecurityAttributes), self._sd, False)

        @property
        def address(self) -> int:
            return ctypes.addressof(self.attributes)

        def free(self) -> None:
            if self._sd:
                _kernel32.LocalFree(ctypes.cast(self._sd, wintypes.HLOCAL))
                self._sd = wintypes.LPVOID()

    def _wait(ov: _winapi.Overlapped, err: int, timeout: float | None, stop: int | None) -> None:
        """Wait for an overlapped operation; cancel it on timeout or stop."""
        if err == _winapi.ERROR_IO_PENDING:
            handles = [ov.event] if stop is None else [ov.event, stop]
            ms = _winapi.INFINITE if timeout is None else max(0, int(timeout * 1000))
            res = _winapi.WaitForMultipleObjects(handles, False, ms)
            if res != _WAIT_OBJECT_0:
                ov.cancel()
                with contextlib.suppress(OSError):
                    ov.GetOverlappedResult(True)
                raise TimeoutError("pipe operation timed out or was stopped")
        elif err not in (0, _winapi.ERROR_MORE_DATA):
            raise OSError(None, "pipe I/O failed", None, err)

    def _read_exact(handle: int, n: int, deadline: float | None, stop: int | None) -> bytes:
        """Read up to ``n`` bytes before ``deadline``; shorter only on EOF."""
        chunks: list[bytes] = []
        got = 0
        while got < n:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ov, err = _winapi.ReadFile(handle, min(n - got, _BUFFER), overlapped=True)
                _wait(ov, err, timeout, stop)
                ov.GetOverlappedResult(True)
            except OSError as exc:
                if exc.winerror in _EOF_ERRORS:
                    break
                raise
            data = ov.getbuffer() or b""
            if not data:
                break
            chunks.append(bytes(data))
            got += len(data)
        return b"".join(chunks)

    def _write_all(handle: int, data: bytes, timeout: float) -> None:
        ov, err = _winapi.WriteFile(handle, data, overlapped=True)
        _wait(ov, err, timeout, None)
        written, err = ov.GetOverlappedResult(True)
        if written != len(data):
            raise OSError(None, "short write on pipe", None, err)

    def _deadline(timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout

    def _read_frame_pipe(
        handle: int,
        max_bytes: int,
        idle_timeout: float | None,
        frame_timeout: float | None,
        stop: int | None = None,
    ) -> dict[str, Any] | None:
        """Pipe counterpart of :func:`engine.ipc.framing.read_frame` (same contract).

        ``stop`` is an event handle that aborts the wait (reported as ``TimeoutError``).
        """
        first = _read_exact(handle, 1, _deadline(idle_timeout), stop)
        if not first:
            return None
        deadline = _deadline(frame_timeout)
        rest = _read_exact(handle, HEADER_BYTES - 1, deadline, stop)
        if len(rest) != HEADER_BYTES - 1:
            raise TruncatedFrame(1 + len(rest), None)
        (length,) = _HEADER.unpack(first + rest)
        if length > max_bytes:
            raise frame_too_large(length, max_bytes, "The incoming message")
        body = _read_exact(handle, length, deadline, stop)
        if len(body) != length:
            raise TruncatedFrame(HEADER_BYTES + len(body), HEADER_BYTES + length)
        return decode_body(body)

    class _PipeServer:
        def __init__(
            self,
            name: str,
            handler: Handler,
            loop: asyncio.AbstractEventLoop,
            *,
            sddl: str,
            own_sid: str,
            max_instances: int,
            max_frame_bytes: int,
            frame_read_timeout: float,
            idle_timeout: float,
        ) -> None:
            if not 1 <= max_instances <= _winapi.PIPE_UNLIMITED_INSTANCES - 1:
                raise ValueError("max_instances must be in 1..254")
            self._name = name
            self._handler = handler
            self._loop = loop
            self._descriptor = _Descriptor(sddl)
            self._own_sid = own_sid
            self._max_instances = max_instances
            self._max_frame_bytes = max_frame_bytes
            self._frame_read_timeout = frame_read_timeout
            self._idle_timeout = idle_timeout
            self._slots = threading.BoundedSemaphore(max_instances)
            self._stopping = threading.Event()
            self._stop_event = int(_kernel32.CreateEventW(None, True, False, None))
            self._pending: int | None = None
            self._threads: set[threading.Thread] = set()
            self._lock = threading.Lock()

        def _create(self, first: bool) -> int:
            mode = _winapi.PIPE_ACCESS_DUPLEX | _winapi.FILE_FLAG_OVERLAPPED
            if first:
                mode |= _winapi.FILE_FLAG_FIRST_PIPE_INSTANCE
            return _winapi.CreateNamedPipe(
                self._name,
                mode,
                _PIPE_TYPE_BYTE | _PIPE_READMODE_BYTE | _winapi.PIPE_WAIT | _PIPE_REJECT_REMOTE_CLIENTS,
                self._max_instances,
                _BUFFER,
                _BUFFER,
                0,
                self._descriptor.address,
            )

        def create_first_instance(self) -> None:
            self._slots.acquire()
            try:
                self._pending = self._create(first=True)
            except OSError as exc:
                self._slots.release()
                if exc.winerror == _ERROR_ACCESS_DENIED:
                    # Someone (possibly another user) already owns this pipe name.
                    raise MemoriesError("store_in_use") from None
                raise

        def accept_loop(self) -> None:
            while not self._stopping.is_set():
                with self._lock:
                    handle, self._pending = self._pending, None
                if handle is None:
                    if not self._slots.acquire(timeout=0.5):
                        continue  # all instances busy; new clients get ERROR_PIPE_BUSY
                    try:
                        handle = self._create(first=False)
                    except OSError:
                        self._slots.release()
                        time.sleep(0.1)
                        continue
                if not self._connect(handle):
                    _winapi.CloseHandle(handle)
                    self._slots.release()
                    continue
                worker = threading.Thread(target=self._serve_connection, args=(handle,), daemon=True)
                with self._lock:
                    self._threads.add(worker)
                worker.start()

        def _connect(self, handle: int) -> bool:
            try:
                ov = _winapi.ConnectNamedPipe(handle, overlapped=True)
            except OSError as exc:
                # Client connected (or connected and left) before we waited: fine / gone.
                return bool(exc.winerror == _winapi.ERROR_PIPE_CONNECTED)
            try:
                _wait(ov, _winapi.ERROR_IO_PENDING, None, self._stop_event)
            except TimeoutError:
                return False  # stop requested
            _, err = ov.GetOverlappedResult(True)
            return err in (0, _winapi.ERROR_PIPE_CONNECTED)

        def _serve_connection(self, handle: int) -> None:
            try:
                pid = _pipe_pid(handle, client=True)
                if _process_sid(pid) != self._own_sid:
                    return  # refuse silently, like the Unix UID check
                peer = Peer(pid=pid, uid=-1, gid=None)
                max_bytes = self._max_frame_bytes
                while not self._stopping.is_set():
                    try:
                        obj = _read_frame_pipe(
                            handle,
                            max_bytes,
                            self._idle_timeout,
                            self._frame_read_timeout,
                            self._stop_event,
                        )
                    except (TruncatedFrame, TimeoutError):
                        return
                    except MemoriesError as exc:
                        _write_all(handle, encode_frame(make_error(None, exc)), 30.0)
                        if exc.code == "frame_too_large":
                            return
                        continue
                    if obj is None:
                        return
                    try:
                        req_id, body = parse_request(obj)
                    except MemoriesError as exc:
                        _write_all(handle, encode_frame(make_error(None, exc)), 30.0)
                        continue
                    future = asyncio.run_coroutine_threadsafe(dispatch(req_id, body, peer, self._handler, max_bytes), self._loop)
                    _write_all(handle, future.result(), 30.0)
            except Exception:  # one bad client never kills the server
                return
            finally:
                try:
                    _winapi.CloseHandle(handle)
                finally:
                    self._slots.release()
                    with self._lock:
                        self._threads.discard(threading.current_thread())

        def shutdown(self) -> None:
            self._stopping.set()
            _kernel32.SetEvent(self._stop_event)
            with self._lock:
                pending, self._pending = self._pending, None
            if pending is not None:
                _winapi.CloseHandle(pending)

        def release(self) -> None:
            """Free the security descriptor once no more instances will be created."""
            self._descriptor.free()

    def _client_request(name: str, body: dict[str, Any], timeout: float, request_id: int) -> dict[str, Any]:
        from engine.errors import error_from_wire

        frame = encode_frame(make_request(request_id, body))
        try:
            handle = _winapi.CreateFile(
                name,
                _GENERIC_READ | _GENERIC_WRITE,
                0,
                _winapi.NULL,
                _OPEN_EXISTING,
                _winapi.FILE_FLAG_OVERLAPPED | _SECURITY_SQOS_PRESENT | _SECURITY_IDENTIFICATION,
                _winapi.NULL,
            )
        except OSError as exc:
            if exc.winerror == _winapi.ERROR_PIPE_BUSY:
                raise MemoriesError("busy") from None
            if exc.winerror == _ERROR_ACCESS_DENIED:
                raise MemoriesError("permission_denied") from None
            raise MemoriesError("daemon_unavailable") from None
        try:
            try:
                server_sid = _process_sid(_pipe_pid(handle, client=False))
            except OSError:
                server_sid = ""
            if server_sid != _current_user_sid():
                raise MemoriesError("permission_denied", "The pipe is not served by this user's engine.")
            deadline = time.monotonic() + timeout
            try:
                _write_all(handle, frame, timeout)
                left = max(0.0, deadline - time.monotonic())
                response = _read_frame_pipe(handle, MAX_FRAME_BYTES, left, left)
            except TimeoutError:
                raise MemoriesError("timeout") from None
            except (TruncatedFrame, OSError):
                raise MemoriesError("daemon_unavailable") from None
            if response is None:
                raise MemoriesError("daemon_unavailable")
            if response.get("ok") is True and response.get("id") == request_id:
                result = response.get("result")
                if isinstance(result, dict):
                    return result
            elif response.get("ok") is False:
                raise error_from_wire(response.get("error"))
            raise MemoriesError("internal", "The engine sent a malformed response.")
        finally:
            _winapi.CloseHandle(handle)

    async def _serve_win32(
        name: str,
        handler: Handler,
        *,
        stop: asyncio.Event,
        user_sid: str | None,
        max_instances: int,
        max_frame_bytes: int,
        frame_read_timeout: float,
        idle_timeout: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        sid = user_sid or _current_user_sid()
        server = _PipeServer(
            name,
            handler,
            loop,
            sddl=owner_only_sddl(sid),
            own_sid=sid,
            max_instances=max_instances,
            max_frame_bytes=max_frame_bytes,
            frame_read_timeout=frame_read_timeout,
            idle_timeout=idle_timeout,
        )
        server.create_first_instance()
        accept = threading.Thread(target=server.accept_loop, name="ipc-pipe-accept", daemon=True)
        accept.start()
        try:
            await stop.wait()
        finally:
            server.shutdown()
            await asyncio.to_thread(accept.join, 5.0)
            if not accept.is_alive():
                server.release()
