"""The `memories` command line: a lean client of the engine's IPC (no crypto imports)."""
