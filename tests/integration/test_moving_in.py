"""Moving in from KeePassXC, Bitwarden and 1Password through the real CLI and daemon (IM-1, CD-10).

The KDBX file is written by pykeepass in the test and read back by Debian's `keepassxc-cli`
to prove it is a genuine database; the Bitwarden JSON and 1PUX/CSV files in
tests/data/moving/ are hand-made from the published formats, with Chinese titles and notes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.cards.conftest import state_rows
from tests.helpers import PASSWORD, Cli, raw, require

DATA = Path(__file__).resolve().parents[1] / "data" / "moving"
KDBX_PASSWORD = "kdbx-master-pass"
CANARIES = (
    "kdbx-pw-CANARY-4471",
    "kdbx-hidden-CANARY-0c2e",
    "kdbx-pw2-CANARY-b8d0",
    "bw-password-canary-Xk9",
    "bw-hidden-canary-7Qz",
    "bw-second-canary-Pq2",
    "op-password-canary-Zr4",
    "op-pin-canary-881",
    "op-second-canary-Mn7",
    "op-csv-canary-Tt5",
)
SEEDS = ("JBSWY3DPEHPK3PXP", "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ")
TOTP = "otpauth://totp/Mail:zhang?secret=JBSWY3DPEHPK3PXP&issuer=Mail"


def _make_kdbx(path: Path) -> None:
    from pykeepass import create_database

    kp = create_database(str(path), password=KDBX_PASSWORD)
    internet = kp.add_group(kp.root_group, "互联网")
    mail = kp.add_group(internet, "邮箱")
    entry = kp.add_entry(
        mail, "公司邮箱", "zhang.san", CANARIES[0], url="https://mail.example.cn", notes="中文备注：每季度换密码",
        tags=["工作"], otp=TOTP,
    )  # fmt: skip
    entry.set_custom_property("工号", "E-1024")
    entry.set_custom_property("PIN", CANARIES[1], protect=True)
    kp.add_entry(kp.root_group, "根条目", "root-user", CANARIES[2])
    kp.add_entry(internet, "只有标题", "", "")  # nothing to keep: listed as skipped
    kp.save()


def _keepassxc_cli(*args: str) -> str:
    proc = subprocess.run(["keepassxc-cli", *args], input=KDBX_PASSWORD + "\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _logins(vault: Cli) -> dict[str, dict[str, Any]]:
    return {item["title"]: item for item in vault.ok("login", "list")["items"]}


def _import(vault: Cli, *args: str, stdin: str | None = None) -> dict[str, Any]:
    return vault.ok("import", *args, input=stdin)


def test_kdbx_written_by_pykeepass_is_genuine_and_imports_as_logins(vault: Cli, tmp_path: Path) -> None:
    """IM-1, CD-10: a real KDBX 4 (checked by keepassxc-cli) becomes login cards; secrets stay protected."""
    require(shutil.which("keepassxc-cli") is not None, "keepassxc-cli is needed to check the KDBX (apt: keepassxc)")
    db = tmp_path / "vault.kdbx"
    _make_kdbx(db)
    listing = _keepassxc_cli("ls", "-R", "-f", str(db))
    assert "互联网/邮箱/公司邮箱" in listing and "根条目" in listing
    assert _keepassxc_cli("show", "-s", "-a", "password", str(db), "/互联网/邮箱/公司邮箱").strip() == CANARIES[0]
    assert _keepassxc_cli("show", "-a", "PIN", str(db), "/互联网/邮箱/公司邮箱").strip() == CANARIES[1]

    dry = _import(vault, "keepassxc", str(db), "--kdbx-password-stdin", "--dry-run", stdin=KDBX_PASSWORD + "\n")
    assert (dry["would_create"], dry["created"], dry["dry_run"]) == (2, 0, True)
    assert any("只有标题" in line for line in dry["skipped"])
    assert _logins(vault) == {}
    done = _import(vault, "keepassxc", str(db), "--kdbx-password-stdin", stdin=KDBX_PASSWORD + "\n")
    assert done["created"] == 2
    logins = _logins(vault)
    mail = logins["公司邮箱"]
    assert mail["username"] == "zhang.san" and mail["urls"] == ["https://mail.example.cn"]
    assert set(mail["tags"]) == {"工作", "互联网/邮箱"}
    assert mail["features"] == ["password", "totp", "fields"]
    card = vault.ok("login", "show", mail["id"])
    assert card["meta"]["x_工号"] == "E-1024" and card["body"] == "中文备注：每季度换密码"
    assert logins["根条目"]["tags"] == []
    # The TOTP is the login's own OTP secret, and the password its credential's.
    code = vault.ok("otp", mail["id"])
    assert code["type"] == "totp" and len(code["code"]) == 6
    raw(vault, {"op": "sudo", "password": PASSWORD})
    assert raw(vault, {"op": "login_secret", "id": mail["id"], "what": "password"})["secret"] == CANARIES[0]
    # Idempotent: the same database again adds nothing.
    again = _import(vault, "keepassxc", str(db), "--kdbx-password-stdin", stdin=KDBX_PASSWORD + "\n")
    assert (again["created"], again["already_present"]) == (0, 2)
    assert len(_logins(vault)) == 2


def test_kdbx_wrong_password_is_a_typed_error(vault: Cli, tmp_path: Path) -> None:
    """IM-1: a wrong KDBX password names the database, imports nothing and never echoes the password."""
    db = tmp_path / "vault.kdbx"
    _make_kdbx(db)
    before = state_rows(vault)
    error = vault.err("import", "keepassxc", str(db), "--kdbx-password-stdin", input="not-the-password\n")
    assert error["code"] == "invalid_input" and "wrong password" in error["message"]
    assert "not-the-password" not in error["message"]
    assert state_rows(vault) == before


def test_keepass_xml_and_csv_exports(vault: Cli, tmp_path: Path) -> None:
    """IM-1: KeePass 2 XML (as keepassxc-cli exports it) and KeePassXC CSV import the same logins."""
    require(shutil.which("keepassxc-cli") is not None, "keepassxc-cli is needed to export XML (apt: keepassxc)")
    db = tmp_path / "vault.kdbx"
    _make_kdbx(db)
    xml = tmp_path / "export.xml"
    xml.write_text(_keepassxc_cli("export", "-f", "xml", str(db)), "utf-8")
    csv_file = tmp_path / "export.csv"
    csv_file.write_text(_keepassxc_cli("export", "-f", "csv", str(db)), "utf-8")
    from_xml = _import(vault, "keepassxc", str(xml))
    assert from_xml["created"] == 2
    # The XML and the KDBX paths read the same fields: importing the KDBX now adds nothing.
    same = _import(vault, "keepassxc", str(db), "--kdbx-password-stdin", stdin=KDBX_PASSWORD + "\n")
    assert same["created"] == 0 and same["already_present"] == 2
    from_csv = _import(vault, "keepassxc", str(csv_file), "--dry-run")
    assert from_csv["would_create"] + from_csv["already_present"] == 2


def test_bitwarden_json(vault: Cli) -> None:
    """IM-1: Bitwarden's unencrypted JSON: logins with folders as tags, hidden fields and TOTP protected."""
    done = _import(vault, "bitwarden", str(DATA / "bitwarden.json"))
    assert done["created"] == 3 and not any("secure note" in s for s in done["skipped"])
    logins = _logins(vault)
    assert logins["只是一条笔记"]["features"] == ["note"]  # a secure note: kept (test_moving_in_notes.py)
    mail = logins["公司邮箱"]
    assert mail["urls"] == ["https://mail.example.cn", "https://m.mail.example.cn"]
    assert set(mail["tags"]) == {"工作", "favorite"} and mail["features"] == ["password", "totp", "fields"]
    card = vault.ok("login", "show", mail["id"])
    assert card["body"] == "备注：每 90 天换一次密码" and card["meta"]["x_工号"] == "E-1024"
    assert card["meta"]["x_remember"] == "true" and "x_安全问题答案" not in card["meta"]  # hidden: protected
    assert logins["Git forge"]["features"] == ["password", "totp"]  # a bare base32 seed
    assert _import(vault, "bitwarden", str(DATA / "bitwarden.json"))["created"] == 0


