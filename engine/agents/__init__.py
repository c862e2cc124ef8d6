"""Agents (SPEC §8), domain side: MCP grants — tokens, scopes, capabilities and their records.

Pure logic over the vault's extra records; no sockets, no MCP SDK. The daemon's ops live in
``engine/service/handlers/mcp_grants.py``; the ``memories mcp`` process (``engine/mcp``)
is an IPC client and imports none of this (SPEC LY-1).
"""
