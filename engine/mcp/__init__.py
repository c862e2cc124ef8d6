"""Agents over MCP (SPEC §8), client side: the ``memories mcp`` server, its tools and transports.

Everything here runs in the ``memories mcp`` process, an IPC client of the daemon that holds
no keys (``bridge``, ``server``, ``stdio``, ``http``, ``tools``, ``clients``; ``jsonrpc`` and
``http_screen`` answer what the SDK cannot parse, ``listing`` picks the tools a grant sees).
The daemon side lives below the service line (SPEC LY-1): grant logic in
``engine/agents/grants.py``, retried writes in ``engine/agents/replay.py``, request types in
``engine/service/requests_mcp.py``, the ops (grant create/list/revoke, ``mcp_call``) in
``engine/service/handlers/mcp_grants.py``. The MCP SDK (and anyio, uvloop, uvicorn) is
imported only by ``server`` / ``http`` / ``stdio`` / ``bridge`` / ``jsonrpc`` / ``http_screen``.
"""
