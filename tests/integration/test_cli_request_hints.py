"""Fields that only help the engine (an import's ``more``) reach an engine started before this
Memories was installed without breaking the command (API-8: the engine refuses a field it does
not know before doing anything, so the CLI sends the request again without it)."""

from __future__ import annotations

import pytest

from engine.cli.context import Context
from engine.errors import MemoriesError
from tests.helpers import Cli


def test_a_hint_the_engine_does_not_know_is_dropped_and_the_request_still_runs(vault: Cli) -> None:
    ctx = Context.create(str(vault.home), json_output=True)
    item = {"title": "hinted", "body": "sent again without the hint"}
    # A field no engine knows stands for one a newer CLI adds: the real engine refuses it.
    with pytest.raises(MemoriesError) as refused:
        ctx.request({"op": "import_batch", "items": [item], "not_known_yet": True})
    assert refused.value.code == "unknown_field"
    assert vault.ok("list")["total"] == 0  # the refused request changed nothing

    result = ctx.request_with_hints({"op": "import_batch", "items": [item]}, {"not_known_yet": True})
    assert result["created"] == 1
    assert vault.ok("list")["total"] == 1
    # Later requests of the same command skip the hints at once.
    again = ctx.request_with_hints({"op": "import_batch", "items": [item]}, {"not_known_yet": True})
    assert again["skipped"] == 1


def test_a_hint_the_engine_knows_is_sent_and_other_errors_are_not_retried(vault: Cli) -> None:
    ctx = Context.create(str(vault.home), json_output=True)
    result = ctx.request_with_hints({"op": "import_batch", "items": [{"title": "a", "body": "b"}]}, {"more": False})
    assert result["created"] == 1
    with pytest.raises(MemoriesError) as failed:
        ctx.request_with_hints({"op": "import_batch", "items": [{"title": 5}]}, {"more": True})
    assert failed.value.code != "unknown_field"
    assert vault.ok("list")["total"] == 1
