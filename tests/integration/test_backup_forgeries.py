"""Validly sealed backups that lie, refused by the one check that can see the lie (BK-1, BK-2).

Issue 27, "Tests that notice a removed check": byte damage is caught by the envelope's AEAD
(tests/integration/test_backup.py); these files are instead sealed with the real backup
password, so every chunk authenticates and only the semantic checks can refuse them: a bad
manifest, a forged revision, a forged policy chain, wrong head flags, and Argon2 parameters
above the cap (refused before any key derivation runs: a crafted file must not make the engine
allocate gigabytes). Each is offered to a real daemon's `backup verify` (and one to `restore`),
and each assertion names the refusing check by its sentence.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator
from hashlib import sha256
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nacl.signing import SigningKey

from engine.backup.envelope import FORMAT, MAGIC, MANIFEST_TAG, MAX_MEMLIMIT, MAX_OPSLIMIT, VERSION, BackupReader, BackupWriter
from engine.crypto.aead import seal
from engine.crypto.canonical import canonical_bytes, decode_canonical, domain_bytes
from engine.crypto.kdf import SALT_BYTES, KdfParams
from engine.crypto.keys import sign
from engine.vault.revision import Revision
from tests.helpers import Cli

BACKUP_PW = "forgery horse staple 9"
NEW_PW = "new device password 8"
Items = list[dict[str, Any]]
# A cheap but valid Argon2id cost: the forgeries are about what the file says, not the KDF.
CHEAP = KdfParams(salt=b"\x07" * SALT_BYTES, opslimit=1, memlimit=8 * 1024 * 1024)


class Source:
    def __init__(self, cli: Cli, items: Items, root: Path) -> None:
        self.cli, self.items, self.root = cli, items, root


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    root = tmp_path_factory.mktemp("backup-forgeries")
    cli = Cli(home=root / "home")
    cli.init()
    chain = cli.put("Edited note", "first body")
    cli.ok("edit", chain["id"], "--body", "second body")
    cli.put("Lone note", "only one revision")
    cli.sudo()
    backup = root / "honest.backup"
    cli.ok("backup", "create", str(backup), "--password-stdin", input=BACKUP_PW + "\n")
    with open(backup, "rb") as src:
        items = list(BackupReader(src, BACKUP_PW).items())
    yield Source(cli, items, root)
    cli.stop()


def _copy(items: Items) -> Items:
    decoded: Items = msgspec.msgpack.decode(msgspec.msgpack.encode(items))
    return decoded


def _sealed(
    path: Path, items: Items, manifest: Callable[[bytes, SigningKey], tuple[bytes, dict[str, Any]]] | None = None
) -> Path:
    """``items`` sealed with the real backup password; the manifest signed by a device key
    (``manifest`` may replace what is signed, returning the signature and the item's fields)."""
    key = SigningKey.generate()

    def honest(signed: bytes, key: SigningKey) -> tuple[bytes, dict[str, Any]]:
        return sign(key, signed), {"device": bytes(key.verify_key)}

    with open(path, "wb") as out:
        writer = BackupWriter(out, BACKUP_PW, CHEAP)
        for item in items:
            writer.add(item)
        writer.finish(lambda signed: (manifest or honest)(signed, key))
    return path


def _refused(source: Source, path: Path, because: str, password: str = BACKUP_PW) -> dict[str, Any]:
    error = source.cli.err("backup", "verify", str(path), "--password-stdin", input=password + "\n")
    assert error["code"] == "backup_invalid", error
    assert because in error["message"], error
    assert BACKUP_PW not in error["message"]
    return error


def _revisions(items: Items) -> Items:
    return [i for i in items if i["t"] == "revision"]


def test_the_resealed_honest_items_verify(source: Source, tmp_path: Path) -> None:
    """The forgeries below differ from this file in one lie each: unchanged, it verifies."""
    path = _sealed(tmp_path / "control.backup", _copy(source.items))
    result = source.cli.ok("backup", "verify", str(path), "--password-stdin", input=BACKUP_PW + "\n")
    assert result["ok"] is True and result["revisions"] == len(_revisions(source.items))


# -- the manifest ------------------------------------------------------------------------------------


def test_a_manifest_whose_signature_does_not_verify_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-1: the manifest's signature has one bit flipped (count and digest are right)."""

    def flipped(signed: bytes, key: SigningKey) -> tuple[bytes, dict[str, Any]]:
        sig = sign(key, signed)
        return bytes([sig[0] ^ 1]) + sig[1:], {"device": bytes(key.verify_key)}

    path = _sealed(tmp_path / "manifest-sig.backup", _copy(source.items), flipped)
    _refused(source, path, "the manifest signature does not verify")


@pytest.mark.parametrize("lie", ["count", "digest"])
def test_a_validly_signed_manifest_that_does_not_match_the_items_is_refused(source: Source, tmp_path: Path, lie: str) -> None:
    """BK-1: a manifest signed correctly but naming one item more (a dropped item), or another
    digest (a swapped item), than the file holds."""

    def lying(signed: bytes, key: SigningKey) -> tuple[bytes, dict[str, Any]]:
        prefix = MANIFEST_TAG.encode("ascii") + b"\x00\x01"
        body = decode_canonical(signed[len(prefix) :])
        if lie == "count":
            body["items"] += 1
        else:
            body["digest"] = sha256(b"another set of items").digest()
        forged = domain_bytes(MANIFEST_TAG, 1, body)
        return sign(key, forged), {"device": bytes(key.verify_key), "signed": forged}

    path = _sealed(tmp_path / f"manifest-{lie}.backup", _copy(source.items), lying)
    _refused(source, path, "the manifest does not match the items")


def test_an_item_after_a_valid_manifest_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-1: the final chunk holds a manifest that verifies for every item before it, then one
    more item (a revision a reader that stopped at the manifest would silently drop, or a later
    writer smuggled in): the manifest must be the last item."""
    path = tmp_path / "after-manifest.backup"
    key = SigningKey.generate()
    items = _copy(source.items)
    with open(path, "wb") as out:
        writer = BackupWriter(out, BACKUP_PW, CHEAP)
        for item in items:
            writer.add(item)
        # BackupWriter.finish, with one item appended after the manifest before the final flush.
        body = {"v": 1, "items": len(items), "digest": writer._digest.digest(), "created_ms": 1}
        signed = domain_bytes(MANIFEST_TAG, 1, body)
        manifest = {"t": "manifest", "signed": signed, "sig": sign(key, signed), "device": bytes(key.verify_key)}
        writer._append(msgspec.msgpack.encode(manifest))
        writer._append(msgspec.msgpack.encode(_revisions(items)[0]))
        writer._flush(final=True)
    _refused(source, path, "the manifest is not the last item")


# -- revisions and policies ------------------------------------------------------------------------------


def _lone_head(items: Items) -> dict[str, Any]:
    """The revision item of the note with one revision (nothing names it as a parent)."""
    heads = [i for i in _revisions(items) if i.get("head") and b'"parents":[]' in bytes(i["signed"])]
    assert heads
    return heads[-1]


def test_a_revision_whose_signed_bytes_were_changed_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-2: a head revision's signed bytes are changed (its creation time) and the original
    signature kept; its content, policy and author still check out, only the signature fails."""
    items = _copy(source.items)
    rev = _lone_head(items)
    signed = bytes(rev["signed"])
    found = re.search(rb'"created_ms":(\d+)', signed)
    assert found
    later = str(int(found.group(1)) + 1).encode()
    assert len(later) == len(found.group(1))
    rev["signed"] = signed[: found.start(1)] + later + signed[found.end(1) :]
    _refused(source, _sealed(tmp_path / "forged-rev.backup", items), "a revision's signature, policy or content")


@pytest.mark.parametrize("damage", ["no signed bytes", "not a revision", "no chunk count", "chunk count zero"])
def test_a_malformed_revision_is_refused_as_before_the_read_ahead(source: Source, tmp_path: Path, damage: str) -> None:
    """BK-2, issue 32: signatures are now checked on a helper thread a few items ahead; a
    revision item that cannot be decoded, or whose chunk count is out of range, is still refused
    as malformed, before its signature is considered."""
    items = _copy(source.items)
    rev = _lone_head(items)
    if damage == "no signed bytes":
        del rev["signed"]
    elif damage == "not a revision":
        rev["signed"] = b"not a signed revision"
    elif damage == "no chunk count":
        del rev["n"]
    else:
        rev["n"] = 0
    _refused(source, _sealed(tmp_path / "malformed-rev.backup", items), "a malformed revision")


def test_a_revision_signed_by_a_device_the_policy_never_had_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-2: a head revision re-signed by a stranger's key, naming it as the author: the signature
    verifies, so only the policy check (is the author authorized) can refuse it."""
    items = _copy(source.items)
    rev = _lone_head(items)
    stranger = SigningKey.generate()
    original = Revision(bytes(rev["signed"]), bytes(rev["sig"]), [])
    body = {**original.body, "device": bytes(stranger.verify_key)}
    prefix = original.signed[: original.signed.index(b"{")]
    rev["signed"] = prefix + canonical_bytes(body)
    rev["sig"] = sign(stranger, rev["signed"])
    assert Revision(rev["signed"], rev["sig"], []).author == bytes(stranger.verify_key)
    _refused(source, _sealed(tmp_path / "stranger-rev.backup", items), "a revision's signature, policy or content")


def test_a_policy_chain_with_a_forged_owner_signature_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-2/PO-1: the vault's genesis policy carries a flipped Owner signature."""
    items = _copy(source.items)
    vault = next(i for i in items if i["t"] == "vault")
    policy = vault["history"][0]
    policy["sig"] = bytes([policy["sig"][0] ^ 1]) + policy["sig"][1:]
    _refused(source, _sealed(tmp_path / "forged-policy.backup", items), "a vault's policy history")


@pytest.mark.parametrize("flag", ["unmarked head", "marked non-head"])
def test_wrong_head_flags_are_refused(source: Source, tmp_path: Path, flag: str) -> None:
    """BK-2: a head not marked as one (a restore would drop the item's current state), or an
    older revision marked as a head (a restore would resurrect it)."""
    items = _copy(source.items)
    revs = _revisions(items)
    if flag == "unmarked head":
        _lone_head(items)["head"] = False
    else:
        older = next(r for r in revs if not r.get("head"))
        older["head"] = True
    _refused(source, _sealed(tmp_path / f"{flag.replace(' ', '-')}.backup", items), "the marked heads are not the heads")


def test_a_forged_revision_is_refused_by_restore_and_leaves_no_store(source: Source, tmp_path: Path) -> None:
    """BK-2: restore reads the same checks: the forged file writes no store and no staging folder."""
    items = _copy(source.items)
    vault = next(i for i in items if i["t"] == "vault")
    vault["history"][0]["sig"] = bytes(64)
    path = _sealed(tmp_path / "restore-forged.backup", items)
    target = Cli(home=tmp_path / "restored")
    try:
        proc = target.run("restore", str(path), "--password-stdin", "--json", input=f"{BACKUP_PW}\n{NEW_PW}\n", timeout=120)
        assert proc.returncode != 0
        error = msgspec.json.decode(proc.stdout)["error"]
        assert error["code"] == "backup_invalid" and "a vault's policy history" in error["message"], error
        assert not (target.home / "store.db").exists() and not list(target.home.glob(".restore-*"))
    finally:
        target.stop()


# -- key derivation parameters ---------------------------------------------------------------------------


def _header_only(path: Path, kdf: dict[str, Any]) -> Path:
    """A file whose header asks for ``kdf``; its password check is sealed with a random key, so
    a reader that derived a key would answer wrong_password, never backup_invalid."""
    header = canonical_bytes({"format": FORMAT, "version": VERSION, "kdf": kdf, "created_ms": 1})
    check = seal(b"\x01" * 32, b"", b"memories.backup.check\x00\x01" + header)
    with open(path, "wb") as out:
        out.write(MAGIC)
        for frame in (header, check):
            out.write(struct.pack(">I", len(frame)) + frame)
    return path


@pytest.mark.parametrize(
    ("name", "opslimit", "memlimit"),
    [("memory", 1, MAX_MEMLIMIT * 4), ("passes", MAX_OPSLIMIT + 1, 8 * 1024 * 1024)],
)
def test_argon2_costs_above_the_cap_are_refused_before_any_key_derivation(
    source: Source, tmp_path: Path, name: str, opslimit: int, memlimit: int
) -> None:
    """BK-2: a header asking Argon2id for 4 GiB (or 21 passes) is refused from the header alone:
    with a wrong password too the answer is backup_invalid, not wrong_password, so no key was
    derived (a crafted file cannot make the engine allocate the memory it names)."""
    kdf = {"algorithm": "argon2id13", "salt": b"\x05" * SALT_BYTES, "opslimit": opslimit, "memlimit": memlimit}
    path = _header_only(tmp_path / f"kdf-{name}.backup", kdf)
    for password in (BACKUP_PW, "not the password"):
        _refused(source, path, "key derivation parameters out of range", password)


def _device_signed_format_2(source: Source, stream: bytes, body_z: int) -> list[dict[str, Any]]:
    """A new note's revision of format 2 (issue 32) signed by the source's own device key under its
    vault's current policy and epoch key, as its own engine would sign it, whose body chunk holds
    ``stream`` and which signs ``body_z``; with its content item. Keys read from the source's store."""
    from engine.crypto.chunks import seal_chunks
    from engine.crypto.keys import DeviceIdentity
    from engine.store.database import StoreFile
    from engine.vault.policy import Policy
    from engine.vault.revision import build_streamed_revision
    from tests.helpers import PASSWORD

    store = StoreFile.open(source.cli.home / "store.db")
    try:
        store.install_master(store.check_password(PASSWORD))
        records = [record for _, record in store.load().records]
    finally:
        store.close()
    identity = DeviceIdentity.from_record(next(r for r in records if r.get("t") == "identity"))
    vault = [r for r in records if r.get("t") == "vault" and r.get("default")][-1]
    policy = Policy.parse(vault["policy"])
    epoch_key = {int(e["epoch"]): bytes(e["key"]) for e in vault["epoch_keys"]}[policy.epoch]
    dek, asset = bytes(range(32)), bytes(range(16, 32))
    (chunk,) = seal_chunks(dek, stream, asset + b"body")
    rev = build_streamed_revision(
        identity=identity,
        vault_id=bytes(vault["vault_id"]),
        policy_head=policy.head,
        epoch=policy.epoch,
        epoch_key=epoch_key,
        asset_id=asset,
        kind="memory",
        parents=[],
        summary={"title": "compressed", "tags": []},
        dek=dek,
        body_digests=[sha256(chunk).digest()],
        body_len=len(stream),
        content_seqs=[1],
        body_z=body_z,
    )
    return [{"t": "revision", "signed": rev.signed, "sig": rev.signature, "n": 1, "head": True}, {"t": "content", "data": chunk}]


def test_a_compressed_body_that_is_not_its_signed_length_is_refused(source: Source, tmp_path: Path) -> None:
    """BK-2, issue 32: a note of revision format 2, signed by the vault's own device, whose body
    stream inflates past its signed length (a bomb) is refused by the one check that inflates it;
    the same note with its true length verifies."""
    import zlib

    text = b"the harbor lantern at the Kyoto passport office " * 20
    honest = _copy(source.items) + _device_signed_format_2(source, zlib.compress(text, 9), len(text))
    path = _sealed(tmp_path / "format-2.backup", honest)
    source.cli.ok("backup", "verify", str(path), "--password-stdin", input=BACKUP_PW + "\n")
    bomb = _copy(source.items) + _device_signed_format_2(source, zlib.compress(bytes(64 * 1024), 9), 100)
    _refused(source, _sealed(tmp_path / "bomb.backup", bomb), "compressed body does not inflate to its signed length")
