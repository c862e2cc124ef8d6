"""Devices that join and leave (issue 13; SPEC ID-1..ID-5, PO-2), with two and three real daemons.

Each device is its own data home served by its own engine process; the request and the
approval travel between them only as the CLI's text output, as they would between machines.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.crypto.canonical import b64e
from engine.crypto.keys import SignatureError
from engine.vault.core import DecodedState, VaultCore
from engine.vault.joining import (
    APPROVAL_PREFIX,
    REQUEST_PREFIX,
    decode_request,
    make_approval,
    make_certificate,
    make_request,
)
from engine.vault.revision import Revision, build_revision
from tests.helpers import PASSWORD, Cli, pid_alive
from tests.terminal import run_in_terminal

B_PASSWORD = "laptop password, not the approver's 7"
C_PASSWORD = "third device password 9"


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[dict[str, Cli]]:
    clis = {name: Cli(home=tmp_path / name) for name in ("a", "b", "c", "d")}
    yield clis
    for cli in clis.values():
        cli.stop()


def _device_id(cli: Cli) -> str:
    return str(cli.ok("whoami")["device_id"])


def _request(new: Cli, approver: Cli, name: str, password: str) -> dict[str, Any]:
    return new.ok(
        "device", "request", "--approver", _device_id(approver), "--name", name, "--password-stdin", input=password + "\n"
    )


def _approve(approver: Cli, request_text: str, password: str = PASSWORD) -> dict[str, Any]:
    approver.sudo(password)
    return approver.ok("device", "approve", request_text, "--yes")


def _join(new: Cli, approval_text: str, password: str) -> dict[str, Any]:
    return new.ok("device", "join", approval_text, "--password-stdin", input=password + "\n")


def _add_device(approver: Cli, new: Cli, name: str, password: str, approver_password: str = PASSWORD) -> dict[str, Any]:
    request = _request(new, approver, name, password)
    approval = _approve(approver, request["request"], approver_password)
    return _join(new, approval["approval"], password)


def _policy(cli: Cli) -> tuple[int, int, list[str]]:
    """(policy seq, epoch, device IDs) of the default vault as this device holds it."""
    devices = cli.ok("devices")
    return devices["policy_seq"], devices["epoch"], [row["device_id"] for row in devices["devices"]]


def _flip(text: str, prefix: str, index: int) -> str:
    """The same text with one byte of its decoded payload flipped."""
    tail = text[len(prefix) :]
    raw = bytearray(base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)))
    raw[index % len(raw)] ^= 0x01
    return prefix + b64e(bytes(raw))


def _open_store(home: Path, password: str) -> DecodedState:
    """Decode a stopped device's store in this process (what its engine would load at unlock)."""
    core = VaultCore(home / "store.db")
    store = core.require_store()
    store.install_master(store.check_password(password))
    try:
        return core.decode(store)
    finally:
        store.close()


# -- the whole path ------------------------------------------------------------------------


