"""The foundation's user flow through the real CLI and daemon (HI-1, HI-3, HI-4, API-8)."""

from __future__ import annotations

from tests.helpers import Cli


def test_put_list_get_edit_history_diff_delete(vault: Cli) -> None:
    """HI-1/HI-3: every save appends a signed revision; delete is a tombstone kept in history."""
    put = vault.ok("put", "--title", "Flat white", "--body", "Ana takes it without sugar", "--tag", "coffee")
    assert set(put) >= {"id", "short_id", "revision", "short_revision"}
    assert put["id"].startswith(put["short_id"]) and len(put["short_id"]) >= 8

    listed = vault.ok("list")
    assert listed["total"] == 1
    item = listed["items"][0]
    assert (item["title"], item["tags"], item["conflict"]) == ("Flat white", ["coffee"], False)

    got = vault.ok("get", put["short_id"][:5])  # any unique prefix works
    assert got["body"] == "Ana takes it without sugar"
    assert got["revision"] == put["revision"]

    edited = vault.ok("edit", put["short_id"], "--body", "Ana takes it with oat milk")
    assert edited["conflict"] is False and edited["revision"] != put["revision"]

    history = vault.ok("history", put["short_id"])["revisions"]
    assert [r["revision"] for r in history] == [put["revision"], edited["revision"]]
    assert history[1]["parents"] == [put["revision"]]
    assert history[1]["head"] and not history[0]["head"]

    diff = vault.ok("diff", put["short_id"])["diff"]
    assert "-Ana takes it without sugar" in diff and "+Ana takes it with oat milk" in diff
    explicit = vault.ok("diff", put["short_id"], put["short_revision"], edited["short_revision"])["diff"]
    assert explicit == diff

    vault.ok("delete", put["short_id"])
    assert vault.ok("list")["total"] == 0
    assert vault.err("get", put["short_id"])["code"] == "not_found"
    history = vault.ok("history", put["short_id"])
    assert history["deleted"] is True and len(history["revisions"]) == 3
    assert history["revisions"][-1]["tombstone"] is True


def test_text_output_uses_short_ids(vault: Cli) -> None:
    put = vault.put("Short", "body")
    text = vault.run("list").stdout
    assert put["short_id"] in text and put["id"] not in text


def test_typed_errors_on_cli(vault: Cli) -> None:
    """API-8: a stable code and one sentence, non-zero exit, in --json and in text."""
    assert vault.err("get", "zzzz")["code"] == "invalid_input"
    assert vault.err("get", "abcdef0123")["code"] == "not_found"
    proc = vault.run("get", "abcdef0123")
    assert proc.returncode == 1
    assert proc.stderr.startswith("memories: error [not_found]: ")
    usage = vault.run("put")  # no --title
    assert usage.returncode == 2 and "[usage]" in usage.stderr


def test_ambiguous_prefix(vault: Cli) -> None:
    ids = [vault.put(f"n{i}")["id"] for i in range(40)]
    first = sorted(ids)[0]
    # With 40 random ids some single hex digit is shared; find an ambiguous 4-char prefix if any.
    prefixes = [i[:4] for i in ids]
    shared = [p for p in set(prefixes) if prefixes.count(p) > 1]
    if shared:
        assert vault.err("get", shared[0])["code"] == "ambiguous_id"
    assert vault.ok("get", first)["id"] == first


def test_unicode_content_round_trips(vault: Cli) -> None:
    body = "长期记忆 encryption 🔐\nzweite Zeile\n" * 10
    put = vault.put("记忆库 notes", body, "中文")
    got = vault.ok("get", put["id"])
    assert got["body"] == body and got["tags"] == ["中文"]


def test_large_body_spans_chunks(vault: Cli, tmp_path: object) -> None:
    """ST-4: a body larger than one 256 KiB chunk is split and reassembled."""
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "big.txt"
    body = ("0123456789abcdef" * 64 + "\n") * 700  # ~ 700 KiB
    path.write_text(body, encoding="utf-8")
    put = vault.ok("put", "--title", "big", "--body-file", str(path))
    assert vault.ok("get", put["id"])["body"] == body
