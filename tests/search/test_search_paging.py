"""DT-7: a search counts every match and pages through all of them (engine op and CLI), beyond 100."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import Cli

MATCHES = 174


def _seed(vault: Cli, tmp_path: Path) -> None:
    bulk = tmp_path / "bulk.jsonl"
    with bulk.open("w") as out:
        for i in range(MATCHES):
            out.write(json.dumps({"title": f"Loaf {i:03d}", "body": f"sourdough starter feeding log {i}"}) + "\n")
        out.write(json.dumps({"title": "Unrelated", "body": "tomatoes"}) + "\n")
    vault.ok("import", str(bulk))


def test_dt7_search_total_and_offset_reach_every_match(vault: Cli, tmp_path: Path) -> None:
    """DT-7: `search` reports the total (174, not the page size), --limit goes beyond 100 and
    --offset reaches the rest; the pages do not overlap and together hold every match."""
    _seed(vault, tmp_path)
    first = vault.ok("search", "sourdough", "--limit", "150")
    assert first["total"] == MATCHES and first["offset"] == 0 and len(first["results"]) == 150
    rest = vault.ok("search", "sourdough", "--limit", "100", "--offset", "150")
    assert rest["total"] == MATCHES and len(rest["results"]) == MATCHES - 150
    assert [r["rank"] for r in rest["results"]] == list(range(151, MATCHES + 1))
    ids = [r["id"] for r in first["results"] + rest["results"]]
    assert len(set(ids)) == MATCHES
    small = vault.ok("search", "sourdough")  # the default page of 10 still says how many match
    assert small["total"] == MATCHES and len(small["results"]) == 10

    text = vault.run("search", "sourdough", "--limit", "20", "--offset", "40")
    assert text.returncode == 0, text.stderr
    assert f"(41–60 of {MATCHES} matches; next: --offset 60)" in text.stdout
    assert text.stdout.lstrip().startswith("41. ")
    past = vault.run("search", "sourdough", "--offset", "500")
    assert f"(no matches at --offset 500; there are {MATCHES})" in past.stdout

    bad = vault.run("search", "sourdough", "--limit", "501")
    assert bad.returncode != 0 and "--limit must be between 1 and 500" in bad.stderr
    bad = vault.run("search", "sourdough", "--offset", "-1")
    assert bad.returncode != 0 and "--offset" in bad.stderr
