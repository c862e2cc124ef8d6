"""In-process checks of the remote parsers and ticket rules (fuzzed where cheap), no servers needed."""

from __future__ import annotations

import base64
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import MemoriesError
from engine.remote import targets
from engine.remote.mysql_auth import caching_sha2_scramble, ed25519_signature, native_scramble
from engine.remote.proxy.mysql import Greeting, build_greeting, parse_client_response, parse_greeting, switch_nonce
from engine.remote.proxy.postgres import parse_startup, startup_message
from engine.remote.tickets import TicketBook, fingerprint, normalize
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.registry import OPS
from tests.helpers import require
from tests.remote.fakes import mysql_greeting


def test_remote_ops_are_never_reachable_over_mcp() -> None:
    """AG-2/PX-4: credential generation, sessions, tickets and proxies are outside the MCP allowlist."""
    names = [
        n
        for n in OPS
        if n.startswith(("remote_", "proxy_")) or n in {"credential_new", "credential_generate", "credential_public"}
    ]
    assert {"remote_open", "remote_exec", "remote_approve", "proxy_start", "proxy_stop", "credential_generate"} <= set(names)
    assert all(not OPS[n].mcp_allowed for n in names)
    assert OPS["remote_approve"].needs_elevation and OPS["credential_generate"].needs_elevation


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_postgres_startup_parser_never_crashes(data: bytes) -> None:
    """PX-2: arbitrary startup payloads parse or raise protocol_error, nothing else."""
    try:
        params = parse_startup(data)
    except MemoriesError as exc:
        assert exc.code == "protocol_error"
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())


def test_postgres_startup_round_trip() -> None:
    message = startup_message({"user": "app", "database": "db", "application_name": "psql"})
    assert struct.unpack("!I", message[:4])[0] == len(message)
    assert parse_startup(message[8:]) == {"user": "app", "database": "db", "application_name": "psql"}
    with pytest.raises(MemoriesError):
        parse_startup(b"user\x00only-key\x00odd\x00\x00")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_mysql_parsers_never_crash(data: bytes) -> None:
    """PX-2: arbitrary greeting / login packets raise typed errors only."""
    for parse in (parse_greeting, parse_client_response):
        try:
            parse(data)
        except MemoriesError as exc:
            assert exc.code in {"protocol_error", "remote_error"}


def test_mysql_greeting_round_trip_strips_tls() -> None:
    upstream = parse_greeting(build_greeting(parse_greeting(build_greeting(_fake_greeting()))))
    assert not upstream.caps & 0x800 and upstream.plugin == "mysql_native_password" and len(upstream.scramble) == 20


@given(st.binary(min_size=20, max_size=20))
def test_mysql_greeting_keeps_every_scramble_byte_including_nul(nonce: bytes) -> None:
    """PX-2: the scramble is read by length, not up to a NUL: a server nonce with 0x00 bytes anywhere
    (also last) survives the parse exactly, or caching_sha2/native logins would fail now and then."""
    caps = 0x200 | 0x8000 | 0x80000
    assert parse_greeting(mysql_greeting(b"8.0.36", nonce, caps, b"caching_sha2_password")).scramble == nonce


@given(st.binary(min_size=20, max_size=20), st.binary(min_size=32, max_size=32))
def test_auth_switch_nonce_is_taken_by_the_methods_size(nonce20: bytes, nonce32: bytes) -> None:
    """PX-2: AuthSwitchRequest data is the scramble (+ NUL for the MySQL methods); NUL bytes inside it stay."""
    assert switch_nonce("caching_sha2_password", nonce20 + b"\x00") == nonce20
    assert switch_nonce("mysql_native_password", nonce20 + b"\x00") == nonce20
    assert switch_nonce("client_ed25519", nonce32) == nonce32
    assert switch_nonce("some_other_plugin", b"data\x00") == b"data"


def _fake_greeting() -> Greeting:
    caps = 0x200 | 0x8000 | 0x80000 | 0x800
    return parse_greeting(mysql_greeting(b"11.0-Maria", bytes(range(20)), caps, b"caching_sha2_password"))


def test_scrambles_have_known_shapes() -> None:
    nonce = bytes(range(20))
    assert len(native_scramble("pw", nonce)) == 20 and native_scramble("", nonce) == b""
    assert len(caching_sha2_scramble("pw", nonce)) == 32
    assert len(ed25519_signature("pw", nonce + bytes(12))) == 64
    assert ed25519_signature("pw", b"m") != ed25519_signature("pw2", b"m")


def test_ed25519_signature_verifies_with_the_derived_public_key() -> None:
    """MariaDB stores the public key [s]B with s from SHA-512(password); a standard verifier must accept."""
    import hashlib

    from nacl import bindings
    from nacl.signing import VerifyKey

    h = bytearray(hashlib.sha512(b"secret").digest()[:32])
    h[0] &= 248
    h[31] = (h[31] & 127) | 64
    public = bindings.crypto_scalarmult_ed25519_base_noclamp(bytes(h))
    VerifyKey(public).verify(b"scramble-bytes", ed25519_signature("secret", b"scramble-bytes"))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["postgres", "mysql", "ssh", "redis", "ftp", "tcp"]))
