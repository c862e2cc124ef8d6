"""Importing this package registers every handler with the op registry."""

from engine.service.handlers import assets, session, transfer

__all__ = ["assets", "session", "transfer"]
