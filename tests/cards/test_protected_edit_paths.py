"""A protected value never comes back in clear, whatever path writes or reads the asset (CD-7, HI-3).

Each route that builds a new revision (CLI edit from an old base, `edit --resolve`, the
dashboard's card save, the MCP write tools, card_write over IPC) is driven through its real
surface against a real daemon; afterwards every read path (get, get --rev, diff, history,
search, MCP reads) and every file under the data home is swept for the canary.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import EngineConfig, Paths
from engine.errors import MemoriesError
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.caller import Caller
from engine.service.service import Service
from tests.desktop.support import start_dashboard, stop_process
from tests.helpers import PASSWORD, Cli, raw, raw_error
from tests.mcp.support import grant, stdio_client, text_of

CANARY = "CANARY-pw-4f1d9e27"
LABEL = "db_pw"


def protected_memory(cli: Cli, kind: str = "memory") -> tuple[str, str, str]:
    """A memory (or card) whose first revision holds the canary, then protected: (id, rev before, rev after)."""
    body = f"host db1\npassword {CANARY}\nport 5432"
    if kind == "memory":
        note = cli.ok("put", "--title", "Database", "--body", body)
    else:
        note = raw(cli, {"op": "card_write", "type": kind, "title": "Database", "body": body})
    before = note["revision"]
    cli.ok("secret", "protect", note["id"], "--label", LABEL, "--value-stdin", input=CANARY + "\n")
    after = raw(cli, {"op": "get", "id": note["id"]})["revision"]
    assert after != before
    return note["id"], before, after


def assert_never_shown(cli: Cli, asset_id: str) -> None:
    """Every read path shows the placeholder; the secret map keeps the label; search never finds it."""
    got = raw(cli, {"op": "get", "id": asset_id})
    for view in got["head_contents"] or [got]:
        assert CANARY not in view["body"]
    assert LABEL in raw(cli, {"op": "card_read", "id": asset_id})["secrets"]
    history = raw(cli, {"op": "history", "id": asset_id})["revisions"]
    revs = [r["revision"] for r in history]
    for rev in revs:
        shown = cli.ok("get", asset_id, "--rev", rev[:12])
        assert CANARY not in shown["body"], f"revision {rev[:12]} shows the value"
        assert CANARY not in str(raw(cli, {"op": "diff", "id": asset_id, "rev_a": rev}))
    text = cli.run("get", asset_id, "--rev", revs[0][:12])
    assert text.returncode == 0 and CANARY not in text.stdout and "{{secret:" + LABEL + "}}" in text.stdout
    assert CANARY not in cli.run("diff", asset_id, revs[0], revs[-1]).stdout
    assert CANARY not in str(cli.ok("history", asset_id))
    for query in (CANARY, "4f1d9e27", "password"):
        found = cli.ok("search", query)["results"]
        assert CANARY not in str(found)
        # The value's own token finds nothing (the other queries match "password" and the label).
        assert all(hit["id"] != asset_id for hit in found) or query != "4f1d9e27"


def stored_bodies_after_protection(cli: Cli, asset_id: str, protected_rev: str) -> list[str]:
    """The signed bodies on disk of every revision written since the protecting one.

    Reads show placeholders even for an old body (they redact), so this opens the real store
    file with the engine's own code, with the daemon stopped, to see what was really signed.
    """
    cli.stop()
    service = Service(Paths(cli.home), EngineConfig())
    service.dispatch({"op": "unlock", "password": PASSWORD}, Caller("cli:test"))
    try:
        state = service.require_unlocked()
        entry = state.index.assets[bytes.fromhex(asset_id)]
        protecting = state.index.revisions[bytes.fromhex(protected_rev)]
        # Every revision written from the protection on, on any branch (an old base included).
        later = [state.index.revisions[r] for r in entry.revisions]
        return [service.vault.body_of(state, r) for r in later if r.seq >= protecting.seq and not r.tombstone]
    finally:
        service.lock_now("test")


def sweep_files(home: Path) -> None:
    """No file under the data home (store, WAL, logs, caches) holds the canary in clear."""
    needle = CANARY.encode()
    for path in home.rglob("*"):
        if path.is_file() and not path.is_socket():
            assert needle not in path.read_bytes(), f"{path} holds the protected value"


def test_cli_edit_from_an_old_base_and_resolve_keep_the_value_protected(vault: Cli) -> None:
    """CD-7, HI-3: `edit --base OLD --title x` then `edit --resolve` never restore the protected value."""
    asset_id, before, after = protected_memory(vault)
    edited = vault.ok("edit", asset_id, "--base", before[:12], "--title", "Database (old base)")
    assert edited["conflict"] is True
    assert_never_shown(vault, asset_id)
    # What the conflict message suggests: resolve without a body takes the newest head.
    resolved = vault.ok("edit", asset_id, "--resolve")
    assert resolved["conflict"] is False
    body = raw(vault, {"op": "get", "id": asset_id})["body"]
    assert body == "host db1\npassword {{secret:" + LABEL + "}}\nport 5432"
    assert_never_shown(vault, asset_id)
    sweep_files(vault.home)
    bodies = stored_bodies_after_protection(vault, asset_id, after)
    assert len(bodies) >= 3 and all(CANARY not in b for b in bodies)


def test_deleting_the_credential_does_not_unmask_old_revisions(vault: Cli) -> None:
    """CD-7: masking reads every value the credential ever held, so deleting it unmasks nothing."""
    asset_id, _, _ = protected_memory(vault)
    cred = raw(vault, {"op": "card_read", "id": asset_id})["secrets"][LABEL].removeprefix("cred:")
    vault.ok("delete", cred)
    assert_never_shown(vault, asset_id)


def test_a_value_typed_again_becomes_its_placeholder(vault: Cli) -> None:
    """CD-7: a body that names a protected value again is stored with the placeholder."""
    asset_id, _, after = protected_memory(vault)
    vault.ok("edit", asset_id, "--base", after[:12], "--body", f"rotated? still {CANARY}")
    assert raw(vault, {"op": "get", "id": asset_id})["body"] == "rotated? still {{secret:" + LABEL + "}}"
    assert_never_shown(vault, asset_id)
    bodies = stored_bodies_after_protection(vault, asset_id, after)
    assert "rotated? still {{secret:" + LABEL + "}}" in bodies and all(CANARY not in b for b in bodies)


def test_card_write_from_an_old_base_and_its_resolution(vault: Cli) -> None:
    """CD-7: card_write (what the dashboard and the card editor send) inherits the map from any base."""
    asset_id, before, _ = protected_memory(vault, "knowledge")
    raw(vault, {"op": "card_write", "id": asset_id, "base": before, "title": "renamed"})
    heads = raw(vault, {"op": "get", "id": asset_id})["head_contents"]
    assert len(heads) == 2
    raw(vault, {"op": "card_write", "id": asset_id, "base": heads[0]["revision"], "resolve": True})
    assert_never_shown(vault, asset_id)


def test_dashboard_save_with_an_old_base(vault: Cli, tmp_path: Path) -> None:
    """CD-7, DT-5: the dashboard's card save with the base the page loaded before protection."""
    asset_id, before, _ = protected_memory(vault)
    dashboard = start_dashboard(vault, tmp_path / "dashboard.log")
    try:
        status, _, saved = dashboard.request("POST", f"/api/cards/{asset_id}", {"base": before, "fields": {"title": "t"}})
        # DT-7: a save over a change made elsewhere is refused (it used to become a conflict);
        # either way the old base never brings the protected value back.
        assert status == 409 and saved["error"]["code"] == "stale_base", saved
        status, _, shown = dashboard.request("GET", f"/api/cards/{asset_id}")
        assert status == 200 and CANARY not in str(shown)
    finally:
        stop_process(dashboard.proc)
    assert_never_shown(vault, asset_id)
    sweep_files(vault.home)


