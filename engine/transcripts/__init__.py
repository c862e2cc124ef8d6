"""Agent transcripts (AG-5, seed 000): versioned adapters → neutral events → one encrypted session asset.

``claude_code`` and ``codex`` parse their client's files; ``model`` holds the events and the
hash identities; ``session`` merges events into a stored session; ``sources`` finds files and
picks an adapter. Nothing here talks to a socket or the store.
"""
