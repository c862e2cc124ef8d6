"""Importing this package registers every handler with the op registry."""

from engine.service.handlers import assets, session, transfer

__all__ = ["assets", "session", "transfer"]
from engine.service.handlers import credentials, remote  # noqa: F401,E402  (issue 7: remote sessions)
from engine.service.handlers import cards  # noqa: F401,E402  (issue 4: cards, links, protected, secrets)
from engine.mcp import handlers as mcp_handlers  # noqa: F401,E402  (issue 6: MCP grants, mcp_call)
from engine.service.handlers import search  # noqa: F401,E402  (issue 3: search, retrieve, ask, rag)
