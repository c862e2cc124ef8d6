"""Issue 31 (DT-8): restoring an earlier revision as a new one, and the trash (deleted items
and bringing one back), through the real CLI and daemon."""

from __future__ import annotations

from tests.helpers import Cli


def test_history_restore_writes_a_new_revision(vault: Cli) -> None:
    """DT-8, HI-3: `history ID --restore REV` writes REV's title, tags and body as a new
    revision on top of the head; history keeps every revision; restoring the head is refused."""
    item = vault.put("Plan v1", "first body", "trip")
    v1 = item["revision"]
    vault.ok("edit", item["id"], "--title", "Plan v2", "--body", "second body", "--tag", "other")
    restored = vault.ok("history", item["id"], "--restore", v1[:12])
    assert restored["restored_from"] == v1 and restored["undeleted"] is False
    now = vault.ok("get", item["id"])
    assert (now["title"], now["body"], now["tags"]) == ("Plan v1", "first body", ["trip"])
    assert now["revision"] not in (v1,)
    revisions = vault.ok("history", item["id"])["revisions"]
    assert len(revisions) == 3 and [r["title"] for r in revisions] == ["Plan v1", "Plan v2", "Plan v1"]
    error = vault.err("history", item["id"], "--restore", now["revision"])
    assert error["code"] == "invalid_input" and "already the current" in error["message"]
    assert len(vault.ok("history", item["id"])["revisions"]) == 3  # the refusal changed nothing


def test_trash_lists_deleted_items_and_restores_one(vault: Cli) -> None:
    """DT-8: `trash` lists deleted items (newest deletion first) and `trash restore ID` brings
    one back as a revision after its tombstone; restoring a deletion revision is refused."""
    keep = vault.put("Keep me", "alive")
    gone = vault.put("Gone note", "the body that comes back", "old")
    other = vault.put("Other gone", "x")
    assert vault.ok("trash")["items"] == []
    vault.ok("delete", gone["id"])
    vault.ok("delete", other["id"])
    trash = vault.ok("trash")
    assert [i["title"] for i in trash["items"]] == ["Other gone", "Gone note"]
    assert keep["id"] not in {i["id"] for i in trash["items"]}
    tomb = next(r for r in vault.ok("history", gone["id"])["revisions"] if r["tombstone"])
    assert vault.err("history", gone["id"], "--restore", tomb["revision"])["code"] == "invalid_input"
    back = vault.ok("trash", "restore", gone["id"][:10])
    assert back["undeleted"] is True and back["restored_from"] == gone["revision"]
    got = vault.ok("get", gone["id"])
    assert (got["title"], got["body"], got["tags"]) == ("Gone note", "the body that comes back", ["old"])
    assert [i["title"] for i in vault.ok("trash")["items"]] == ["Other gone"]
    history = vault.ok("history", gone["id"])["revisions"]
    assert history[-1]["parents"] == [tomb["revision"]]  # the restore follows the tombstone
    assert "Other gone" in vault.run("trash").stdout  # the human listing


def test_restore_of_a_protected_kind_is_refused(vault: Cli) -> None:
    """DT-8: logins, protected cards and credentials keep their own commands; nothing changes."""
    login = vault.ok("login", "new", "--title", "Bank", "--username", "u", "--password-stdin", input="pw-restore-1")
    error = vault.err("trash", "restore", login["id"])
    assert error["code"] == "invalid_input" and "own commands" in error["message"]
