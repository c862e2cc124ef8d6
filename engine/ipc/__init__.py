"""Local IPC transport for the engine (SPEC API-2).

Modules:

* :mod:`engine.ipc.framing` - Wire v1 frames (4-byte big-endian length + UTF-8 JSON object)
  and the request/response envelopes.
* :mod:`engine.ipc.client` - lean synchronous client used by the CLI.
* :mod:`engine.ipc.server` - asyncio Unix-domain-socket server (peer UID check, bounded
  frames, bounded connections, per-connection tasks and timeouts).
* :mod:`engine.ipc.peer` - peer credentials and the ``cli:{pid}`` elevation namespace.
* :mod:`engine.ipc.windows_pipe` - Windows named-pipe transport with an owner-only ACL.

This package ``__init__`` deliberately imports nothing: the CLI imports
:mod:`engine.ipc.client` on its startup path and must not pay for asyncio or ctypes.
"""