def test_mcp_writes_from_an_old_base_are_refused_and_reads_stay_masked(vault: Cli) -> None:
    """CD-7, AG-2: agents cannot rewrite an asset with secret references from any base; reads show placeholders."""
    asset_id, before, _ = protected_memory(vault)
    card_id, card_before, _ = protected_memory(vault, "knowledge")
    vault.sudo()
    token = grant(vault, "writer", "read_write")
    transcripts: list[str] = []

    async def agent() -> None:
        async with stdio_client(vault, token) as client:
            for name, arguments in (
                ("memory_write", {"id": asset_id[:12], "base": before, "title": "agent"}),
                ("card_write", {"id": card_id[:12], "base": card_before, "title": "agent"}),
            ):
                result = await client.call_tool(name, arguments)
                transcripts.append(text_of(result))
                assert result.is_error and "secret_map_mismatch" in text_of(result)
            for target in (asset_id, card_id):
                for name, arguments in (
                    ("memory_read", {"id": target[:12]}),
                    ("card_read", {"id": target[:12]}),
                    ("history", {"id": target[:12]}),
                ):
                    transcripts.append(text_of(await client.call_tool(name, arguments)))
            for query in ("password", "db1 password", "4f1d9e27"):
                transcripts.append(text_of(await client.call_tool("search", {"query": query})))
                transcripts.append(text_of(await client.call_tool("retrieve", {"query": query})))

    asyncio.run(agent())
    assert all(CANARY not in t for t in transcripts)
    for target in (asset_id, card_id):
        assert len(raw(vault, {"op": "history", "id": target})["revisions"]) == 2
        assert_never_shown(vault, target)


