"""Encrypted SQLite store: schema, writer lock, atomic init, state rows, checkpoints."""
