"""How a credential reference resolves: a full ID always wins, and a reference that could
mean two credentials is refused instead of resolved by the store's order (API-8)."""

from __future__ import annotations

from typing import Any

from tests.helpers import Cli


def _tcp(vault: Cli, name: str, port: int) -> dict[str, Any]:
    return vault.ok("credential", "new", "tcp", "--name", name, "--host", "127.0.0.1", "--port", str(port))


def _show(vault: Cli, ref: str) -> dict[str, Any]:
    return vault.ok("credential", "show", ref)


def test_a_name_that_spells_another_credentials_id_never_stands_in_for_it(vault: Cli) -> None:
    real = _show(vault, _tcp(vault, "production", 5432)["id"])
    impostor_name = real["id"]
    _tcp(vault, impostor_name, 6666)
    shown = _show(vault, real["id"])
    assert shown["name"] == "production"
    assert shown["public"]["port"] == 5432


def test_a_name_that_is_another_credentials_id_prefix_is_ambiguous(vault: Cli) -> None:
    real = _show(vault, _tcp(vault, "production", 5432)["id"])
    prefix = real["id"][:8]
    other = _show(vault, _tcp(vault, prefix, 6666)["id"])
    error = vault.err("credential", "show", prefix)
    assert error["code"] == "ambiguous_id"
    assert {c["id"] for c in error["candidates"]} == {real["id"], other["id"]}
    # Either one is still reachable by a reference that means only it.
    assert _show(vault, real["id"][:12])["name"] == "production"
    assert _show(vault, other["id"])["name"] == prefix


def test_a_unique_name_and_a_unique_prefix_both_resolve(vault: Cli) -> None:
    made = _show(vault, _tcp(vault, "staging db", 5433)["id"])
    assert _show(vault, "staging db")["id"] == made["id"]
    assert _show(vault, made["id"][:8])["id"] == made["id"]
    assert vault.err("credential", "show", "no such credential")["code"] == "not_found"