# -- property: random edits, protects and resolves from random bases -------------------------

VALUES = ["alpha-SECRET-0001", "bravo-SECRET-0002", "charlie-SECRET-03"]
STEP = st.tuples(st.sampled_from(["edit", "edit_body", "protect", "resolve"]), st.integers(0, 10_000))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_random_histories_never_expose_a_protected_value(vault: Cli, steps: list[tuple[str, int]]) -> None:
    """CD-7, HI-3: after any sequence of edits / protects / resolves from random bases, no read shows a protected value."""
    body = "notes " + " ".join(VALUES)
    asset_id = raw(vault, {"op": "put", "title": "prop", "body": body})["id"]
    protected: set[str] = set()
    for n, (action, seed) in enumerate(steps):
        rng = random.Random(seed)
        history = raw(vault, {"op": "history", "id": asset_id})["revisions"]
        heads = [r["revision"] for r in history if r["head"]]
        base = rng.choice(history)["revision"]
        if action == "protect":
            value = rng.choice(VALUES)
            if len(heads) == 1 and value not in protected:
                request = {"op": "protect_secret", "id": asset_id, "label": f"v{VALUES.index(value)}", "value": value}
                try:
                    raw(vault, request)
                    protected.add(value)
                except MemoriesError as exc:  # the value may already be gone from the head's body
                    assert exc.code == "invalid_input", exc
        elif action == "resolve":
            if len(heads) > 1:
                raw(vault, {"op": "edit", "id": asset_id, "resolve": True, "base": rng.choice(heads)})
        else:
            if len(heads) > 1:
                assert raw_error(vault, {"op": "edit", "id": asset_id, "base": base, "title": "x"}).code == "conflict"
                continue
            fields: dict[str, Any] = {"title": f"step {n}"}
            if action == "edit_body":
                # Sometimes a body that names a protected value again.
                fields["body"] = f"step {n} " + " ".join(rng.sample(VALUES, 2))
            raw(vault, {"op": "edit", "id": asset_id, "base": base, **fields})
        check_hidden(vault, asset_id, protected)


def check_hidden(cli: Cli, asset_id: str, protected: set[str]) -> None:
    got = raw(cli, {"op": "get", "id": asset_id})
    shown = [view["body"] for view in got["head_contents"] or [got]]
    for rev in raw(cli, {"op": "history", "id": asset_id})["revisions"]:
        shown.append(raw(cli, {"op": "get", "id": asset_id, "rev": rev["revision"]})["body"])
        shown.append(raw(cli, {"op": "diff", "id": asset_id, "rev_a": rev["revision"]})["diff"])
    secrets = raw(cli, {"op": "card_read", "id": asset_id})["secrets"]
    assert set(secrets) == {f"v{VALUES.index(v)}" for v in protected}
    for value in protected:
        assert all(value not in text for text in shown), value
