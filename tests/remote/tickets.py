"""The approval round trip every remote test drives through the real CLI (RM-5).

`run_ticket` proposes one instruction on an open session, approves it (the caller must already be
elevated with `memories sudo`) and executes it; `run_once` does the same on a session of its own.
Tests of the ticket rules themselves (unapproved, reused, other namespace…) spell the steps out.
"""

from __future__ import annotations

from typing import Any

from tests.helpers import Cli


def run_ticket(cli: Cli, session: str, instruction: str, *extra: str) -> dict[str, Any]:
    """Propose, approve and execute `instruction` on `session`; the `remote exec` answer (ticket and result)."""
    ticket = cli.ok("remote", "propose", session, instruction, *extra)["ticket"]
    cli.ok("remote", "approve", ticket)
    return cli.ok("remote", "exec", ticket)


def run_once(cli: Cli, credential: str, instruction: str) -> dict[str, Any]:
    """Open a session with `credential`, run one approved instruction, close it; the instruction's result."""
    session = cli.ok("remote", "open", credential)["session"]
    result: dict[str, Any] = run_ticket(cli, session, instruction)["result"]
    cli.ok("remote", "close", session)
    return result
