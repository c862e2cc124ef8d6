"""Importing this package registers every op handler with the registry (and feature hooks)."""

from engine.service.handlers import (
    agents,  # annotate: dated, attributed notes on memories and cards (issue 18, AG-7)
    assets,  # put, edit, get, list, delete, history, diff
    audit,  # the audit log, readable by its owner (AU-1, issue 13)
    backup,  # backup create/verify, restore (issue 15, BK-1, BK-2)
    cards,  # cards, links, graph, protected cards, OTP, secret maps, copy (issue 4)
    centers,  # [[centers]]: Center ticket apply, ticket-made grants, saas routing (issue 30, CT-1)
    cloud,  # cloud object sync: accounts, outbox/inbox, S3 (issue 21, CL-2, CL-3)
    credentials,  # credential new/generate/public (issue 7)
    cycle,  # memory cycle once and agent conclusions: distilled memories pointing at turns (issue 28, AG-9)
    dashboard,  # the dashboard's listing of ordinary items (issue 17)
    devices,  # whoami, devices, device request/approve/join/revoke (issue 13)
    files,  # file add/get/list/history: chunked upload and download (issue 16, FI-1)
    jobs,  # crypto jobs: job plan/show/run (issue 16, JB-1 … JB-3)
    live,  # the change feed, needs-attention and unsearched conflicts (DT-7)
    logins,  # login cards and moving-in batches (issue 15)
    mcp_grants,  # MCP grants and mcp_call (issue 6)
    notebook,  # each connected agent's private notebook and scratch pad (issue 28, AG-13)
    remote,  # remote sessions, tickets, proxies (issue 7)
    restore,  # restore_revision (an earlier revision as a new one; undelete) and trash (issue 31, DT-8)
    run,  # memories run: secrets into a child's environment (issue 16, RN-1, API-7)
    search,  # search, retrieve, ask, rag (issue 3)
    session,  # status, init, unlock, lock, sudo, shutdown
    settings,  # the settings people change: idle lock, screen-lock lock, clipboard, theme (DT-9)
    sync,  # sync listener, tokens, sync runs, status (issue 14)
    sync_local,  # quarantine review, vault fork resolve (issue 14, SY-2, SY-3)
    transcripts,  # agent transcripts: import, list, show, recall_turn, recall_session (issue 18, AG-5)
    transfer,  # import, export
    vaults,  # vault new, vaults, members, roles, transfer, rotate (issue 13)
    wikilinks,  # [[wikilinks]] in a note's body become graph links (issue 31, DT-8)
)

__all__ = [
    "agents",
    "assets",
    "audit",
    "backup",
    "cards",
    "centers",
    "cloud",
    "credentials",
    "cycle",
    "dashboard",
    "devices",
    "files",
    "jobs",
    "live",
    "logins",
    "mcp_grants",
    "notebook",
    "remote",
    "restore",
    "run",
    "search",
    "session",
    "settings",
    "sync",
    "sync_local",
    "transcripts",
    "transfer",
    "wikilinks",
    "vaults",
]
