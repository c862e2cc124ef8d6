"""``memories inject``: install the packaged SKILL.md for agent clients (AG-4). Stdlib only."""