def test_join_two_then_three_devices(homes: dict[str, Cli]) -> None:
    """ID-1, ID-3, ID-4, ID-5: B joins through A; C joins through B with the user key B received sealed."""
    a, b, c = homes["a"], homes["b"], homes["c"]
    a.init()
    a_who = a.ok("whoami")
    assert len(a_who["device_fingerprint"]) == 64  # ID-4: the full SHA-256
    request = _request(b, a, "laptop", B_PASSWORD)
    assert request["request"].startswith(REQUEST_PREFIX)
    assert len(request["fingerprint"]) == 64
    assert not b.home.joinpath("store.db").exists()
    a.sudo()
    shown = a.run("device", "approve", request["request"])  # no TTY, no --yes: refused, nothing changed
    assert shown.returncode != 0 and "confirmation_required" in shown.stderr
    assert _policy(a)[0] == 1
    approval = a.ok("device", "approve", request["request"], "--yes")
    assert approval["fingerprint"] == request["fingerprint"]
    assert approval["approval"].startswith(APPROVAL_PREFIX)
    joined = _join(b, approval["approval"], B_PASSWORD)
    assert joined["joined"] and joined["fingerprint"] == request["fingerprint"]
    assert not (b.home / "join-pending.bin").exists()

    b_who = b.ok("whoami")
    assert b_who["user_id"] == a_who["user_id"]
    assert b_who["device_id"] == request["device_id"] != a_who["device_id"]
    assert b_who["device_name"] == "laptop"
    a_devices, b_devices = a.ok("devices"), b.ok("devices")
    assert a_devices["vault"] == b_devices["vault"] == joined["default_vault"]
    assert a.ok("status")["vaults"] == b.ok("status")["vaults"] == 1
    for listing, this in ((a_devices, a_who["device_id"]), (b_devices, b_who["device_id"])):
        rows = {row["device_id"]: row for row in listing["devices"]}
        assert set(rows) == {a_who["device_id"], b_who["device_id"]}
        assert [row["device_id"] for row in listing["devices"] if row["this_device"]] == [this]
        assert rows[b_who["device_id"]]["name"] == "laptop"
        assert not any(row["revoked"] for row in rows.values())
        assert listing["policy_seq"] == 2 and listing["epoch"] == 1

    # B writes under the shared policy, and its revisions pass the policy check at unlock.
    note = b.put("written on the laptop", "laptop body")
    b.ok("lock")
    b.unlock(B_PASSWORD)
    assert b.ok("get", note["id"])["body"] == "laptop body"
    seen = {row["device_id"]: row for row in b.ok("devices")["devices"]}
    assert seen[b_who["device_id"]]["last_write_ms"] is not None
    assert seen[a_who["device_id"]]["last_write_ms"] is None
    # "last seen" is the last completed sync with that device (issue 29): none yet.
    assert seen[a_who["device_id"]]["last_seen_ms"] is None

    # ID-5: the user key reached B inside the envelope, so B can approve C on its own.
    _add_device(b, c, "desktop", C_PASSWORD, approver_password=B_PASSWORD)
    c_who = c.ok("whoami")
    assert c_who["user_id"] == a_who["user_id"]
    assert len({a_who["device_id"], b_who["device_id"], c_who["device_id"]}) == 3
    b_seq, _, b_list = _policy(b)
    c_seq, _, c_list = _policy(c)
    assert b_seq == c_seq == 3 and b_list == c_list and c_who["device_id"] in c_list
    assert _policy(a)[0] == 2  # A learns of C with sync (a later issue)


def test_revoke_starts_a_new_epoch_and_refuses_the_revoked_device(homes: dict[str, Cli]) -> None:
    """PO-2, ID-5: the Owner revokes B: epoch 2; a revision B signs under the new policy is refused at A.

    Sync is a later issue: what is tested here is A's own policy check (VaultCore.check_revision,
    the path sync will use) on a revision B builds with its own keys against A's current policy.
    """
    a, b = homes["a"], homes["b"]
    a.init()
    _add_device(a, b, "laptop", B_PASSWORD)
    b_id = _device_id(b)
    a.stop()
    a.unlock()  # a fresh engine: the elevation from before is gone
    assert a.err("device", "revoke", "laptop")["code"] == "elevation_required"
    a.sudo()
    assert a.err("device", "revoke", _device_id(a))["code"] == "invalid_input"  # not itself
    assert a.err("device", "revoke", "no-such-device")["code"] == "device_not_found"
    assert _policy(a)[:2] == (2, 1)
    revoked = a.ok("device", "revoke", b_id[:10])
    assert revoked["epoch"] == 2 and revoked["revoked"] == b_id and revoked["name"] == "laptop"
    seq, epoch, listed = _policy(a)
    assert (seq, epoch) == (3, 2) and b_id in listed
    rows = {row["device_id"]: row for row in a.ok("devices")["devices"]}
    assert rows[b_id]["revoked"] and not rows[_device_id(a)]["revoked"]
    assert a.err("device", "revoke", "laptop")["code"] == "invalid_input"  # already revoked
    a.put("after the revocation", "written in epoch 2")
    a.stop()
    b.stop()

    at_a = _open_store(a.home, PASSWORD)
    at_b = _open_store(b.home, B_PASSWORD)
    vault = at_a.state.vault
    assert vault.policy.epoch == 2 and bytes.fromhex(b_id) in vault.policy.revoked()

    def forged(state: Any) -> Revision:
        # Built below the core's own write guards, as a revoked device bent on writing would.
        return build_revision(
            identity=state.identity,
            vault_id=vault.vault_id,
            policy_head=vault.policy.head,
            epoch=vault.policy.epoch,
            epoch_key=state.vaults[vault.vault_id].epoch_keys[1],
            asset_id=os.urandom(16),
            kind="memory",
            parents=[],
            tombstone=False,
            summary={"title": "t"},
            body=b"x",
            content_seqs=[1],
        ).revision

    # The control: A's own device passes the same check, so the refusal below is B's revocation.
    VaultCore.check_revision(forged(at_a.state), at_a.state.identity, at_a.state.vaults)
    with pytest.raises(SignatureError, match="not authorized"):
        VaultCore.check_revision(forged(at_b.state), at_a.state.identity, at_a.state.vaults)
    # B never received the epoch-2 key.
    assert 2 not in at_b.state.vault.epoch_keys and 2 in vault.epoch_keys


