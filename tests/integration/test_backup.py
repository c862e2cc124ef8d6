"""Backup and restore through the real CLI and daemon (BK-1, BK-2).

One source vault (module-scoped: read-only after it is built) holds every kind of content a
restore must keep; each test restores its backup into a fresh data home with its own daemon.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.backup.envelope import BackupReader
from tests.helpers import Cli, raw
from tests.integration.test_files import pack_files

BACKUP_PW = "backup horse staple 42"
NEW_PW = "new device password 7"
HOTP_URI = "otpauth://hotp/Bank:me?secret=JBSWY3DPEHPK3PXP&counter=3&issuer=Bank"
MAPPED = "CANARY-mapped-secret-5e1"
LOCAL_CANARY = "CANARY-device-only-title-8c2"
NOTES = 1500  # enough that a restore is still running when the test kills the engine


class Source:
    def __init__(self, cli: Cli, backup: Path, ids: dict[str, str], token: str, local_vault: str) -> None:
        self.cli, self.backup, self.ids, self.token, self.local_vault = cli, backup, ids, token, local_vault


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    root = tmp_path_factory.mktemp("backup-source")
    cli = Cli(home=root / "home")
    cli.init()
    ids: dict[str, str] = {}
    ids["plain"] = cli.put("购物清单 Shopping", "牛奶 milk\n鸡蛋 eggs", "home")["id"]
    edited = cli.put("Edited note", "first body")
    cli.ok("edit", edited["id"], "--body", "second body")
    ids["edited"] = edited["id"]
    base = cli.put("Shared note", "v0")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda body: cli.ok("edit", base["id"], "--body", body, "--base", base["revision"]), ["laptop", "phone"]))
    assert cli.ok("get", base["id"])["conflict"] is True
    ids["conflict"] = base["id"]
    card = cli.ok("card", "new", "--type", "knowledge", "--title", "DB notes", "--body", f"login with {MAPPED} please")
    ids["card"] = card["id"]
    cli.ok("secret", "protect", card["id"], "--label", "db_password", "--value-stdin", input=MAPPED + "\n")
    cli.ok("card", "link", card["id"], ids["plain"], "--rel", "mentions")
    otp = cli.ok("protected", "new", "--title", "Bank OTP", "--otp-stdin", input=HOTP_URI + "\n")
    ids["otp"] = otp["id"]
    cli.ok("otp", otp["id"])  # the counter moves on: a restore must keep the new counter
    ids["login"] = cli.ok("login", "new", "--title", "邮箱", "--username", "me@example.cn", "--url", "https://mail.example")["id"]
    deleted = cli.put("Deleted note", "gone")
    cli.ok("delete", deleted["id"])
    ids["deleted"] = deleted["id"]
    blob = root / "contract.bin"
    blob.write_bytes(os.urandom(700 * 1024))  # three body chunks: restored chunk by chunk
    ids["file"] = cli.ok("file", "add", str(blob))["id"]
    cli.ok("local-config", "record")
    cli.ok("put", "--vault", "local", "--title", LOCAL_CANARY, "--body", "only here")
    local_vault = next(v["id"] for v in cli.ok("vaults")["vaults"] if v["name"] == "local")
    cli.sudo()
    token = cli.ok("mcp", "grant", "--name", "claude", "--scope", "read")["token"]
    backup = root / "memories.backup"
    cli.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
    yield Source(cli, backup, ids, token, local_vault)
    cli.stop()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Cli]:
    client = Cli(home=tmp_path / "restored")
    yield client
    client.stop()


def _restore(cli: Cli, backup: Path, backup_pw: str = BACKUP_PW) -> subprocess.CompletedProcess[str]:
    return cli.run("restore", str(backup), "--password-stdin", "--json", input=f"{backup_pw}\n{NEW_PW}\n", timeout=120)


def _restored(cli: Cli, backup: Path) -> dict[str, Any]:
    proc = _restore(cli, backup)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = msgspec.json.decode(proc.stdout)
    return result


def _view(cli: Cli, asset_id: str) -> dict[str, Any]:
    got = cli.ok("get", asset_id)
    keep = ("title", "body", "tags", "meta", "kind", "conflict")
    view = {k: got.get(k) for k in keep}
    view["heads"] = sorted(h["body"] for h in got.get("head_contents", []))
    return view


def test_restore_keeps_content_kinds_conflicts_links_and_secrets(source: Source, target: Cli) -> None:
    """BK-2: content, conflict heads, card kinds, links, secret maps, protected OTP seed and counter, logins, asset IDs."""
    result = _restored(target, source.backup)
    assert result["restored"] is True and result["vaults"] == 1
    src, dst = source.cli, target
    for name in ("plain", "edited", "conflict", "card", "login"):
        assert _view(dst, source.ids[name]) == _view(src, source.ids[name]), name
    assert dst.ok("get", source.ids["conflict"])["conflict"] is True
    # The secret map still masks the protected value in the card's body (same asset IDs).
    assert MAPPED not in dst.ok("get", source.ids["card"])["body"]
    links = dst.ok("graph", source.ids["card"])
    assert source.ids["plain"] in str(links)
    # Same OTP seed and the moved-on counter: both sides now give the same next code.
    assert dst.ok("otp", source.ids["otp"])["code"] == src.ok("otp", source.ids["otp"])["code"]
    logins = [(x["id"], x["title"], x["username"]) for x in dst.ok("login", "list")["items"]]
    assert logins == [(source.ids["login"], "邮箱", "me@example.cn")]
    assert dst.err("get", source.ids["deleted"])["code"] == "not_found"
    got = dst.home.parent / "contract.out"
    dst.ok("file", "get", source.ids["file"], "--output", str(got))
    assert got.read_bytes() == (source.backup.parent / "contract.bin").read_bytes()
    assert {i["id"] for i in dst.ok("list")["items"]} == {i["id"] for i in src.ok("list")["items"]}


def test_restore_is_a_new_device_with_new_vaults(source: Source, target: Cli) -> None:
    """BK-2: new device keys, new independent vault IDs, no old shared membership."""
    _restored(target, source.backup)
    old, new = source.cli.ok("whoami"), target.ok("whoami")
    assert new["device_id"] != old["device_id"] and new["user_id"] != old["user_id"]
    old_ids = {v["id"] for v in source.cli.ok("vaults")["vaults"]}
    vaults = target.ok("vaults")["vaults"]
    assert [v["name"] for v in vaults] == ["default"]
    assert not {v["id"] for v in vaults} & old_ids
    assert vaults[0]["members"] == 1 and vaults[0]["role"] == "owner"
    devices = target.ok("devices")
    assert [d["device_id"] for d in devices["devices"]] == [new["device_id"]]
    # The restored device writes in its new vault; the new password unlocks it.
    target.ok("lock")
    target.unlock(NEW_PW)
    assert target.put("after restore", "x")["id"]


def test_original_history_is_archived_read_only(source: Source, target: Cli) -> None:
    """BK-2: the original signed history stays readable (history, diff) but never becomes writable."""
    _restored(target, source.backup)
    asset = source.ids["edited"]
    before = [r["revision"] for r in source.cli.ok("history", asset)["revisions"]]
    history = target.ok("history", asset)["revisions"]
    archived = [r for r in history if r.get("archived")]
    assert [r["revision"] for r in archived] == before
    assert [r for r in history if r["head"]] == [history[-1]] and not history[-1].get("archived")
    diff = target.ok("diff", asset, before[0][:12], before[1][:12])["diff"]
    assert "-first body" in diff and "+second body" in diff
    # An archived revision is no base for an edit: the archive is read-only.
    assert target.err("edit", asset, "--body", "x", "--base", before[1])["code"] in {"not_found", "stale_base"}


def _times(cli: Cli) -> dict[str, list[tuple[str, int, int]]]:
    """(id, created_ms, updated_ms) as every listing shows them, in the order it shows them."""
    rows = {
        "list": cli.ok("list")["items"],
        "files": cli.ok("file", "list")["items"],
        "dashboard": raw(cli, {"op": "dashboard_list"})["items"],
    }
    times = {name: [(i["id"], i["created_ms"], i["updated_ms"]) for i in items] for name, items in rows.items()}
    times["logins"] = [(i["id"], 0, i["updated_ms"]) for i in cli.ok("login", "list")["items"]]
    return times


def test_restore_keeps_when_items_were_created_and_changed(source: Source, target: Cli) -> None:
    """BK-2: after a restore, list order, get's created_ms/updated_ms, file and login lists and the
    dashboard show when each item was created and last changed, not the restore's time; the
    history still shows the restore revision at its own time, by the new device."""
    _restored(target, source.backup)
    src, dst = source.cli, target
    assert _times(dst) == _times(src)
    for name in ("plain", "edited", "conflict", "card", "otp", "login", "file"):
        before, after = src.ok("get", source.ids[name]), dst.ok("get", source.ids[name])
        assert (after["created_ms"], after["updated_ms"]) == (before["created_ms"], before["updated_ms"]), name
    history = dst.ok("history", source.ids["edited"])["revisions"]
    archived, restored = history[:-1], history[-1]
    assert all(r["archived"] for r in archived) and restored["head"] and not restored.get("archived")
    assert restored["author"] == dst.ok("whoami")["device_fingerprint"][:16] != archived[-1]["author"]
    assert restored["created_ms"] > archived[-1]["created_ms"] == dst.ok("get", source.ids["edited"])["updated_ms"]
    # An edit after the restore is a change of its own: the item moves to the top, created stays.
    dst.ok("edit", source.ids["edited"], "--body", "third body")
    edited = dst.ok("get", source.ids["edited"])
    assert edited["created_ms"] == archived[0]["created_ms"] and edited["updated_ms"] >= restored["created_ms"]
    assert dst.ok("list")["items"][0]["id"] == source.ids["edited"]


def test_a_restored_vault_backs_up_and_restores_again(source: Source, target: Cli, tmp_path: Path) -> None:
    """BK-2: a restored vault (a conflict item now has two first revisions) backs up and restores
    again with the same content, conflict heads and original times."""
    _restored(target, source.backup)
    target.sudo(NEW_PW)
    again = tmp_path / "again.backup"
    target.ok("backup", "create", str(again), "--password-stdin", input=BACKUP_PW + "\n")
    third = Cli(home=tmp_path / "third")
    try:
        _restored(third, again)
        for name in ("plain", "edited", "conflict", "card", "login"):
            assert _view(third, source.ids[name]) == _view(source.cli, source.ids[name]), name
        assert third.ok("get", source.ids["conflict"])["conflict"] is True
        assert _times(third) == _times(source.cli)
    finally:
        third.stop()


def test_restore_stores_each_body_once(tmp_path: Path) -> None:
    """BK-2: a restored head shares its content rows with its archived original, so a large file
    is stored once (the store is about the backup's size, not twice it); the file, its archived
    history and the store survive a lock and unlock (which sweeps unreferenced rows)."""
    mib = 6
    blob = tmp_path / "big.bin"
    blob.write_bytes(os.urandom(mib * 1024 * 1024))
    src = Cli(home=tmp_path / "src")
    src.init()
    try:
        file_id = src.ok("file", "add", str(blob))["id"]
        note = src.put("small note", "first")
        src.ok("edit", note["id"], "--body", "second")
        src.sudo()
        backup = tmp_path / "big.backup"
        src.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
    finally:
        src.stop()
    dst = Cli(home=tmp_path / "dst")
    try:
        _restored(dst, backup)
        store = dst.home / "store.db"
        # The file's chunks arrive whole in the restore's batches: they go to pack files beside the
        # store, as an upload's do (issue 32), and the store keeps only where they lie.
        packs = pack_files(dst)
        assert packs and store.stat().st_size < 1024 * 1024, (len(packs), store.stat().st_size)
        # Two copies of the file would make the store at least twice the backup's size.
        on_disk = store.stat().st_size + sum(pack.stat().st_size for pack in packs)
        assert on_disk < 1.25 * backup.stat().st_size, (on_disk, backup.stat().st_size)
        dst.ok("lock")
        dst.unlock(NEW_PW)
        out = tmp_path / "big.out"
        dst.ok("file", "get", file_id, "--output", str(out))
        assert out.read_bytes() == blob.read_bytes()
        revisions = [r["revision"] for r in dst.ok("history", note["id"])["revisions"] if r.get("archived")]
        diff = dst.ok("diff", note["id"], revisions[0][:12], revisions[1][:12])["diff"]
        assert "-first" in diff and "+second" in diff
        assert dst.ok("get", note["id"])["body"] == "second"
    finally:
        dst.stop()


def _items(backup: Path) -> list[dict[str, Any]]:
    with open(backup, "rb") as src:
        return list(BackupReader(src, BACKUP_PW).items())


def test_backup_leaves_out_device_only_vaults_and_tokens(source: Source, target: Cli) -> None:
    """BK-1 canary: device-only vaults, their items, MCP grants and tokens are not in the backup or the restore."""
    items = _items(source.backup)
    assert {i["t"] for i in items} <= {"vault", "revision", "content", "link"}
    local = bytes.fromhex(source.local_vault)
    encoded = b"".join(msgspec.msgpack.encode(i) for i in items)
    assert local not in encoded
    assert source.token.encode() not in encoded and LOCAL_CANARY.encode() not in encoded
    _restored(target, source.backup)
    assert [v["name"] for v in target.ok("vaults")["vaults"]] == ["default"]
    assert LOCAL_CANARY not in str(target.ok("list"))
    assert target.ok("search", LOCAL_CANARY)["results"] == []
    target.sudo(NEW_PW)
    assert target.ok("mcp", "grants", "--all")["grants"] == []


def test_verify_reads_everything_and_writes_nothing(source: Source) -> None:
    """BK-1: verify authenticates every chunk and signature; the file and the vault stay as they were."""
    before = source.backup.read_bytes()
    vault_before = _vault_state(source.cli)
    result = source.cli.ok("backup", "verify", str(source.backup), "--password-stdin", input=BACKUP_PW + "\n")
    assert result["ok"] is True and result["vaults"] == 1 and result["revisions"] >= 10
    assert source.backup.read_bytes() == before and _vault_state(source.cli) == vault_before


def _vault_state(cli: Cli) -> dict[str, Any]:
    """What "the vault stays as it was" means: the status counts and flags and every item's
    head revision. Not the background jobs' list (their seconds and states move on by
    themselves) nor `busy` (a job holding the engine's lock for a moment)."""
    status = {k: v for k, v in cli.ok("status").items() if k not in ("jobs", "busy")}
    heads = {item["id"]: item["revision"] for item in cli.ok("list", "--all")["items"]}
    return {"status": status, "heads": heads}


def _damaged(kind: str, original: bytes, tmp: Path) -> tuple[Path, str]:
    path = tmp / f"{kind}.backup"
    data = bytearray(original)
    password = BACKUP_PW
    expected = "backup_invalid"
    if kind == "truncated":
        data = data[: len(data) - 100]
    elif kind == "last-chunk-dropped":
        data = data[: len(data) // 2]
    elif kind == "chunks-dropped-at-boundary":
        pos = 16  # magic; then the header and password-check frames, then the chunks
        for _ in range(2):
            pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
        data = data[:pos]
    elif kind == "bit-flipped":
        data[len(data) // 2] ^= 0x01
    elif kind == "appended":
        data += b"\x00\x00\x00\x04abcd"
    elif kind == "wrong-password":
        password, expected = "not the backup password", "wrong_password"
    elif kind == "wrong-version":
        start = data.index(b'"version":1')
        data[start : start + 11] = b'"version":9'
        expected = "backup_version"
    elif kind == "foreign":
        data = bytearray(b"SQLite format 3\x00" + bytes(4000))
    path.write_bytes(bytes(data))
    return path, f"{password}\n{expected}"


@pytest.mark.parametrize(
    "kind",
    [
        "truncated",
        "last-chunk-dropped",
        "chunks-dropped-at-boundary",
        "bit-flipped",
        "appended",
        "wrong-password",
        "wrong-version",
        "foreign",
    ],
)
def test_a_damaged_file_gives_a_typed_error_and_writes_nothing(source: Source, target: Cli, tmp_path: Path, kind: str) -> None:
    """BK-1, BK-2: truncated, bit-flipped, wrong-password, wrong-version and foreign files: typed error, no store."""
    path, packed = _damaged(kind, source.backup.read_bytes(), tmp_path)
    password, expected = packed.split("\n")
    verify = source.cli.err("backup", "verify", str(path), "--password-stdin", input=password + "\n")
    assert verify["code"] == expected
    proc = _restore(target, path, password)
    assert proc.returncode != 0
    error = msgspec.json.decode(proc.stdout)["error"]
    assert error["code"] == expected
    assert BACKUP_PW not in error["message"] and password not in error["message"]
    assert not (target.home / "store.db").exists()
    assert not list(target.home.glob(".restore-*"))
    if kind == "bit-flipped":  # the home is still free: the right file restores into it
        _restored(target, source.backup)


def test_backup_needs_sudo_and_never_overwrites(source: Source, tmp_path: Path) -> None:
    """BK-1: backup create needs elevation and never overwrites an existing file."""
    other = Cli(home=tmp_path / "fresh")
    other.init()
    try:
        out = tmp_path / "b.backup"
        assert other.err("backup", "create", str(out), "--password-stdin", input=BACKUP_PW + "\n")["code"] == "elevation_required"
        assert not out.exists()
        other.sudo()
        out.write_bytes(b"keep me")
        assert other.err("backup", "create", str(out), "--password-stdin", input=BACKUP_PW + "\n")["code"] == "io_error"
        assert out.read_bytes() == b"keep me"
        assert not [p for p in tmp_path.iterdir() if ".part-" in p.name]
    finally:
        other.stop()


def test_restore_into_a_home_with_a_vault_is_refused(source: Source) -> None:
    """BK-2: restore makes a new device; it never replaces the vault of an existing home."""
    listed = source.cli.ok("list")
    proc = _restore(source.cli, source.backup)
    assert msgspec.json.decode(proc.stdout)["error"]["code"] == "already_initialized"
    assert source.cli.ok("list") == listed


def test_a_killed_restore_leaves_no_half_made_home(tmp_path: Path) -> None:
    """BK-2: the engine killed in the middle of a restore leaves no store; a second restore succeeds."""
    big = Cli(home=tmp_path / "big")
    big.init()
    try:
        notes = tmp_path / "many.jsonl"
        lines = (json.dumps({"title": f"note {n}", "body": f"line {n} " * 60}) for n in range(NOTES))
        notes.write_text("\n".join(lines) + "\n")
        assert big.ok("import", str(notes))["created"] == NOTES
        big.sudo()
        backup = tmp_path / "big.backup"
        big.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
    finally:
        big.stop()
    target = Cli(home=tmp_path / "target")
    try:
        proc = subprocess.Popen(
            target.command("restore", str(backup), "--password-stdin", "--json"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=target.environ(),
        )
        assert proc.stdin is not None
        proc.stdin.write(f"{BACKUP_PW}\n{NEW_PW}\n")
        proc.stdin.close()
        deadline = time.monotonic() + 60
        staging: list[Path] = []
        while time.monotonic() < deadline and not staging and proc.poll() is None:
            # The new store file exists (wherever the restore builds it): the restore is under way.
            staging = [*target.home.glob(".restore-*/store.db"), *target.home.glob("store.db")]
            time.sleep(0.01)
        assert staging, "the restore finished before it could be interrupted"
        pid = int((target.home / "engine.lock").read_text().strip() or 0) or target.daemon_pid()
        assert pid
        os.kill(pid, 9)
        proc.wait(30)
        assert proc.returncode != 0
        assert not (target.home / "store.db").exists()
        _restored(target, backup)
        assert not list(target.home.glob(".restore-*"))
        assert target.ok("status")["assets"] == NOTES
    finally:
        target.stop()


def test_memories_json_round_trips_every_card_kind_and_link(source: Source, tmp_path: Path) -> None:
    """Issue 15: export --format memories-json (sudo) then import keeps every card kind, link, conflict and secret."""
    src = source.cli
    src.sudo()
    with_secrets, without = tmp_path / "with", tmp_path / "without"
    src.ok("export", "--format", "memories-json", str(with_secrets), "--include-secrets")
    src.ok("export", "--format", "memories-json", str(without))
    plain_file = (without / "memories.json").read_text(encoding="utf-8")
    assert MAPPED not in plain_file and "JBSWY3DPEHPK3PXP" not in plain_file
    assert MAPPED in (with_secrets / "memories.json").read_text(encoding="utf-8")
    assert LOCAL_CANARY not in plain_file  # the device-only vault is another vault: not exported
    fresh = Cli(home=tmp_path / "fresh")
    fresh.init()
    try:
        result = fresh.ok("import", str(with_secrets / "memories.json"))
        assert result["created"] >= 8 and result["links"] == 1
        for name in ("plain", "edited", "conflict", "card", "login"):
            assert _view(fresh, source.ids[name]) == _view(src, source.ids[name]), name
        assert fresh.ok("otp", source.ids["otp"])["code"] == src.ok("otp", source.ids["otp"])["code"]
        assert source.ids["plain"] in str(fresh.ok("graph", source.ids["card"]))
        kinds = sorted(i["kind"] for i in fresh.ok("list")["items"])
        assert kinds == sorted(i["kind"] for i in src.ok("list")["items"])
        again = fresh.ok("import", str(with_secrets / "memories.json"))
        assert again["created"] == 0 and again["links"] == 0  # idempotent
    finally:
        fresh.stop()


def test_memories_json_export_needs_sudo_and_bad_files_import_nothing(vault: Cli, tmp_path: Path) -> None:
    """Issue 15: the memories-json export needs sudo; a malformed file is a typed error and imports nothing."""
    assert vault.err("export", "--format", "memories-json", str(tmp_path / "out"))["code"] == "elevation_required"
    assert not (tmp_path / "out" / "memories.json").exists()
    before = vault.ok("status")["assets"]
    bad = tmp_path / "bad.json"
    item = {"id": "ab" * 16, "kind": "memory", "heads": [{"summary": {"title": "ok"}, "body": "b"}]}
    wrong = {"id": "cd" * 16, "kind": "local_config", "heads": [{"summary": {"title": "x"}, "body": ""}]}
    bad.write_text(json.dumps({"format": "memories-json", "version": 1, "items": [item, wrong], "links": []}))
    error = vault.err("import", str(bad))
    assert error["code"] == "invalid_input" and "local_config" in error["message"]
    assert vault.ok("status")["assets"] == before


def test_passwords_are_asked_on_a_terminal(source: Source, tmp_path: Path) -> None:
    """BK-1: on a terminal the backup password is asked twice and never echoed; restore asks both passwords."""
    from tests.terminal import run_in_terminal

    source.cli.sudo()
    env = source.cli.environ()
    out = tmp_path / "tty.backup"
    typed = [("Backup password", BACKUP_PW), ("Repeat", BACKUP_PW + "x")]
    code, screen = run_in_terminal(source.cli.command("backup", "create", str(out)), typed, env)
    assert code != 0 and "do not match" in screen and not out.exists()
    typed = [("Backup password", BACKUP_PW), ("Repeat", BACKUP_PW)]
    code, screen = run_in_terminal(source.cli.command("backup", "create", str(out)), typed, env)
    assert code == 0 and "backed up" in screen and BACKUP_PW not in screen
    restored = Cli(home=tmp_path / "tty-restored")
    try:
        typed = [("Backup password", BACKUP_PW), ("New vault password", NEW_PW), ("Repeat", NEW_PW)]
        code, screen = run_in_terminal(restored.command("restore", str(out)), typed, restored.environ())
        assert code == 0 and "restored" in screen and NEW_PW not in screen
        assert restored.ok("get", source.ids["plain"])["title"] == "购物清单 Shopping"
    finally:
        restored.stop()
