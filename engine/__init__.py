"""Memories engine: everything headless (store, vault, service, IPC, CLI)."""

__version__ = "0.1.0"
