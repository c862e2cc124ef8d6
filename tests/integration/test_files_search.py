"""Search inside files (issue 16, FI-1): title and tags always, a text file's first 64 KiB too;
never a binary payload, and never a file in an agent's results (AG-2)."""

from __future__ import annotations

from pathlib import Path

from engine.config import Paths
from engine.ipc.client import IpcClient
from tests.helpers import Cli


def _hits(cli: Cli, query: str) -> set[str]:
    return {hit["id"] for hit in cli.ok("search", query)["results"]}


def test_text_files_are_found_by_their_words_binary_files_by_title_and_tags(vault: Cli, tmp_path: Path) -> None:
    """FI-1: a text file's body is searchable (bounded sample); a binary file only by title and tags."""
    text = tmp_path / "minutes.txt"
    text.write_text("Board minutes: we agreed on the quokkasaurus budget.\n" + "filler line\n" * 2000)
    late = tmp_path / "late.txt"
    late.write_text("x" * (70 * 1024) + "\nthe word zanzibarite appears only after 64 KiB\n")
    blob = tmp_path / "photo.bin"
    blob.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 narwhalium " + bytes(range(256)) * 64)
    text_id = vault.ok("file", "add", str(text))["id"]
    late_id = vault.ok("file", "add", str(late))["id"]
    blob_id = vault.ok("file", "add", str(blob), "--title", "Holiday photo", "--tag", "lighthouse")["id"]

    assert text_id in _hits(vault, "quokkasaurus")
    assert late_id not in _hits(vault, "zanzibarite")  # past the sample: bounded
    assert blob_id not in _hits(vault, "narwhalium")  # bytes of a binary file are never indexed
    assert blob_id in _hits(vault, "Holiday photo")
    assert blob_id in _hits(vault, "lighthouse")


def test_agents_never_see_files_in_search(vault: Cli, tmp_path: Path) -> None:
    """AG-2: no file op is open to agents, so search hides files from every grant."""
    note = tmp_path / "agenda.txt"
    note.write_text("the gorgonzolite agenda\n")
    file_id = vault.ok("file", "add", str(note))["id"]
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
