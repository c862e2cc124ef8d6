"""In-process checks of the remote parsers and ticket rules (fuzzed where cheap), no servers needed."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import MemoriesError
from engine.remote import targets
from engine.remote.mysql_auth import caching_sha2_scramble, ed25519_signature, native_scramble
from engine.remote.proxy.mysql import Greeting, build_greeting, parse_client_response, parse_greeting
from engine.remote.proxy.postgres import parse_startup, startup_message
from engine.remote.tickets import TicketBook, fingerprint, normalize
from engine.service import handlers  # noqa: F401  (registers every op)
from engine.service.registry import OPS
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
