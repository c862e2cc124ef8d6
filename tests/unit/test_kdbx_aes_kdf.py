"""KDBX files that use AES-KDF (what `keepassxc-cli import` writes, and an option of KDBX 4)
open with the transformed key derived in native code (engine/moving/aes_kdf.py, issue 32): the
same key pykeepass derives one round at a time, the same entries, and a wrong password is still
refused. The tree pykeepass decrypted is read directly: the same entries as its XML read back."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.errors import MemoriesError
from engine.moving.aes_kdf import aes_kdf, transformed_key
from engine.moving.keepassxc import parse_kdbx, parse_keepass_xml
from tests.helpers import require

PASSWORD = "kdbx password 密码"
CANARY = "canary-aes-kdf-secret"


def _entries(kp: Any) -> None:  # a PyKeePass (untyped library)
    group = kp.add_group(kp.root_group, "组")
    entry = kp.add_entry(group, "邮箱", "zhang", CANARY, url="https://mail.example.cn", notes="备注")
    entry.set_custom_property("PIN", "canary-pin", protect=True)
    kp.add_entry(kp.root_group, "Root entry", "root", "pw-2")


def _kdbx4_aes(path: Path, rounds: int) -> None:
    """A KDBX 4 database whose KDF is AES-KDF (pykeepass writes Argon2 unless told otherwise)."""
    from pykeepass import create_database
    from pykeepass.kdbx_parsing.common import Container  # construct's, as pykeepass builds headers with it

    kp = create_database(str(path), password=PASSWORD)
    _entries(kp)
    params = kp.kdbx.header.value.dynamic_header.kdf_parameters.data.dict
    for name in ("I", "M", "P", "V"):
        del params[name]
    params["$UUID"].value = bytes.fromhex("c9d9f39a628a4460bf740d08c18a4fea")
    params["S"].value, params["S"].next_byte = os.urandom(32), 5
    params["R"] = Container(type=5, key="R", value=rounds, next_byte=0)  # UInt64, the last item
    kp.save()


@pytest.mark.parametrize("rounds", [0, 1, 2, 3, 65_535, 65_536, 65_537, 2 * 65_536 + 5])
def test_native_rounds_equal_pykeepass_rounds(rounds: int) -> None:
    from pykeepass.kdbx_parsing.common import aes_kdf as one_round_at_a_time

    seed, key = os.urandom(32), os.urandom(32)
    assert aes_kdf(seed, rounds, key) == one_round_at_a_time(seed, rounds, key)


def test_kdbx4_with_aes_kdf_opens_with_the_native_key(tmp_path: Path) -> None:
    from lxml import etree
    from pykeepass import PyKeePass

    path = tmp_path / "aes.kdbx"
    _kdbx4_aes(path, 3_000)
    kp = PyKeePass(str(path), password=PASSWORD)  # pykeepass's own derivation
    assert transformed_key(path, PASSWORD, None) == kp.transformed_key
    loaded = parse_kdbx(path, PASSWORD, None)
    assert loaded == parse_keepass_xml(etree.tostring(kp.tree))  # the tree read directly: same entries
    by_title = {e.title: e for e in loaded.entries}
    assert by_title["邮箱"].password == CANARY and by_title["邮箱"].hidden == {"PIN": "canary-pin"}
    assert by_title["邮箱"].tags == ["组"]
    with pytest.raises(MemoriesError, match="wrong password") as refused:
        parse_kdbx(path, "not the password", None)
    assert CANARY not in str(refused.value)


def test_argon2_is_left_to_pykeepass(tmp_path: Path) -> None:
    from pykeepass import create_database

    path = tmp_path / "argon2.kdbx"
    kp = create_database(str(path), password=PASSWORD)
    _entries(kp)
    kp.save()
    assert transformed_key(path, PASSWORD, None) is None
    assert {e.title for e in parse_kdbx(path, PASSWORD, None).entries} == {"邮箱", "Root entry"}


def test_kdbx3_written_by_keepassxc_cli(tmp_path: Path) -> None:
    """KDBX 3.1 with AES-KDF, as `keepassxc-cli import` writes it (the database of the bench pair)."""
    require(shutil.which("keepassxc-cli") is not None, "keepassxc-cli writes the KDBX 3.1 file (apt: keepassxc)")
    from pykeepass import PyKeePass, create_database

    source = tmp_path / "source.kdbx"
    kp = create_database(str(source), password=PASSWORD)
    _entries(kp)
    kp.save()
    xml = tmp_path / "export.xml"
    with open(xml, "w", encoding="utf-8") as out:
        subprocess.run(
            ["keepassxc-cli", "export", "-q", "-f", "xml", str(source)],
            input=PASSWORD + "\n", stdout=out, text=True, check=True, timeout=120,
        )  # fmt: skip
    target = tmp_path / "kdbx3.kdbx"
    subprocess.run(
        ["keepassxc-cli", "import", "-q", "-p", "-t", "100", str(xml), str(target)],
        input=f"{PASSWORD}\n{PASSWORD}\n", capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert int.from_bytes(target.read_bytes()[10:12], "little") == 3
    assert transformed_key(target, PASSWORD, None) == PyKeePass(str(target), password=PASSWORD).transformed_key
    entries = {e.title: e for e in parse_kdbx(target, PASSWORD, None).entries}
    assert entries["邮箱"].password == CANARY and entries["Root entry"].username == "root"
    with pytest.raises(MemoriesError, match="wrong password"):
        parse_kdbx(target, "not the password", None)