# -- tampering: refused with a typed error, nothing changed on the approver -------------------


def _unchanged(a: Cli, before: tuple[int, int, list[str]]) -> None:
    assert _policy(a) == before


def test_tampered_requests_are_refused_and_change_nothing(homes: dict[str, Cli]) -> None:
    """ID-3, ID-4: a flipped byte, another approver, an expired or a replayed request: typed error, nothing changed."""
    a, b, c = homes["a"], homes["b"], homes["c"]
    a.init()
    c.init()
    a.sudo()
    before = _policy(a)
    request = _request(b, a, "laptop", B_PASSWORD)["request"]
    for index in (12, 200, -5):  # inside the body, inside the keys, inside the signature
        error = a.err("device", "approve", _flip(request, REQUEST_PREFIX, index), "--yes")
        assert error["code"] == "join_request_invalid", error
        _unchanged(a, before)
    other = _request(homes["d"], c, "pinned-elsewhere", B_PASSWORD)["request"]
    assert a.err("device", "approve", other, "--yes")["code"] == "join_wrong_approver"
    _unchanged(a, before)
    made = int(time.time() * 1000) - 3_600_000
    _, expired = make_request(
        SigningKey.generate(), PrivateKey.generate(), "old", bytes.fromhex(_device_id(a)), made, lifetime_ms=60_000
    )
    assert a.err("device", "approve", expired, "--yes")["code"] == "join_request_expired"
    _unchanged(a, before)
    assert a.err("device", "approve", "memories-join-request-v1.", "--yes")["code"] == "join_request_invalid"
    _unchanged(a, before)
    # None of the refusals consumed the genuine request: it is approved now, once.
    approval = a.ok("device", "approve", request, "--yes")
    after = _policy(a)
    assert after[0] == before[0] + 1
    assert a.err("device", "approve", request, "--yes")["code"] == "join_request_used"
    _unchanged(a, after)
    _join(b, approval["approval"], B_PASSWORD)
    assert _device_id(b) in _policy(a)[2]


