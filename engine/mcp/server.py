"""``memories mcp``: the MCP server process (AG-1), built on the official ``mcp`` SDK.

The process holds no keys and never opens the store: it is an IPC client of the
daemon. Each tool call becomes one ``mcp_call`` request carrying the grant token
(from ``MEMORIES_MCP_TOKEN``); the daemon authenticates it, checks the MCP allowlist
and the grant's scope, and only then dispatches (see ``engine.service.handlers.mcp_grants``).

The SDK's low-level ``Server`` is used (rather than ``MCPServer``'s signature-derived
tools) so that each tool's schema is generated from the same msgspec struct that
validates it, and so that invalid arguments are reported without echoing their values.
It serves both protocol eras: the 2026-07-28 per-request envelope (``server/discover``)
and the older ``initialize`` handshake.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext

from engine import __version__
from engine.errors import MemoriesError
from engine.mcp import tools
from engine.mcp.bridge import DaemonBridge
from engine.mcp.listing import GrantView, visible_tools
from engine.mcp.stdio import StdinStream, stdio_streams, threaded_stdio_streams
from engine.mcp_handshake import INSTRUCTIONS, SERVER_TITLE, EarlyInit

__all__ = ["DaemonBridge", "build_server", "serve_stdio", "run_stdio", "check_token", "run_loop", "INSTRUCTIONS"]

log = logging.getLogger("memories.mcp")


def _error_result(exc: MemoriesError) -> types.CallToolResult:
    """AG-3/API-8: a tool error carries the stable code and the secret-free sentence."""
    error = {"code": exc.code, "message": exc.message}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"error [{exc.code}]: {exc.message}")],
        structured_content={"error": error},
        is_error=True,
    )


def _tool_objects() -> list[types.Tool]:
    return [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=tools.input_schema(spec),
            annotations=types.ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                open_world_hint=False,
            ),
        )
        for spec in tools.TOOLS
    ]


def build_server(
    call: tools.Call, *, on_unauthorized: Callable[[], None] | None = None, grant: GrantView | None = None
) -> Server[Any]:
    """An SDK server whose tools send engine requests through ``call``; ``tools/list`` shows
    only the tools ``grant`` can call (all of them while it is not known)."""
    tool_list = _tool_objects()
    by_name = {t.name: t for t in tool_list}
    # Streamable HTTP checks Mcp-Param-* headers against the called tool's schema on every
    # call, walking the schema twice. Only x-mcp-header annotations give it anything to
    # check; our schemas have none, and None means "nothing to validate" to the SDK.
    schemas = {t.name: t.input_schema for t in tool_list if "x-mcp-header" in json.dumps(t.input_schema)}

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        if grant is None:
            return types.ListToolsResult(tools=tool_list)
        return types.ListToolsResult(tools=[by_name[spec.name] for spec in visible_tools(await grant.get())])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            result = await tools.run_tool(params.name, params.arguments, call)
        except MemoriesError as exc:
            if exc.code == "unauthorized" and on_unauthorized is not None:
                on_unauthorized()
            return _error_result(exc)
        except Exception as exc:
            # Only the type: an exception's text could carry request data.
            log.error("tool %s failed: %s", params.name, type(exc).__name__)
            return _error_result(MemoriesError("internal"))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=tools.dumps(result))],
            structured_content=result,
        )

    server: Server[Any] = Server(
        "memories",
        version=__version__,
        title=SERVER_TITLE,
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # The SDK opens an OpenTelemetry span per message by default; this process installs no
    # exporter, so the span is a no-op that still costs its setup on every call. The SDK's
    # documented opt-out is to drop it from this list (matched by name: its module is private).
    server.middleware[:] = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
    return server


def check_token(bridge: DaemonBridge) -> dict[str, Any] | None:
    """Validate the token once at start-up; a wrong token is fatal, a locked vault is not."""
    try:
        return bridge.whoami()
    except MemoriesError as exc:
        if exc.code in ("locked", "daemon_unavailable", "not_initialized", "timeout"):
            print(f"memories mcp: engine not ready ({exc.code}); tools will answer once it is unlocked", file=sys.stderr)
            return None
        raise


def configure_logging() -> None:
    """stdout belongs to the protocol: diagnostics go to stderr, warnings and worse only."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("memories mcp: %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def run_loop(main: Callable[..., Any], *args: Any) -> None:
    """``anyio.run`` on uvloop where installed (a project dependency off Windows): its C event
    loop takes the SDK's many task and stream hand-offs per message for less (callgrind, stdio
    server with a canned answer: 2.10 M → 1.67 M instructions per call).
    ``MEMORIES_MCP_LOOP=asyncio`` selects the standard loop (e.g. to rule uvloop out)."""
    use_uvloop = False
    if os.environ.get("MEMORIES_MCP_LOOP") != "asyncio":
        try:
            import uvloop  # noqa: F401
        except ImportError:  # Windows, or not installed: the standard loop works the same, slower
            pass
        else:
            use_uvloop = True
    anyio.run(main, *args, backend_options={"use_uvloop": use_uvloop})


async def _run_stdio(server: Server[Any], bridge: DaemonBridge, early: EarlyInit | None = None) -> None:
    try:
        async with stdio_streams() as native:
            if native is not None:
                read, write = _after_early(early, native[0], native[1])
                await server.run(read, write, server.create_initialization_options())
                return
        # Not a pipe or a socket (a file, a terminal) or Windows: the same streams on threads.
        async with threaded_stdio_streams() as (read_stream, write_stream):
            read, write = _after_early(early, read_stream, write_stream)
            await server.run(read, write, server.create_initialization_options())
    finally:
        await bridge.aclose()


def _after_early(early: EarlyInit | None, read: StdinStream, write: Any) -> tuple[Any, Any]:
    """The screened streams after ``answer_initialize``: the line it read goes through the same
    screening as every other (a malformed first line is answered, not handed to the SDK), and the
    SDK's own answer to an ``initialize`` already answered is noted (its protocol version decides
    whether batches exist) but not written."""
    if early is not None and early.line:
        read.prepend_line(early.line, early.answered_id)
    return read, write


def serve_stdio(socket_path: Path, token: str, early: EarlyInit | None = None) -> int:
    configure_logging()
    bridge = DaemonBridge(socket_path, token)
    known = check_token(bridge)
    return run_stdio(bridge, GrantView(bridge.whoami_async, known), early)


def run_stdio(bridge: DaemonBridge, grant: GrantView | None = None, early: EarlyInit | None = None) -> int:
    """Serve MCP on stdin/stdout, sending tool calls through ``bridge``, until stdin closes.

    ``early``: the handshake already answered before the SDK was imported (engine/mcp_handshake.py)."""
    run_loop(_run_stdio, build_server(bridge.call, grant=grant), bridge, early)
    return 0
