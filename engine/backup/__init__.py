"""Backup files and restore (SPEC BK-1, BK-2): the envelope format, what goes in, how a restore rebuilds a store."""