def test_tampered_approvals_and_wrong_passwords_leave_no_store(homes: dict[str, Cli]) -> None:
    """ID-2, ID-3, ID-5: an approval for another pending device, a flipped byte, a wrong password: no store, retry works."""
    a, b, d = homes["a"], homes["b"], homes["d"]
    a.init()
    b_request = _request(b, a, "laptop", B_PASSWORD)
    d_request = _request(d, a, "tablet", C_PASSWORD)
    b_approval = _approve(a, b_request["request"])["approval"]

    # D's pending request is not the one B's approval was sealed to.
    assert d.err("device", "join", b_approval, "--password-stdin", input=C_PASSWORD + "\n")["code"] == ("join_approval_invalid")
    assert not (d.home / "store.db").exists() and (d.home / "join-pending.bin").exists()
    for index in (40, 120, len(b_approval) // 2, -3):
        flipped = _flip(b_approval, APPROVAL_PREFIX, index)
        error = b.err("device", "join", flipped, "--password-stdin", input=B_PASSWORD + "\n")
        assert error["code"] == "join_approval_invalid", error
        assert not (b.home / "store.db").exists()
    error = b.err("device", "join", b_approval, "--password-stdin", input="not the password\n")
    assert error["code"] == "wrong_password"
    assert B_PASSWORD not in error["message"]
    assert not (b.home / "store.db").exists() and (b.home / "join-pending.bin").exists()
    # The pending file still works with the right password.
    _join(b, b_approval, B_PASSWORD)
    assert b.err("device", "join", b_approval, "--password-stdin", input=B_PASSWORD + "\n")["code"] == ("already_initialized")
    # D's own approval still works after its refused attempt.
    _join(d, _approve(a, d_request["request"])["approval"], C_PASSWORD)
    assert {_device_id(b), _device_id(d)} <= set(_policy(a)[2])


def test_a_join_without_a_request_and_a_request_on_a_vault_are_refused(homes: dict[str, Cli]) -> None:
    """ID-3: `device join` needs this home's pending request; `device request` needs an empty home."""
    a, b = homes["a"], homes["b"]
    a.init()
    request = _request(b, a, "laptop", B_PASSWORD)
    approval = _approve(a, request["request"])["approval"]
    (b.home / "join-pending.bin").unlink()
    assert b.err("device", "join", approval, "--password-stdin", input=B_PASSWORD + "\n")["code"] == "join_no_request"
    assert not (b.home / "store.db").exists()
    error = a.err("device", "request", "--approver", "00" * 32, "--password-stdin", input="x\n")
    assert error["code"] == "already_initialized"


# -- crashes: no half-joined device, no reusable request ------------------------------------


def _kill(cli: Cli) -> None:
    pid = cli.daemon_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(pid)


def test_joins_survive_either_daemon_being_killed(homes: dict[str, Cli]) -> None:
    """ID-3: B killed after its request, A killed right after approving: the join completes, the request is used."""
    a, b = homes["a"], homes["b"]
    a.init()
    request = _request(b, a, "laptop", B_PASSWORD)
    _kill(b)
    approval = _approve(a, request["request"])
    _kill(a)
    a.unlock()
    a.sudo()
    assert request["device_id"] in _policy(a)[2]  # the approval's commit is durable
    assert a.err("device", "approve", request["request"], "--yes")["code"] == "join_request_used"
    joined = _join(b, approval["approval"], B_PASSWORD)  # starts B's engine again
    assert joined["device_id"] == request["device_id"]


def test_a_pending_file_left_by_a_join_killed_after_publishing_is_removed(homes: dict[str, Cli], tmp_path: Path) -> None:
    """ID-3: once the store exists the pending request has served; the next engine start deletes a leftover."""
    a, b = homes["a"], homes["b"]
    a.init()
    request = _request(b, a, "laptop", B_PASSWORD)
    saved = tmp_path / "pending-copy"
    shutil.copy(b.home / "join-pending.bin", saved)
    _join(b, _approve(a, request["request"])["approval"], B_PASSWORD)
    _kill(b)
    shutil.copy(saved, b.home / "join-pending.bin")  # as if killed between publish and unlink
    b.unlock(B_PASSWORD)
    assert not (b.home / "join-pending.bin").exists()


# -- canary ----------------------------------------------------------------------------------


def _forms(secret: bytes) -> list[bytes]:
    return [secret, secret.hex().encode(), b64e(secret).encode(), base64.b64encode(secret).rstrip(b"=")]


def _sweep(paths: list[Path], needles: dict[str, list[bytes]]) -> None:
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            data = file.read_bytes()
            for name, forms in needles.items():
                assert not any(form in data for form in forms), f"{name} found in clear in {file}"


def test_no_password_or_key_in_clear_in_either_home(homes: dict[str, Cli], tmp_path: Path) -> None:
    """ID-5: the new store password and the user and device keys are never on disk, in logs or output in clear."""
    a, b = homes["a"], homes["b"]
    a.init()
    request = _request(b, a, "laptop", B_PASSWORD)
    pending_copy = tmp_path / "pending-copy"
    shutil.copy(b.home / "join-pending.bin", pending_copy)
    outputs = [str(request)]
    approval = _approve(a, request["request"])
    outputs.append(str(approval))
    outputs.append(str(_join(b, approval["approval"], B_PASSWORD)))
    b.put("a note on b", "its body")
    outputs += [str(b.ok("whoami")), str(b.ok("devices")), str(a.ok("devices"))]
    a.stop()
    b.stop()
    at_a, at_b = _open_store(a.home, PASSWORD), _open_store(b.home, B_PASSWORD)
    user_sk = bytes(at_a.state.identity.user_key)
    assert bytes(at_b.state.identity.user_key) == user_sk
    needles = {
        "B's password": [B_PASSWORD.encode()],
        "A's password": [PASSWORD.encode()],
        "the user key": _forms(user_sk),
        "B's device key": _forms(bytes(at_b.state.identity.device_key)),
        "B's exchange key": _forms(bytes(at_b.state.identity.exchange_key)),
    }
    _sweep([a.home, b.home, pending_copy], needles)
    for output in outputs:
        for name, forms in needles.items():
            assert not any(form.decode("latin-1") in output for form in forms), f"{name} in CLI output"


def test_join_password_attempts_are_budget_limited(homes: dict[str, Cli]) -> None:
    """ST-3 at join: wrong passwords on the pending request spend the same budget as unlock."""
    a, b = homes["a"], homes["b"]
    a.init()
    approval = _approve(a, _request(b, a, "laptop", B_PASSWORD)["request"])["approval"]
    codes = [b.err("device", "join", approval, "--password-stdin", input=f"guess {i}\n")["code"] for i in range(5)]
    assert codes == ["wrong_password"] * 5
    assert b.err("device", "join", approval, "--password-stdin", input=B_PASSWORD + "\n")["code"] == "rate_limited"
    assert not (b.home / "store.db").exists() and (b.home / "join-pending.bin").exists()


def test_an_approval_signed_by_the_approver_with_a_bad_grant_is_refused(homes: dict[str, Cli]) -> None:
    """ID-1, ID-5: the new device verifies the granted policy history itself, even from the pinned approver."""
    a, b = homes["a"], homes["b"]
    a.init()
    request = _request(b, a, "laptop", B_PASSWORD)
    genuine = _approve(a, request["request"])["approval"]
    a.stop()
    at_a = _open_store(a.home, PASSWORD)
    identity, vault = at_a.state.identity, at_a.state.vault
    req = decode_request(request["request"])
    cert, cert_sig = make_certificate(identity.user_key, req.device_pub, req.exchange_pub, int(time.time() * 1000))
    keys = [{"epoch": e, "key": k} for e, k in vault.epoch_keys.items()]

    def grant(history: list[dict[str, Any]], **changes: Any) -> dict[str, Any]:
        entry = {"vault_id": vault.vault_id, "name": "default", "default": True, "history": history, "epoch_keys": keys}
        base = {"user_sk": bytes(identity.user_key), "cert": cert, "cert_sig": cert_sig, "vaults": [entry], "names": []}
        return {**base, **changes}

    full = [p.to_record() for p in vault.history]
    genesis_only = full[:1]  # a history that never authorizes the new device
    bad_sig = [full[0], {"body": full[1]["body"], "sig": bytes(64)}]
    other_user = SigningKey.generate()
    wrong_cert, wrong_sig = make_certificate(other_user, req.device_pub, req.exchange_pub, int(time.time() * 1000))
    cases = {
        "history without the device": grant(genesis_only),
        "forged policy signature": grant(bad_sig),
        "certificate of another user": grant(full, user_sk=bytes(other_user), cert=wrong_cert, cert_sig=wrong_sig),
        "no current epoch key": grant(full) | {"vaults": [{**grant(full)["vaults"][0], "epoch_keys": []}]},
    }
    for name, bad in cases.items():
        forged = make_approval(identity, req, bad, int(time.time() * 1000))
        error = b.err("device", "join", forged, "--password-stdin", input=B_PASSWORD + "\n")
        assert error["code"] == "join_approval_invalid", (name, error)
        assert not (b.home / "store.db").exists(), name
    _join(b, genuine, B_PASSWORD)


def test_on_a_terminal_the_request_asks_twice_and_approve_shows_the_full_fingerprint(homes: dict[str, Cli]) -> None:
    """ID-4: the approver sees the full 64-digit fingerprint and must answer before anything changes."""
    a, b = homes["a"], homes["b"]
    a.init()
    code, output = run_in_terminal(
        b.command("device", "request", "--approver", _device_id(a), "--name", "laptop"),
        [("New password for this device's vault: ", B_PASSWORD), ("Repeat the password: ", B_PASSWORD)],
        b.environ(),
    )
    assert code == 0, output
    request = next(line.strip() for line in output.splitlines() if line.strip().startswith(REQUEST_PREFIX))
    fingerprint = decode_request(request).device_pub
    full = hashlib.sha256(fingerprint).hexdigest()
    a.sudo()
    before = _policy(a)
    code, output = run_in_terminal(a.command("device", "approve", request), [("? [y/N] ", "n")], a.environ())
    assert code != 0 and f"fingerprint {full}?" in output, output
    _unchanged(a, before)
    code, output = run_in_terminal(a.command("device", "approve", request), [("? [y/N] ", "y")], a.environ())
    assert code == 0, output
    approval = next(line.strip() for line in output.splitlines() if line.strip().startswith(APPROVAL_PREFIX))
    _join(b, approval, B_PASSWORD)
    assert _policy(a)[0] == before[0] + 1
