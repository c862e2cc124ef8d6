"""Protected cards and OTP through the real CLI and daemon (CD-4, CD-5, CD-3)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket

import pytest

from engine.config import Paths
from engine.ipc.framing import encode_frame, make_request
from tests.cards.conftest import state_rows, wait_for
from tests.cards.test_otp_parsing import RFC4226_CODES, RFC6238, SEED
from tests.helpers import Cli, raw, raw_error
from tests.terminal import run_in_terminal


def b32(key: bytes) -> str:
    return base64.b32encode(key).decode().rstrip("=")


def test_rfc4226_vectors_through_the_otp_command_and_consecutive_counters(shared_vault: Cli) -> None:
    """CD-5: RFC 4226 Appendix D through `memories otp`; each call advances the counter once."""
    uri = f"otpauth://hotp/Bank:me?secret={b32(SEED['SHA1'])}&counter=0"
    card = shared_vault.ok("protected", "new", "--title", "Bank", "--otp-stdin", input=uri + "\n")
    assert card["features"] == ["account", "hotp"]
    codes = [shared_vault.ok("otp", card["short_id"]) for _ in range(3)]
    assert [c["code"] for c in codes] == RFC4226_CODES[:3]
    assert [c["counter"] for c in codes] == [0, 1, 2]
    # The remaining vectors over raw IPC (same op, fewer process starts).
    rest = [raw(shared_vault, {"op": "otp_code", "id": card["id"]})["code"] for _ in range(7)]
    assert rest == RFC4226_CODES[3:]
    # The counter lives in the credential's signed history: one revision per code.
    cred = shared_vault.ok("card", "show", card["id"])["protected"]["credential"].removeprefix("cred:")
    assert len(shared_vault.ok("history", cred)["revisions"]) == 11
    assert raw_error(shared_vault, {"op": "otp_code", "id": card["id"], "at": 59}).code == "invalid_input"


@pytest.mark.parametrize("algorithm", ["SHA1", "SHA256", "SHA512"])
def test_rfc6238_vectors_through_the_otp_command(shared_vault: Cli, algorithm: str) -> None:
    """CD-5: RFC 6238 Appendix B (8 digits, 30 s) for SHA-1/256/512 via `memories otp --at`."""
    uri = f"otpauth://totp/RFC:{algorithm}?secret={b32(SEED[algorithm])}&algorithm={algorithm}&digits=8&period=30"
    card = shared_vault.ok("protected", "new", "--title", f"RFC {algorithm}", "--otp-stdin", input=uri + "\n")
    column = {"SHA1": 1, "SHA256": 2, "SHA512": 3}[algorithm]
    first = shared_vault.ok("otp", card["short_id"], "--at", str(RFC6238[0][0]))
    assert first["code"] == RFC6238[0][column]
    for row in RFC6238[1:]:
        assert raw(shared_vault, {"op": "otp_code", "id": card["id"], "at": row[0]})["code"] == row[column]
    now = raw(shared_vault, {"op": "otp_code", "id": card["id"]})
    assert len(now["code"]) == 8 and 1 <= now["valid_for"] <= 30


def test_hotp_counter_is_never_reused_when_delivery_fails(shared_vault: Cli) -> None:
    """CD-5, ST-5: the counter advance commits with the intent before delivery; a lost answer burns it."""
    card = shared_vault.ok(
        "protected", "new", "--title", "Bank", "--otp-stdin", input=f"otpauth://hotp/B:me?secret={b32(SEED['SHA1'])}&counter=4\n"
    )
    cred = raw(shared_vault, {"op": "card_read", "id": card["id"]})["protected"]["credential"].removeprefix("cred:")
    # A caller that sends the request and vanishes before the answer (a crash after the intent).
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(Paths(shared_vault.home).socket))
        sock.sendall(encode_frame(make_request(1, {"op": "otp_code", "id": card["id"]})))
    assert wait_for(lambda: len(raw(shared_vault, {"op": "history", "id": cred})["revisions"]) == 2)
    # Even after a hard kill of the engine, the next code uses the next counter.
    pid = shared_vault.daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: shared_vault.daemon_pid() is None)
    shared_vault.unlock()
    nxt = shared_vault.ok("otp", card["id"])
    assert (nxt["counter"], nxt["code"]) == (5, RFC4226_CODES[5])


def test_protected_card_token_account_env_and_opaque_reads(shared_vault: Cli) -> None:
    """CD-4, CD-3: one commit creates card + credential; reads show opaque references only."""
    token = "tok-PROTECTED-9f8e7d"
    card = shared_vault.ok(
        "protected",
        "new",
        "--title",
        "Deploy token",
        "--account",
        "ci@example.com",
        "--env",
        "DEPLOY_TOKEN",
        "--token-stdin",
        input=token + "\n",
    )
    shown = shared_vault.ok("card", "show", card["id"])
    assert shown["kind"] == "protected" and shown["meta"] == {"account": "ci@example.com", "env": "DEPLOY_TOKEN"}
    assert shown["protected"]["credential"].startswith("cred:") and shown["protected"]["features"] == ["account", "token"]
    assert token not in str(shown) and token not in str(shared_vault.ok("get", card["id"]))
    # Non-secret fields of a protected card may change; the reference is carried over.
    update = {"op": "card_write", "id": card["id"], "title": "Deploy token (ci)", "meta": {"account": "ci2@example.com"}}
    raw(shared_vault, update)
    assert raw(shared_vault, {"op": "card_read", "id": card["id"]})["protected"] == shown["protected"]


def test_generic_writes_cannot_attach_or_replace_a_protected_reference(shared_vault: Cli) -> None:
    """CD-4: generic put cannot create a protected card; generic edit cannot touch one."""
    card = shared_vault.ok("protected", "new", "--title", "T", "--token-stdin", input="tok-abcdef\n")
    head = raw(shared_vault, {"op": "get", "id": card["id"]})["revision"]
    before = state_rows(shared_vault)
    assert raw_error(shared_vault, {"op": "put", "kind": "protected", "title": "x"}).code == "invalid_input"
    assert raw_error(shared_vault, {"op": "put", "title": "x", "protected": {"credential": "00"}}).code == "unknown_field"
    assert raw_error(shared_vault, {"op": "edit", "id": card["id"], "base": head, "title": "x"}).code == "invalid_input"
    assert raw_error(shared_vault, {"op": "card_write", "id": card["id"], "protected": {}}).code == "unknown_field"
    assert state_rows(shared_vault) == before


MALFORMED = [
    "otpauth://totp/x?secret=NOT-BASE32!!",
    "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&algorithm=MD5",
    "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&digits=5",
    "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&digits=9",
    "otpauth://totp/x?secret=GEZDGNBVGY3TQOJQ&period=-30",
    "otpauth://totp/x?issuer=nothing",
    "https://totp/x?secret=GEZDGNBVGY3TQOJQ",
]


def test_malformed_otpauth_uris_are_typed_errors_that_create_nothing(shared_vault: Cli) -> None:
    """CD-4: bad base32, unknown algorithm, digits 5/9, negative period, missing secret, wrong scheme."""
    before = state_rows(shared_vault)
    first = shared_vault.err("protected", "new", "--title", "x", "--otp-stdin", input=MALFORMED[0] + "\n")
    assert first["code"] == "invalid_otpauth" and "NOT-BASE32" not in first["message"]
    for uri in MALFORMED[1:]:
        assert raw_error(shared_vault, {"op": "protected_card", "title": "x", "totp": uri}).code == "invalid_otpauth", uri
    bad_env = {"op": "protected_card", "title": "x", "token": "abcd1234", "env": "1BAD-NAME"}
    assert raw_error(shared_vault, bad_env).code == "invalid_input"
    assert raw_error(shared_vault, {"op": "protected_card", "title": "x"}).code == "invalid_input"
    assert state_rows(shared_vault) == before


def test_otp_of_a_card_without_otp_and_unknown_refs(shared_vault: Cli) -> None:
    card = shared_vault.ok("protected", "new", "--title", "T", "--account", "me@example.com")
    assert shared_vault.err("otp", card["id"])["code"] == "nothing_to_copy"
    assert shared_vault.err("otp", "no-such-card")["code"] == "not_found"


def test_an_otp_seed_on_the_command_line_is_refused_and_nothing_is_saved(shared_vault: Cli) -> None:
    """Issue 27: `--totp URI`/`--hotp URI` would leave the seed in ps and shell history: refused
    with a sentence naming --otp-stdin, nothing created, the seed not repeated; help lists neither."""
    before = state_rows(shared_vault)
    seed = b32(SEED["SHA1"])
    for flag, uri in (
        ("--totp", f"otpauth://totp/A:me?secret={seed}"),
        ("--hotp", f"otpauth://hotp/A:me?secret={seed}&counter=1"),
    ):
        proc = shared_vault.run("protected", "new", "--title", "x", flag, uri, "--json")
        assert proc.returncode == 2, proc.stdout
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "usage" and "--otp-stdin" in error["message"] and flag in error["message"]
        assert seed not in proc.stdout + proc.stderr
    assert state_rows(shared_vault) == before
    usage = shared_vault.run("protected", "new", "--help").stdout
    assert "--otp-stdin" in usage and "--totp" not in usage and "--hotp" not in usage


def test_otp_stdin_from_a_terminal_asks_without_echo(shared_vault: Cli) -> None:
    """Issue 27: typed at a terminal, --otp-stdin prompts (no echo) instead of waiting for Ctrl-D."""
    uri = f"otpauth://totp/Term:me?secret={b32(SEED['SHA1'])}"
    code, screen = run_in_terminal(
        shared_vault.command("protected", "new", "--title", "Typed", "--otp-stdin"),
        [("otpauth:// URI (not shown): ", uri)],
        shared_vault.environ(),
    )
    assert code == 0, screen
    assert "protected (account, totp)" in screen and b32(SEED["SHA1"]) not in screen