def test_normalize_is_typed_and_idempotent(text: str, ctype: str) -> None:
    """RM-5: normalization either refuses with invalid_input or is stable under re-normalization."""
    try:
        first = normalize(ctype, text, b"x" if ctype == "ftp" else None)
    except MemoriesError as exc:
        assert exc.code == "invalid_input"
        return
    key = {"query": "text", "exec": "command"}.get(first["kind"])
    if key:
        assert normalize(ctype, first[key]) == first


def test_ticket_rules() -> None:
    """RM-5: pending → approved once → claimed once, only by the approving namespace."""
    book = TicketBook()
    instr = normalize("postgres", "select 1")
    ticket = book.propose("s1", 1, instr, "cli:1")
    assert ticket.fingerprint == fingerprint("s1", 1, instr) != fingerprint("s1", 2, instr) != fingerprint("s2", 1, instr)
    with pytest.raises(MemoriesError) as info:
        book.claim(ticket.ticket_id, "cli:1")
    assert info.value.code == "ticket_not_approved"
    book.approve(ticket.ticket_id, "cli:2", ticket.fingerprint)
    with pytest.raises(MemoriesError) as info:
        book.approve(ticket.ticket_id, "cli:2", None)
    assert info.value.code == "ticket_used"
    with pytest.raises(MemoriesError) as info:
        book.claim(ticket.ticket_id, "cli:1")
    assert info.value.code == "permission_denied"
    book.claim(ticket.ticket_id, "cli:2")
    with pytest.raises(MemoriesError) as info:
        book.claim(ticket.ticket_id, "cli:2")
    assert info.value.code == "ticket_used"


def test_target_validation() -> None:
    """RM-1/RM-4: defaults and refusals of credential input."""
    public, secret = targets.build("postgres", {"host": "DB.Example", "user": "u", "password": "p"})
    assert public["host"] == "db.example" and public["tls"] == "required" and public["allow_hosts"] == ["db.example"]
    assert secret == {"password": "p"}
    for bad in (
        {"host": "a b", "user": "u", "password": "p"},
        {"host": "h", "user": "u"},
        {"host": "h", "user": "u", "password": "p", "port": 70000},
        {"host": "h", "user": "u", "password": "p", "allow_hosts": ["other"]},
    ):
        with pytest.raises(MemoriesError):
            targets.build("postgres", bad)
    with pytest.raises(MemoriesError):
        targets.build("ssh", {"host": "h", "user": "u", "password": "p"})  # no host key pin
    target = targets.target_from(b"x", "n", "postgres", public, secret)
    assert targets.check_allowed(target) == "db.example"
    with pytest.raises(MemoriesError) as info:
        targets.check_allowed(target, "10.0.0.1")
    assert info.value.code == "host_not_allowed"


def test_ssh_public_line_reads_every_login_format_and_refuses_the_rest() -> None:
    """RM-2/RM-3: the public line derives from OpenSSH, PKCS#1 and PKCS#8 keys (comment kept); an encrypted key,
    a public key or garbage is invalid_input with a fixed sentence that quotes nothing of the input."""
    import asyncssh

    from engine.remote.keygen import ssh_public_line

    key = asyncssh.generate_private_key("ssh-ed25519", comment="ana@laptop")
    expected = key.export_public_key("openssh").decode().strip()
    assert expected.endswith(" ana@laptop")
    assert ssh_public_line(key.export_private_key("openssh").decode()) == expected
    assert ssh_public_line(key.export_private_key("openssh").decode(), "renamed").endswith(" renamed")
    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=2048)
    for fmt in ("pkcs1-pem", "pkcs8-pem"):
        assert ssh_public_line(rsa.export_private_key(fmt).decode()).split()[:2] == rsa.export_public_key().decode().split()[:2]
    bad = [
        key.export_private_key("pkcs8-pem", passphrase="pw").decode(),
        expected,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-base64!!\n-----END OPENSSH PRIVATE KEY-----\n",
        "",
    ]
    for text in bad:
        with pytest.raises(MemoriesError) as caught:
            ssh_public_line(text)
        assert caught.value.code == "invalid_input" and "not-base64" not in caught.value.message


def _ssh_keygen(path: Path, *args: str) -> Path:
    require(shutil.which("ssh-keygen") is not None, "ssh-keygen (apt: openssh-client)")
    subprocess.run(["ssh-keygen", "-q", "-f", str(path), *args], check=True)
    return path