def test_1password_1pux_and_csv(vault: Cli) -> None:
    """IM-1: 1Password's 1PUX (vault name and tags as tags, files listed as skipped) and CSV."""
    done = _import(vault, "1password", str(DATA / "1password.1pux"))
    assert done["created"] == 3
    assert any("护照.pdf" in s for s in done["skipped"]) and not any("secure note" in s for s in done["skipped"])
    logins = _logins(vault)
    bank = logins["网上银行"]
    assert set(bank["tags"]) == {"私人", "金融"} and bank["features"] == ["password", "totp", "fields"]
    assert vault.ok("login", "show", bank["id"])["body"] == "银行网站，别忘了 U 盾"
    csv_done = _import(vault, "1password", str(DATA / "1password.csv"))
    assert csv_done["created"] == 1
    forum = _logins(vault)["论坛账号"]
    assert forum["tags"] == ["社区", "论坛"] and forum["features"] == ["password", "totp"]
    assert vault.ok("login", "show", forum["id"])["body"] == "多行\n备注"


def _bitwarden(items: list[Any]) -> bytes:
    return json.dumps({"encrypted": False, "folders": [], "items": items}, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("truncated.json", (DATA / "bitwarden.json").read_bytes()[:700], "the file"),
        (
            "bad-url.json",
            _bitwarden([{"type": 1, "name": "u", "login": {"username": "c", "uris": [{"uri": "javascript:x"}]}}]),
            "item 1",
        ),
        ("bad-type.json", _bitwarden([{"type": 1, "name": "t", "login": {"username": ["not", "text"]}}]), "item 1"),
        ("encrypted.json", b'{"encrypted": true, "items": []}', "the file"),
    ],
)
def test_malformed_export_imports_nothing(vault: Cli, tmp_path: Path, name: str, content: bytes, where: str) -> None:
    """IM-1: a malformed or truncated export is a typed error naming the entry; nothing is imported."""
    path = tmp_path / name
    path.write_bytes(content)
    before = state_rows(vault)
    proc = vault.run("import", "bitwarden", str(path), "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_input" and error["message"].startswith(where), error
    assert "Nothing was imported" in error["message"] and "bw-password-canary-Xk9" not in error["message"]
    assert state_rows(vault) == before


def test_truncated_1pux_imports_nothing(vault: Cli, tmp_path: Path) -> None:
    """IM-1: a cut-off 1PUX zip is a typed error; nothing is imported."""
    path = tmp_path / "cut.1pux"
    path.write_bytes((DATA / "1password.1pux").read_bytes()[:1500])
    before = state_rows(vault)
    error = vault.err("import", "1password", str(path))
    assert error["code"] == "invalid_input" and "1PUX" in error["message"]
    assert state_rows(vault) == before


def test_no_imported_secret_in_any_output_or_plaintext_file(vault: Cli, tmp_path: Path) -> None:
    """IM-1, CD-3: imported passwords, hidden fields and seeds are never in get, search, export, logs or files."""
    db = tmp_path / "sources" / "vault.kdbx"
    db.parent.mkdir()
    _make_kdbx(db)
    _import(vault, "keepassxc", str(db), "--kdbx-password-stdin", stdin=KDBX_PASSWORD + "\n")
    _import(vault, "bitwarden", str(DATA / "bitwarden.json"))
    _import(vault, "1password", str(DATA / "1password.1pux"))
    _import(vault, "1password", str(DATA / "1password.csv"))
    logins = vault.ok("login", "list")["items"]
    assert len(logins) == 9  # 7 logins and 2 secure notes
    vault.sudo()
    commands: list[tuple[str, ...]] = [
        ("list",),
        ("search", "邮箱"),
        ("search", "canary"),
        ("export", "--format", "jsonl", str(tmp_path / "exports" / "jsonl")),
        ("export", "--format", "markdown", str(tmp_path / "exports" / "md")),
    ]
    for item in logins:
        commands += [("get", item["id"]), ("card", "show", item["id"]), ("login", "show", item["id"]), ("history", item["id"])]
        commands += [("get", item["credential"].removeprefix("cred:")), ("diff", item["id"])]
    outputs = []
    for args in commands:
        proc = vault.run(*args, "--json")
        assert proc.returncode in (0, 1), (args, proc.stderr)
        outputs.append((args, proc.stdout + proc.stderr))
    for kind in ("login", "credential"):
        listed = raw(vault, {"op": "list", "kind": kind, "limit": 1000})
        assert len(listed["items"]) == 9
        outputs.append((("list", kind), json.dumps(listed, ensure_ascii=False)))
    for args, text in outputs:
        for canary in (*CANARIES, *SEEDS):
            assert canary not in text, f"{canary} leaked through {args}"
    exported = "".join(p.read_text("utf-8") for p in (tmp_path / "exports").rglob("*") if p.is_file())
    for canary in (*CANARIES, *SEEDS):
        assert canary not in exported
    vault.stop()
    files = [p for p in vault.home.rglob("*") if p.is_file()]
    assert any(p.name.startswith("store.db") for p in files)
    for path in files:
        data = path.read_bytes()
        for canary in (*CANARIES, *SEEDS):
            assert canary.encode() not in data, f"{canary} found in {path.name}"


def test_plain_notes_import_still_works(vault: Cli, tmp_path: Path) -> None:
    """`memories import PATH` still imports notes; `import SOURCE FILE` needs a known source."""
    note = tmp_path / "note.md"
    note.write_text("---\ntitle: 笔记\n---\n正文\n", "utf-8")
    assert vault.ok("import", str(note))["created"] == 1
    assert vault.err("import", "lastpass", str(note))["code"] == "invalid_input"
    assert zipfile.is_zipfile(DATA / "1password.1pux")
