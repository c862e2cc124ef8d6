"""IM-2: moving in never refuses a whole file for one entry the source app accepted.

Through the real CLI and daemon: an unusable TOTP seed, custom attributes that differ only in
case, KeePass's legacy ``TOTP Settings``, a KDBX 2.x header, key-file-only and
empty-password databases. The KDBX files are written by pykeepass here; the JSON/XML shapes
follow Bitwarden's and KeePass's published export formats (tests/data/moving/README.md).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from tests.cards.conftest import state_rows
from tests.helpers import Cli

SEED_CANARY = "NOTBASE32-seed-canary-189"


def _bitwarden(items: list[Any]) -> bytes:
    return json.dumps({"encrypted": False, "folders": [], "items": items}, ensure_ascii=False).encode()


def _logins(vault: Cli) -> dict[str, dict[str, Any]]:
    return {item["title"]: item for item in vault.ok("login", "list")["items"]}


def test_im2_unusable_totp_seeds_import_the_entry_with_a_warning(vault: Cli, tmp_path: Path) -> None:
    """IM-2: too short, not base32, stray trailing bits: each entry comes in, the seed kept protected, each named."""
    path = tmp_path / "seeds.json"
    path.write_bytes(
        _bitwarden(
            [
                {"type": 1, "name": "好的", "login": {"username": "a", "password": "pw-a", "totp": "JBSWY3DPEHPK3PXP"}},
                {"type": 1, "name": "太短", "login": {"username": "b", "password": "pw-b", "totp": "otpauth://totp/x?secret=1"}},
                {"type": 1, "name": "not base32", "login": {"username": "c", "totp": SEED_CANARY}},
                {"type": 1, "name": "trailing", "login": {"username": "d", "totp": "JBSWY3DPEHPK3PXPA"}},
            ]
        )
    )
    proc = vault.run("import", "bitwarden", str(path))
    assert proc.returncode == 0, proc.stderr
    for name in ("太短", "not base32", "trailing"):
        assert name in proc.stdout and "warning: item" in proc.stderr
    assert "好的" not in proc.stdout  # only the entries with a warning are listed
    assert SEED_CANARY not in proc.stdout + proc.stderr
    logins = _logins(vault)
    assert set(logins) == {"好的", "太短", "not base32", "trailing"}
    assert logins["好的"]["features"] == ["password", "totp"]
    assert logins["not base32"]["features"] == ["fields"]
    vault.sudo()
    assert vault.ok("login", "show", logins["not base32"]["id"])["protected"]["fields"] == ["TOTP"]


def test_im2_summary_json_lists_every_warned_entry(vault: Cli, tmp_path: Path) -> None:
    """IM-2: `--json` carries one warning per entry, naming it and why; never the seed."""
    path = tmp_path / "seeds.json"
    path.write_bytes(
        _bitwarden(
            [
                {"type": 1, "name": "one", "login": {"username": "a", "totp": SEED_CANARY}},
                {"type": 1, "name": "two", "login": {"username": "b", "totp": "otpauth://totp/x?secret=AB"}},
            ]
        )
    )
    done = vault.ok("import", "bitwarden", str(path), "--dry-run")
    assert done["would_create"] == 2 and len(done["warnings"]) == 2
    assert done["warnings"][0].startswith("item 1 ('one'): its TOTP is neither")
    assert done["warnings"][1].startswith("item 2 ('two'): its TOTP is not usable")
    assert SEED_CANARY not in json.dumps(done)


def _keepass_xml(strings: list[tuple[str, str, bool]], title: str = "Entry") -> bytes:
    attr = ' Protected="True"'
    values = "".join(f"<String><Key>{k}</Key><Value{attr if p else ''}>{v}</Value></String>" for k, v, p in strings)
    return (
        '<?xml version="1.0" encoding="utf-8" standalone="yes"?><KeePassFile><Meta><Generator>KeePassXC</Generator>'
        "</Meta><Root><Group><UUID>AAAAAAAAAAAAAAAAAAAAAA==</UUID><Name>Root</Name><Entry>"
        f"<UUID>BBBBBBBBBBBBBBBBBBBBBB==</UUID><String><Key>Title</Key><Value>{title}</Value></String>{values}"
        "</Entry></Group></Root></KeePassFile>"
    ).encode()


def test_im2_attribute_names_differing_in_case_are_both_kept(vault: Cli, tmp_path: Path) -> None:
    """IM-2: KeePass `Token` and `token` (visible and protected) both come in; the second is renamed and said."""
    path = tmp_path / "case.xml"
    path.write_bytes(
        _keepass_xml(
            [
                ("UserName", "u", False),
                ("Token", "visible-1", False),
                ("token", "visible-2", False),
                ("Secret", "hidden-1", True),
                ("SECRET", "hidden-2", True),
            ]
        )
    )
    done = vault.ok("import", "keepassxc", str(path))
    assert done["created"] == 1
    assert any("'token'" in w and "'token (2)'" in w for w in done["warnings"]), done["warnings"]
    assert any("'SECRET (2)'" in w for w in done["warnings"])
    login = next(iter(_logins(vault).values()))
    card = vault.ok("login", "show", login["id"])
    assert card["meta"]["x_token"] == "visible-1" and card["meta"]["x_token_2"] == "visible-2"
    assert sorted(card["protected"]["fields"]) == ["SECRET (2)", "Secret"]


def test_im2_keepass_legacy_totp_settings_are_honoured(vault: Cli, tmp_path: Path) -> None:
    """IM-2: `TOTP Seed` with `TOTP Settings` 60;8 gives 8-digit codes every 60 s; Steam is kept and said."""
    path = tmp_path / "legacy.xml"
    path.write_bytes(
        _keepass_xml([("UserName", "u", False), ("TOTP Seed", "JBSWY3DPEHPK3PXP", True), ("TOTP Settings", "60;8", False)])
    )
    vault.ok("import", "keepassxc", str(path))
    login = next(iter(_logins(vault).values()))
    code = vault.ok("otp", login["id"])
    assert len(code["code"]) == 8 and 0 < code["valid_for"] <= 60, code
    # `credential show` takes the login's own credential reference and shows the settings.
    public = vault.ok("credential", "show", login["credential"])["public"]
    assert (public["otp"]["period"], public["otp"]["digits"]) == (60, 8)
    steam = tmp_path / "steam.xml"
    steam.write_bytes(
        _keepass_xml(
            [("UserName", "s", False), ("TOTP Seed", "JBSWY3DPEHPK3PXP", True), ("TOTP Settings", "30;S", False)], "Steam"
        )
    )
    done = vault.ok("import", "keepassxc", str(steam))
    assert any("Steam" in w for w in done["warnings"])
    card = vault.ok("login", "show", _logins(vault)["Steam"]["id"])
    assert card["protected"]["fields"] == ["TOTP (Steam)"]


def _kdbx(path: Path, password: str | None, keyfile: Path | None = None) -> None:
    from pykeepass import create_database

    kp = create_database(str(path), password=password, keyfile=str(keyfile) if keyfile else None)
    kp.add_entry(kp.root_group, "Server", "root", "kdbx-canary-pw")
    kp.save()


def test_im2_kdbx_2_is_a_typed_error_naming_what_to_do(vault: Cli, tmp_path: Path) -> None:
    """IM-2: a KDBX 2.x header (KeePass before 2.20) is a clear error, never a traceback."""
    db = tmp_path / "old.kdbx"
    _kdbx(db, "pw")
    data = bytearray(db.read_bytes())
    data[8:12] = struct.pack("<HH", 1, 2)
    db.write_bytes(bytes(data))
    before = state_rows(vault)
    proc = vault.run("import", "keepassxc", str(db), "--kdbx-password-stdin", "--json", input="pw\n")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid_input" and "KDBX 2.x" in error["message"] and "KeePassXC" in error["message"]
    assert state_rows(vault) == before


def test_im2_key_file_only_and_empty_password_databases(vault: Cli, tmp_path: Path) -> None:
    """IM-2: a key-file-only database and one with an empty password import with an empty answer or the flag."""
    keyfile = tmp_path / "db.key"
    keyfile.write_bytes(b"0123456789abcdef" * 4)
    keyed = tmp_path / "keyed.kdbx"
    _kdbx(keyed, None, keyfile)
    # An empty line on stdin (what Enter at the prompt gives) with the key file opens it.
    done = vault.ok("import", "keepassxc", str(keyed), "--keyfile", str(keyfile), "--kdbx-password-stdin", input="\n")
    assert done["created"] == 1
    assert vault.ok("import", "keepassxc", str(keyed), "--keyfile", str(keyfile), "--kdbx-no-password")["already_present"] == 1
    empty = tmp_path / "empty.kdbx"
    _kdbx(empty, "")
    assert vault.ok("import", "keepassxc", str(empty), "--kdbx-no-password", "--dry-run")["already_present"] == 1
    # Without the key file: a clear sentence naming what to give.
    error = vault.err("import", "keepassxc", str(keyed), "--kdbx-no-password")
    assert error["code"] == "invalid_input" and "--keyfile" in error["message"]
    missing = vault.err("import", "keepassxc", str(keyed), "--keyfile", str(tmp_path / "nope.key"), "--kdbx-no-password")
    assert missing["code"] == "not_found"


def test_im2_key_file_only_database_at_a_terminal(vault: Cli, tmp_path: Path) -> None:
    """IM-2: at a real terminal, Enter at the KDBX password prompt opens a key-file-only database."""
    from tests.terminal import run_in_terminal

    keyfile = tmp_path / "db.key"
    keyfile.write_bytes(b"fedcba9876543210" * 4)
    keyed = tmp_path / "keyed.kdbx"
    _kdbx(keyed, None, keyfile)
    code, output = run_in_terminal(
        vault.command("import", "keepassxc", str(keyed), "--keyfile", str(keyfile)),
        [("KDBX password (Enter if the key file is all it needs): ", "")],
        vault.environ(),
    )
    assert code == 0 and "imported 1 login(s) from keepassxc" in output, output
    assert "kdbx-canary-pw" not in output
