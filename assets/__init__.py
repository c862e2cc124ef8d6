"""Package data shipped with Memories: tray icons and the agent SKILL.md (no code)."""