def test_encrypted_private_keys_are_recognised_by_their_structure(tmp_path: Path) -> None:
    """RM-2: every passphrase-protected format ssh-keygen and PKCS#8 write is seen as encrypted, every
    unencrypted one is not; the check reads structure only (no key library error texts)."""
    from engine.remote.keygen import private_key_is_encrypted

    encrypted = {
        "openssh": _ssh_keygen(tmp_path / "e1", "-t", "ed25519", "-N", "pass phrase"),
        "pkcs1": _ssh_keygen(tmp_path / "e2", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "pass phrase"),
        "pkcs8": _ssh_keygen(tmp_path / "e3", "-t", "ecdsa", "-m", "PKCS8", "-N", "pass phrase"),
    }
    plain = {
        "openssh": _ssh_keygen(tmp_path / "p1", "-t", "ed25519", "-N", ""),
        "pkcs1": _ssh_keygen(tmp_path / "p2", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", ""),
        "pkcs8": _ssh_keygen(tmp_path / "p3", "-t", "ecdsa", "-m", "PKCS8", "-N", ""),
    }
    for fmt, path in encrypted.items():
        assert private_key_is_encrypted(path.read_text()), fmt
    for fmt, path in plain.items():
        assert not private_key_is_encrypted(path.read_text()), fmt
    for text in ("", "ssh-ed25519 AAAA", "-----BEGIN OPENSSH PRIVATE KEY-----\n!!\n-----END OPENSSH PRIVATE KEY-----"):
        assert not private_key_is_encrypted(text)


@given(st.binary(max_size=200))
def test_encrypted_key_check_never_crashes_on_an_armoured_body(body: bytes) -> None:
    """Parser of outside bytes: any OpenSSH-armoured payload (magic or not) gives a bool, never an exception."""
    from engine.remote.keygen import private_key_is_encrypted

    for payload in (body, b"openssh-key-v1\x00" + body):
        armoured = base64.b64encode(payload).decode()
        text = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{armoured}\n-----END OPENSSH PRIVATE KEY-----\n"
        assert private_key_is_encrypted(text) in (True, False)


def test_passphrase_protected_ssh_key_is_opened_once_and_stored_unencrypted(tmp_path: Path) -> None:
    """RM-2: no passphrase → key_encrypted; a wrong one → wrong_key_passphrase, quoting neither key nor
    passphrase; the right one → an unencrypted OpenSSH key with the same public half and comment."""
    import asyncssh

    from engine.remote.keygen import import_ssh_private_key, private_key_is_encrypted, ssh_public_line

    for keytype in (("-t", "ed25519"), ("-t", "rsa", "-b", "2048", "-m", "PEM"), ("-t", "ecdsa", "-m", "PKCS8")):
        path = _ssh_keygen(tmp_path / f"k{keytype[1]}", *keytype, "-N", "correct horse", "-C", "ana@laptop")
        text = path.read_text()
        for passphrase, code in ((None, "key_encrypted"), ("wrong horse", "wrong_key_passphrase")):
            with pytest.raises(MemoriesError) as caught:
                import_ssh_private_key(text, passphrase)
            assert caught.value.code == code
            assert "horse" not in caught.value.message and text.splitlines()[1][:20] not in caught.value.message
        opened = import_ssh_private_key(text, "correct horse")
        assert not private_key_is_encrypted(opened)
        expected = subprocess.run(
            ["ssh-keygen", "-y", "-P", "correct horse", "-f", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert ssh_public_line(opened).split()[:2] == expected[:2]
        assert asyncssh.import_private_key(opened).public_data == asyncssh.import_private_key(text, "correct horse").public_data
    plain = _ssh_keygen(tmp_path / "plain", "-t", "ed25519", "-N", "").read_text()
    assert import_ssh_private_key(plain, "ignored") == plain  # unencrypted keys are kept byte for byte


def test_ssh_certificate_must_certify_its_key(tmp_path: Path) -> None:
    """RM-2: a certificate of another key is refused at import (it would only fail at login)."""
    from engine.remote.keygen import check_ssh_certificate

    ca = _ssh_keygen(tmp_path / "ca", "-t", "ed25519", "-N", "")
    mine = _ssh_keygen(tmp_path / "mine", "-t", "ed25519", "-N", "")
    other = _ssh_keygen(tmp_path / "other", "-t", "ed25519", "-N", "")
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "t", "-n", "ana", f"{mine}.pub"], check=True)
    certificate = Path(f"{mine}-cert.pub").read_text()
    check_ssh_certificate(certificate, mine.read_text())
    for key, cert in ((other.read_text(), certificate), (mine.read_text(), Path(f"{mine}.pub").read_text())):
        with pytest.raises(MemoriesError) as caught:
            check_ssh_certificate(cert, key)
        assert caught.value.code == "invalid_input"


def test_encrypted_tls_client_key_is_opened_with_its_passphrase() -> None:
    """RM-4 (mTLS import): an encrypted PKCS#8 key needs its passphrase, a wrong one is typed, and the
    stored key is unencrypted PKCS#8 of the same key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from engine.remote.keygen import generate_tls, private_key_is_encrypted
    from engine.remote.tls import check_client_pair

    key_pem, cert_pem, _ = generate_tls("ana", 30, [], False)
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"tls pass")
    ).decode()
    for passphrase, code in ((None, "key_encrypted"), ("nope", "wrong_key_passphrase")):
        with pytest.raises(MemoriesError) as caught:
            check_client_pair(cert_pem, encrypted, passphrase)
        assert caught.value.code == code and "pass" not in caught.value.message.replace("passphrase", "")
    _, stored = check_client_pair(cert_pem, encrypted, "tls pass")
    assert not private_key_is_encrypted(stored) and stored == key_pem
