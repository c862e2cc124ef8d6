"""Search inside files (issue 16, FI-1, issue 27): title and tags always; a text file's first 64 KiB
only when the user made that file searchable; never a binary payload, and never a file in an
agent's results (AG-2)."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.data import make_files_fixture as legacy
from tests.helpers import Cli


def _hits(cli: Cli, query: str) -> set[str]:
    return {hit["id"] for hit in cli.ok("search", query)["results"]}


def test_searchable_text_files_are_found_by_their_words_binary_files_by_title_and_tags(vault: Cli, tmp_path: Path) -> None:
    """FI-1: a searchable text file's body is searchable (bounded sample); a binary file only by title and tags."""
    text = tmp_path / "minutes.txt"
    text.write_text("Board minutes: we agreed on the quokkasaurus budget.\n" + "filler line\n" * 2000)
    late = tmp_path / "late.txt"
    late.write_text("x" * (70 * 1024) + "\nthe word zanzibarite appears only after 64 KiB\n")
    blob = tmp_path / "photo.bin"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 narwhalium " + bytes(range(256)) * 64)
    text_id = vault.ok("file", "add", str(text), "--searchable")["id"]
    late_id = vault.ok("file", "add", str(late), "--searchable")["id"]
    blob_id = vault.ok("file", "add", str(blob), "--title", "Holiday photo", "--tag", "lighthouse", "--searchable")["id"]

    assert text_id in _hits(vault, "quokkasaurus")
    assert late_id not in _hits(vault, "zanzibarite")  # past the sample: bounded
    assert blob_id not in _hits(vault, "narwhalium")  # bytes of a binary file are never indexed
    assert blob_id in _hits(vault, "Holiday photo")
    assert blob_id in _hits(vault, "lighthouse")


def test_agents_never_see_files_in_search(vault: Cli, tmp_path: Path) -> None:
    """AG-2: no file op is open to agents, so search hides files from every grant."""
    note = tmp_path / "agenda.txt"
    note.write_text("the gorgonzolite agenda\n")
    file_id = vault.ok("file", "add", str(note), "--searchable")["id"]
    vault.ok("put", "--title", "gorgonzolite memo", "--body", "a memory about the same word")
    assert file_id in _hits(vault, "gorgonzolite")
    vault.sudo()
    token = vault.ok("mcp", "grant", "--name", "reader", "--scope", "read")["token"]
    with IpcClient(Paths(vault.home).socket) as client:
        found = client.request({"op": "mcp_call", "token": token, "request": {"op": "search", "query": "gorgonzolite"}})
    result = found.get("result", found)  # mcp_call wraps the inner op's answer
    assert "results" in result, sorted(found)
    ids = {hit["id"] for hit in result["results"]}
    assert ids and file_id not in ids  # the memory is found, the file is not


CANARY = "zq-canary-4417-DB_PASSWORD"


def _listed(cli: Cli, file_id: str) -> dict[str, object]:
    found: list[dict[str, object]] = [item for item in cli.ok("file", "list")["items"] if item["id"] == file_id]
    assert len(found) == 1
    return found[0]


def test_file_text_is_not_searched_unless_the_file_is_made_searchable(vault: Cli, tmp_path: Path) -> None:
    """Issue 27: a file is found by its title and tags only; its text reaches the index only for a
    file added with --searchable or switched with `file edit --searchable`, and leaves it again
    with --no-searchable; `file list` says which, and the setting holds across a lock."""
    env = tmp_path / "prod.env"
    env.write_text(f"DB_PASSWORD={CANARY}\n")
    file_id = vault.ok("file", "add", str(env), "--tag", "deploy")["id"]
    assert _listed(vault, file_id)["searchable"] is False
    assert file_id not in _hits(vault, CANARY)
    assert file_id in _hits(vault, "prod.env") and file_id in _hits(vault, "deploy")

    edited = vault.ok("file", "edit", file_id[:8], "--searchable")
    assert edited["searchable"] is True and edited["title"] == "prod.env" and edited["tags"] == ["deploy"]
    assert file_id in _hits(vault, CANARY)
    assert _listed(vault, file_id)["searchable"] is True
    assert "searchable" in vault.run("file", "list").stdout
    out = tmp_path / "back.env"
    vault.ok("file", "get", file_id[:8], "-o", str(out))  # the new revision names the same bytes
    assert out.read_bytes() == env.read_bytes()

    vault.ok("lock")
    vault.unlock()
    assert file_id in _hits(vault, CANARY)
    vault.ok("file", "edit", file_id[:8], "--no-searchable")
    assert file_id not in _hits(vault, CANARY)
    vault.ok("lock")
    vault.unlock()  # the index is rebuilt from stored token streams: the old text must not come back
    assert file_id not in _hits(vault, CANARY)
    assert len(vault.ok("history", file_id[:8])["revisions"]) == 3

    # --update keeps the setting unless told; --searchable on add sets it.
    second = tmp_path / "second.env"
    second.write_text(f"OTHER={CANARY}-2\n")
    other = vault.ok("file", "add", str(second), "--searchable")["id"]
    assert other in _hits(vault, f"{CANARY}-2")
    second.write_text(f"OTHER={CANARY}-3\n")
    vault.ok("file", "add", str(second), "--update", other[:8])
    assert _listed(vault, other)["searchable"] is True and other in _hits(vault, f"{CANARY}-3")


def test_file_edit_needs_a_change_and_a_file(vault: Cli, tmp_path: Path) -> None:
    """Issue 27, API-8: `file edit` without a change is a usage error, and on a note a typed one."""
    note = vault.put("a note", "not a file")
    assert vault.err("file", "edit", note["id"], "--searchable")["code"] == "invalid_input"
    proc = vault.run("file", "edit", note["id"])
    assert proc.returncode == 2 and "name what to change" in proc.stderr


def test_a_file_stored_before_the_setting_is_not_searched_by_its_text(cli: Cli) -> None:
    """Issue 27, migration: a store written before the per-file setting (tests/data/store-files-v1,
    whose search-token cache holds the file's text) opens with the file found by its title and
    tags only, marked not searchable, until the user makes it searchable."""
    cli.home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(legacy.FIXTURE, cli.home / "store.db")
    cli.unlock(legacy.PASSWORD)
    listed = cli.ok("file", "list")["items"]
    assert [(item["title"], item["searchable"]) for item in listed] == [(legacy.FILE_NAME, False)]
    file_id = listed[0]["id"]
    assert file_id not in _hits(cli, legacy.CANARY)
    assert file_id in _hits(cli, "legacy")
    cli.ok("file", "edit", file_id, "--searchable")
    assert file_id in _hits(cli, legacy.CANARY)
