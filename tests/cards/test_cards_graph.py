"""Typed cards and links through the real CLI and daemon (CD-1, CD-2, CD-3, HI-1, HI-3, HI-4)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.cards.conftest import state_rows, wait_for
from tests.helpers import Cli, raw, raw_error


def new_card(cli: Cli, kind: str, title: str, body: str = "", *meta: str) -> dict[str, Any]:
    """Setup over raw IPC (fast); the CLI path of `card new` is exercised in the first test."""
    pairs = dict(item.split("=", 1) for item in meta)
    return raw(cli, {"op": "card_write", "type": kind, "title": title, "body": body, "meta": pairs})


def graph(cli: Cli, **fields: Any) -> dict[str, Any]:
    return raw(cli, {"op": "graph", **fields})


def test_cards_are_typed_assets_on_the_shared_dag(vault: Cli) -> None:
    """CD-1, HI-1, HI-3: typed metadata validated on write, and every generic op works on cards."""
    card = vault.ok(
        "card",
        "new",
        "--type",
        "knowledge",
        "--title",
        "Postgres on prod",
        "--body",
        "primary is db1",
        "--meta",
        "source=https://wiki/pg",
        "--meta",
        "confidence=0.8",
    )
    shown = vault.ok("card", "show", card["id"])
    assert (shown["kind"], shown["meta"]) == ("knowledge", {"source": "https://wiki/pg", "confidence": "0.8"})
    assert vault.ok("get", card["short_id"])["body"] == "primary is db1"
    assert [i["kind"] for i in vault.ok("list")["items"]] == ["knowledge"]
    vault.ok("edit", card["id"], "--body", "primary is db2", "--meta", "domain=databases")
    vault.ok("card", "edit", card["id"], "--title", "Postgres (prod)")
    history = vault.ok("history", card["id"])["revisions"]
    assert [r["title"] for r in history] == ["Postgres on prod", "Postgres on prod", "Postgres (prod)"]
    diff = vault.ok("diff", card["id"], history[0]["revision"], history[2]["revision"])["diff"]
    assert "-primary is db1" in diff and "+primary is db2" in diff and "+meta.domain: databases" in diff
    for kind, meta in (("brain", "category=lesson"), ("persona", "tone=dry")):
        assert vault.ok("card", "show", new_card(vault, kind, kind, "", meta)["id"])["meta"]


def test_bad_metadata_is_a_typed_error_and_changes_nothing(vault: Cli) -> None:
    """CD-1, API-8: unknown keys and bad values are refused on create and on edit."""
    card = new_card(vault, "brain", "Rule", "", "category=rule")
    before = state_rows(vault)
    err = vault.err("card", "new", "--type", "brain", "--title", "x", "--meta", "category=nonsense")
    assert err["code"] == "invalid_metadata"
    for meta in ({"colour": "red"}, {"confidence": "1.5"}, {"reviewed": "2026-13-01"}):
        refused = raw_error(vault, {"op": "card_write", "type": "knowledge", "title": "x", "meta": meta})
        assert refused.code == "invalid_metadata"
    assert vault.err("edit", card["id"], "--meta", "priority=urgent")["code"] == "invalid_metadata"
    refused = raw_error(vault, {"op": "card_write", "id": card["id"], "type": "persona", "title": "y"})
    assert refused.code == "invalid_input"
    assert raw_error(vault, {"op": "card_write", "type": "protected", "title": "y"}).code == "invalid_request"
    assert state_rows(vault) == before
    assert len(vault.ok("history", card["id"])["revisions"]) == 1


def future(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def test_links_graph_and_connections(vault: Cli) -> None:
    """CD-2: directed labelled edges with confidence, neighbourhoods by depth, unlink, persistence."""
    a, b, c, d = (new_card(vault, "knowledge", name)["id"] for name in "ABCD")
    link = vault.ok("card", "link", a, b, "--rel", "depends_on", "--confidence", "0.8", "--valid-till", "2099-01-01")
    assert (link["rel"], link["confidence"]) == ("depends_on", 0.8)
    raw(vault, {"op": "card_link", "src": b, "dst": c})
    raw(vault, {"op": "card_link", "src": c, "dst": d})
    hood = vault.ok("graph", a, "--depth", "2")
    assert {n["id"]: n["distance"] for n in hood["nodes"]} == {a: 0, b: 1, c: 2}
    assert len(hood["edges"]) == 2
    out = vault.ok("card", "connections", b, "--direction", "out")
    assert [n["id"] for n in out["neighbours"]] == [c]
    both = vault.ok("card", "connections", b)
    assert {n["id"] for n in both["neighbours"]} == {a, c}
    assert vault.ok("card", "show", b)["links"] == {"out": 1, "in": 1}
    # Relinking the same pair and relation replaces the edge rather than duplicating it.
    assert vault.ok("card", "link", a, b, "--rel", "depends_on", "--confidence", "0.3")["replaced"] == 1
    assert len(graph(vault)["edges"]) == 3
    recall = vault.ok("card", "recall", a, "--hops", "3")["results"]
    assert [r["id"] for r in recall] == [b, c, d]
    assert recall[0]["activation"] > recall[1]["activation"] > recall[2]["activation"]
    assert vault.ok("card", "unlink", c, d)["unlinked"] == 1
    assert vault.err("card", "unlink", c, d)["code"] == "not_found"
    vault.ok("lock")
    vault.unlock()
    assert len(vault.ok("graph")["edges"]) == 2  # rebuilt from the encrypted records on unlock
    vault.stop()
    vault.unlock()
    assert {(e["src"], e["dst"]) for e in vault.ok("graph")["edges"]} == {(a, b), (b, c)}


def test_bad_links_are_refused_and_change_nothing(vault: Cli) -> None:
    """CD-2, API-8: self-links, bad confidence, past valid_till, credentials and unknown IDs."""
    a, b = (new_card(vault, "persona", name)["id"] for name in "AB")
    prot = vault.ok("protected", "new", "--title", "T", "--token-stdin", input="tok-123456\n")
    cred = vault.ok("card", "show", prot["id"])["protected"]["credential"].removeprefix("cred:")
    cases = [
        ((a, a), "invalid_input"),
        ((a, b, "--confidence", "0"), "invalid_request"),
        ((a, b, "--confidence", "1.5"), "invalid_request"),
        ((a, b, "--valid-till", "2001-01-01"), "invalid_input"),
        ((a, b, "--valid-till", "next tuesday"), "invalid_input"),
        ((a, cred), "invalid_input"),
        ((a, "ffffffffffff"), "not_found"),
        ((a, b, "--rel", "has space"), "invalid_request"),
    ]
    for args, code in cases[:2]:
        assert vault.err("card", "link", *args)["code"] == code, args
    for args, code in cases[2:]:
        item: dict[str, Any] = {"op": "card_link", "src": args[0], "dst": args[1]}
        if len(args) > 2:
            item[args[2].lstrip("-").replace("-", "_")] = float(args[3]) if args[2] == "--confidence" else args[3]
        assert raw_error(vault, item).code == code, args
    assert graph(vault)["edges"] == []


def test_expired_edges_tombstones_and_conflicts_in_projections(vault: Cli) -> None:
    """CD-2, HI-4: expired edges are ignored; deleted or conflicted nodes leave no dangling edge."""
    a, b, c = (new_card(vault, "knowledge", name)["id"] for name in "ABC")
    raw(vault, {"op": "card_link", "src": a, "dst": b, "valid_till": future(4)})
    raw(vault, {"op": "card_link", "src": a, "dst": c})
    assert len(graph(vault)["edges"]) == 2
    assert wait_for(lambda: len(graph(vault)["edges"]) == 1)
    assert [n["id"] for n in vault.ok("card", "connections", a)["neighbours"]] == [c]
    assert vault.ok("card", "recall", a)["results"][0]["id"] == c
    # A conflicted node (two heads) is not current: hidden with its edges until resolved.
    base = vault.ok("get", c)["revision"]
    vault.ok("edit", c, "--body", "one", "--base", base)
    vault.ok("edit", c, "--body", "two", "--base", base)
    assert vault.ok("card", "show", c)["conflict"] is True
    view = graph(vault)
    assert c not in {n["id"] for n in view["nodes"]} and view["edges"] == []
    assert raw(vault, {"op": "connections", "id": a})["neighbours"] == []
    vault.ok("edit", c, "--resolve", "--body", "merged")
    assert len(graph(vault)["edges"]) == 1
    # A tombstoned endpoint: no dangling edge anywhere, in either direction.
    vault.ok("delete", c)
    for view in (vault.ok("graph"), graph(vault, id=a)):
        assert view["edges"] == [] and c not in {n["id"] for n in view["nodes"]}
    assert vault.ok("card", "show", a)["links"] == {"out": 0, "in": 0}
    assert vault.err("card", "connections", c)["code"] == "not_found"


def test_many_links_in_one_commit_are_all_or_nothing(vault: Cli) -> None:
    """API-8: one bad item refuses the whole batch."""
    ids = [new_card(vault, "brain", f"n{i}")["id"] for i in range(4)]
    good = [{"src": ids[i], "dst": ids[i + 1]} for i in range(3)]
    assert raw_error(vault, {"op": "card_link_many", "links": [*good, {"src": ids[0], "dst": ids[0]}]}).code == "invalid_input"
    assert graph(vault)["edges"] == []
    assert raw(vault, {"op": "card_link_many", "links": good})["linked"] == 3
    assert len(graph(vault, id=ids[0], depth=5)["nodes"]) == 4
