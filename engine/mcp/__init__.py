"""Agents over MCP (SPEC §8): grants and their checks (daemon side), tools and transports.

Importing this package is cheap: the daemon-side modules (``grants``, ``requests``,
``handlers``, ``recall``) use only the engine and the standard library; the MCP SDK (and
anyio, uvloop, uvicorn) is imported only by ``engine.mcp.server`` / ``http`` / ``stdio`` /
``bridge``, which run in the ``memories mcp`` process (an IPC client of the daemon, never
the daemon itself).
"""
