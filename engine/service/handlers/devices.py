"""Devices that join and leave (ID-1..ID-5, PO-2; issue 13).

* ``device_request`` (a home with no store): makes the new device's Ed25519 and X25519 keys
  and a join request pinning the approving device (engine/vault/joining.py), and writes them
  to ``join-pending.bin`` in the data home (0600, atomic), sealed with XChaCha20-Poly1305
  under an Argon2id key of the password chosen for the new store. No key is ever on disk in
  clear. A new request replaces the pending one.
* ``device_request_show`` / ``device_approve`` (a trusted, unlocked device, elevated): parse the
  request against this device's key, the clock and the consumed requests; approving signs the
  new device's certificate with the user key, adds it to every shared vault's policy and
  records the request as consumed in ONE commit (ID-3), then seals the grant (user key,
  certificate, every shared vault's policy history and epoch keys, device names) to the
  request's exchange key (ID-2, ID-5). The approval text is shown once.
* ``device_join`` (the new device): opens the pending file with the password (budget-limited),
  opens the approval, verifies every granted policy history and that it authorizes this
  device for the granted user, then creates the store atomically (ST-8) and unlocks it. A
  crash before the store is published leaves nothing; after it, the next start deletes a
  leftover pending file.
* ``whoami``, ``devices`` and ``device_revoke`` (Owner by the policy rules; a new epoch).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import os
import socket
import time
from pathlib import Path
from typing import Any

from nacl.public import PrivateKey
from nacl.signing import SigningKey

from engine.cards.device_vaults import is_device_only
from engine.crypto.aead import AeadError, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import KdfParams, calibrate, derive_key
from engine.crypto.keys import DeviceIdentity, SignatureError, fingerprint
from engine.errors import MemoriesError
from engine.service import requests_devices as rq
from engine.service.caller import Caller
from engine.service.center_runtime import runtime_of as center_runtime
from engine.service.registry import OPS, op
from engine.service.service import EXTENSIONS, Service, Unlocked
from engine.store.database import StoreFile, create_store
from engine.vault.core import VaultKeys
from engine.vault.invite import PIN_RECORD, make_invite, parse_fingerprint
from engine.vault.joining import (
    JoinRequest,
    decode_request,
    make_approval,
    make_certificate,
    make_request,
    open_approval,
    parse_request,
    request_fingerprint,
    request_id,
)
from engine.vault.policy import AddDevice, Change, Policy, RevokeDevice, verify_chain

__all__ = [
    "PENDING_FILE",
    "NAME_RECORD",
    "CONSUMED_RECORD",
    "device_names",
    "consumed_requests",
    "own_devices",
]

PENDING_FILE = "join-pending.bin"
NAME_RECORD = "device_name"
CONSUMED_RECORD = "join_consumed"
_SYNC_RECORD = "sync_peer"  # handlers/sync.py WATERMARK_RECORD (that module imports this one)
_PENDING_AAD = b"memories.join-pending\x00\x01"
_MIN_PREFIX = 8
_HEX = frozenset("0123456789abcdef")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _pending_path(service: Service) -> Path:
    return service.paths.home / PENDING_FILE


def _default_name() -> str:
    name = socket.gethostname().strip()[:64]
    return name if name and name.isprintable() else "device"


def device_names(state: Unlocked) -> dict[bytes, str]:
    """Device key -> the name this device knows for it (latest record wins)."""
    names = {state.identity.device_pub: _default_name()}
    for _, record in state.extra_records.get(NAME_RECORD, []):
        names[bytes(record["device"])] = str(record["name"])
    return names


def consumed_requests(state: Unlocked) -> set[bytes]:
    """IDs of the join requests approved here (ID-3: a request is used once)."""
    return {bytes(record["request_id"]) for _, record in state.extra_records.get(CONSUMED_RECORD, [])}


def own_devices(state: Unlocked) -> list[tuple[dict[str, Any], bytes]]:
    """(certificate, signature) of every device of this user that no vault held here revokes,
    this device first: what an invitation names, and the devices a vault follows (SY-5)."""
    identity = state.identity
    out: dict[bytes, tuple[dict[str, Any], bytes]] = {identity.device_pub: (identity.certificate, identity.certificate_sig)}
    revoked: set[bytes] = set()
    for vault_id, vault in state.vaults.items():
        if is_device_only(state, vault_id):
            continue
        revoked |= vault.policy.revoked()
        for device, (cert, sig) in vault.policy.certificates().items():
            if bytes(cert["user"]) == identity.user_pub and device not in out:
                out[device] = (cert, sig)
    return [pair for device, pair in out.items() if device not in revoked]


def _shared_vaults(state: Unlocked) -> list[VaultKeys]:
    """The vaults a device of this user holds: all but the device-only ones (CD-9)."""
    return [vault for vault_id, vault in state.vaults.items() if not is_device_only(state, vault_id)]


def _parse_key(text: str, what: str) -> bytes:
    value = text.strip().lower()
    if len(value) != 64 or not set(value) <= _HEX:
        raise MemoriesError("invalid_input", f"{what} takes the 64-hex-digit device ID that `memories whoami` shows there.")
    return bytes.fromhex(value)


# -- the pending file (new device) ---------------------------------------------------------


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``data`` (fsynced, then renamed)."""
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    os.close(fd)
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _seal_pending(password: str, secrets: dict[str, Any]) -> bytes:
    kdf = calibrate()
    kdf_blob = canonical_bytes(kdf.to_dict())
    sealed = seal(derive_key(password, kdf), canonical_bytes(secrets), _PENDING_AAD + kdf_blob)
    return canonical_bytes({"v": 1, "kdf": kdf.to_dict(), "sealed": sealed})


def _read_pending(service: Service) -> tuple[KdfParams, bytes]:
    try:
        raw = _pending_path(service).read_bytes()
    except FileNotFoundError:
        raise MemoriesError("join_no_request") from None
    try:
        outer = decode_canonical(raw)
        if not isinstance(outer, dict) or outer.get("v") != 1 or not isinstance(outer.get("sealed"), bytes):
            raise ValueError("pending file")
        return KdfParams.from_dict(outer["kdf"]), outer["sealed"]
    except (ValueError, TypeError, KeyError):
        raise MemoriesError("join_no_request", "The pending join request file is damaged; make a new request.") from None


def _open_pending(service: Service, password: str) -> tuple[SigningKey, PrivateKey, JoinRequest]:
    """The new device's keys and its request; ``wrong_password`` (budget-limited) otherwise."""
    kdf, sealed = _read_pending(service)
    with service.session.password_attempt():
        key = derive_key(password, kdf)
        try:
            plain = open_sealed(key, sealed, _PENDING_AAD + canonical_bytes(kdf.to_dict()))
        except AeadError:
            raise MemoriesError("wrong_password", "The password is not the one chosen for this join request.") from None
    secrets = decode_canonical(plain)
    device_key = SigningKey(bytes(secrets["device_sk"]))
    exchange_key = PrivateKey(bytes(secrets["exchange_sk"]))
    return device_key, exchange_key, decode_request(str(secrets["request"]))


def _remove_pending(service: Service) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_pending_path(service))


@op(rq.DeviceRequest, needs_unlock=False, lock_free=True)
def device_request(service: Service, request: rq.DeviceRequest, caller: Caller) -> dict[str, Any]:
    approver = _parse_key(request.approver, "--approver")
    name = request.name if request.name is not None else _default_name()
    with service.lock:
        if service.store is not None or service.paths.store.exists():
            raise MemoriesError("already_initialized", "This data home already holds a vault; a new device needs an empty home.")
        device_key, exchange_key = SigningKey.generate(), PrivateKey.generate()
        req, text = make_request(device_key, exchange_key, name, approver, _now_ms())
        secrets = {"device_sk": bytes(device_key), "exchange_sk": bytes(exchange_key), "request": text}
        service.paths.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_private(_pending_path(service), _seal_pending(request.password, secrets))
    return {
        "request": text,
        "device_id": req.device_pub.hex(),
        "fingerprint": request_fingerprint(req),
        "name": req.device_name,
        "approver": req.approver_pub.hex(),
        "expires_ms": req.expires_ms,
    }


# -- approving (trusted device) ------------------------------------------------------------


def _parse(state: Unlocked, text: str, now_ms: int) -> JoinRequest:
    return parse_request(text, approver_pub=state.identity.device_pub, now_ms=now_ms, consumed=consumed_requests(state))


def _request_view(req: JoinRequest) -> dict[str, Any]:
    return {
        "name": req.device_name,
        "device_id": req.device_pub.hex(),
        "fingerprint": request_fingerprint(req),
        "created_ms": req.created_ms,
        "expires_ms": req.expires_ms,
        "request_id": request_id(req).hex(),
    }


@op(rq.DeviceRequestShow, needs_elevation=True)
def device_request_show(service: Service, request: rq.DeviceRequestShow, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    return _request_view(_parse(state, request.request, _now_ms()))


# Lock-free: with a device ticket, the Center is asked about it first, outside the service
# lock (an HTTP request); the approval itself then runs behind the gates of an elevated op,
# which a lock-free op applies itself (registered without the flag, as the dispatcher skips
# the gate for lock-free ops: tests/integration/test_elevation_table.py).
@op(rq.DeviceApprove, lock_free=True)
def device_approve(service: Service, request: rq.DeviceApprove, caller: Caller) -> dict[str, Any]:
    spec = dataclasses.replace(OPS["device_approve"], needs_elevation=True, lock_free=False)
    if request.ticket is not None:
        # Imported here: see _approve (an import cycle otherwise).
        from engine.service.handlers import centers

        # The gates first: no Center is asked on behalf of a caller who could not approve.
        service.run_gated(spec, caller, dict)
        centers.require_device_ticket_valid(service, request.ticket)
    return service.run_gated(spec, caller, lambda: _approve(service, request, caller))


def _approve(service: Service, request: rq.DeviceApprove, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    now = _now_ms()
    req = _parse(state, request.request, now)
    identity = state.identity
    if any(req.device_pub in vault.policy.devices() for vault in state.vaults.values()):
        raise MemoriesError("join_request_invalid", "That device is already listed in this vault's policy; nothing was changed.")
    shared = _shared_vaults(state)
    ticket_records: list[dict[str, Any]] = []
    if request.ticket is None:
        # CT-1: with a Center, a device joins only with its signed device ticket.
        center_runtime(service).refuse_if_managed("approving a device")
    else:
        # Imported here: the Center handlers reach the grant and transcript handlers, which
        # reach the asset handlers, which import this module (a cycle at import time).
        from engine.service.handlers import centers

        allowed, record = centers.device_ticket(service, state, request.ticket, req.device_pub)
        shared = [vault for vault in shared if vault.name in allowed]
        if not shared:
            raise MemoriesError("invalid_input", "The device ticket names no vault this device holds; nothing was changed.")
        ticket_records.append(record)
    cert, cert_sig = make_certificate(identity.user_key, req.device_pub, req.exchange_pub, now)
    names = device_names(state)
    name = _unique_name(req.device_name, set(names.values()))
    names[req.device_pub] = name
    # The device is added and the request consumed in one transaction (ID-3).
    updated = service.vault.change_policies(
        state,
        [(vault.vault_id, AddDevice(cert, cert_sig)) for vault in shared],
        caller,
        extra_records=[
            {"t": CONSUMED_RECORD, "request_id": request_id(req)},
            {"t": NAME_RECORD, "device": req.device_pub, "name": name},
            *ticket_records,
        ],
    )
    grant = {
        "user_sk": bytes(identity.user_key),
        "cert": cert,
        "cert_sig": cert_sig,
        "vaults": [
            {
                "vault_id": vault.vault_id,
                "name": vault.name,
                "default": vault.vault_id == state.default_vault,
                "history": [policy.to_record() for policy in vault.history],
                "epoch_keys": [{"epoch": epoch, "key": key} for epoch, key in sorted(vault.epoch_keys.items())],
            }
            for vault in updated
        ],
        "names": [{"device": device, "name": name} for device, name in names.items()],
    }
    approval = make_approval(identity, req, grant, now)
    warning = None
    if name != req.device_name:
        warning = f"Another device is already named {req.device_name!r}; this one is named {name!r} here."
    return {**_request_view(req), "name": name, "approval": approval, "vaults": len(updated), "warning": warning}


def _unique_name(name: str, taken: set[str]) -> str:
    """Two devices left at the default (host) name would look alike in `devices` (issue 29)."""
    candidate, n = name, 2
    while candidate in taken:
        suffix = f" ({n})"
        candidate, n = name[: 64 - len(suffix)] + suffix, n + 1
    return candidate


# -- joining (new device) ------------------------------------------------------------------


def _bad_grant(detail: str) -> MemoriesError:
    return MemoriesError("join_approval_invalid", f"The approval's grant {detail}; nothing was changed.")


def _join_records(
    grant: dict[str, Any], device_key: SigningKey, exchange_key: PrivateKey, pending: JoinRequest
) -> tuple[list[dict[str, Any]], DeviceIdentity]:
    """The initial rows of the new store, after checking everything the grant claims."""
    try:
        identity = DeviceIdentity.from_record(
            {
                "user_sk": bytes(grant["user_sk"]),
                "device_sk": bytes(device_key),
                "exchange_sk": bytes(exchange_key),
                "certificate": grant["cert"],
                "certificate_sig": bytes(grant["cert_sig"]),
            }
        )
    except (KeyError, TypeError, ValueError, SignatureError):
        raise _bad_grant("does not certify this device with the user key it carries") from None
    if not hmac.compare_digest(bytes(identity.certificate.get("exchange", b"")), bytes(exchange_key.public_key)):
        raise _bad_grant("certifies another exchange key")
    vault_rows: list[dict[str, Any]] = []
    defaults = 0
    vaults = grant.get("vaults")
    if not isinstance(vaults, list) or not vaults:
        raise _bad_grant("holds no vault")
    try:
        for vault in vaults:
            vault_id, name, default = bytes(vault["vault_id"]), vault["name"], vault["default"] is True
            if not isinstance(name, str):
                raise TypeError("name")
            history = [Policy.parse(record) for record in vault["history"]]
            head = verify_chain(history)
            if bytes(head.body["vault"]) != vault_id:
                raise _bad_grant("names a policy of another vault")
            if not head.authorizes_device(identity.device_pub) or head.device_user(identity.device_pub) != identity.user_pub:
                raise _bad_grant("has a vault policy that does not authorize this device for the granted user")
            if head.role_of(identity.user_pub) is None:
                raise _bad_grant("has a vault policy the granted user is not a member of")
            keys: list[dict[str, Any]] = [{"epoch": int(e["epoch"]), "key": bytes(e["key"])} for e in vault["epoch_keys"]]
            if head.epoch not in {e["epoch"] for e in keys} or any(len(e["key"]) != 32 for e in keys):
                raise _bad_grant("lacks a vault's current epoch key")
            defaults += default
            for policy in history:
                vault_rows.append(
                    {
                        "t": "vault",
                        "vault_id": vault_id,
                        "name": name,
                        "default": default,
                        "policy": policy.to_record(),
                        "epoch_keys": keys,
                    }
                )
        names = [
            {"t": NAME_RECORD, "device": bytes(entry["device"]), "name": str(entry["name"])[:64]}
            for entry in grant.get("names", [])
        ]
    except MemoriesError as exc:
        if exc.code == "join_approval_invalid":
            raise
        raise _bad_grant(f"has a policy history that fails verification ({exc.code})") from None
    except (KeyError, TypeError, ValueError, SignatureError):
        raise _bad_grant("is malformed") from None
    if defaults != 1:
        raise _bad_grant("does not name exactly one default vault")
    if not any(entry["device"] == identity.device_pub for entry in names):  # else the approver's (made unique)
        names.append({"t": NAME_RECORD, "device": identity.device_pub, "name": pending.device_name})
    return [{"t": "identity", **identity.to_record()}, *vault_rows, *names], identity


@op(rq.DeviceJoin, needs_unlock=False, lock_free=True)
def device_join(service: Service, request: rq.DeviceJoin, caller: Caller) -> dict[str, Any]:
    if service.store is not None or service.paths.store.exists():
        raise MemoriesError("already_initialized")
    device_key, exchange_key, pending = _open_pending(service, request.password)
    grant = open_approval(request.approval, device_key=device_key, exchange_key=exchange_key, pending=pending, now_ms=_now_ms())
    records, identity = _join_records(grant, device_key, exchange_key, pending)
    with service.lock:
        if service.store is not None or service.paths.store.exists():
            raise MemoriesError("already_initialized")
        master = create_store(service.paths.store, request.password, calibrate(), records)
        _remove_pending(service)  # the store is published: the request has served
        store = StoreFile.open(service.paths.store)
        store.install_master(master)
        service.store = store
        service.state = service.load_state(store)
        service.session.touch()
        state = service.state
        service.vault.commit(state, [], [], [service.vault.audit_record(state, "device_join", caller, outcome="ok")])
        vault = state.vault
    return {
        "joined": True,
        "unlocked": True,
        "user_id": identity.user_pub.hex(),
        "device_id": identity.device_pub.hex(),
        "fingerprint": fingerprint(identity.device_pub),
        "name": pending.device_name,
        "vaults": len(state.vaults),
        "default_vault": vault.vault_id.hex(),
        "content": "none yet: notes arrive with sync",
    }


# -- reading and revoking ------------------------------------------------------------------


@op(rq.Whoami)
def whoami(service: Service, request: rq.Whoami, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    identity = state.identity
    return {
        "user_id": identity.user_pub.hex(),
        "user_fingerprint": fingerprint(identity.user_pub),
        "device_id": identity.device_pub.hex(),
        "device_fingerprint": fingerprint(identity.device_pub),
        "device_name": device_names(state)[identity.device_pub],
    }


@op(rq.InviteNew, needs_elevation=True)
def invite_new(service: Service, request: rq.InviteNew, caller: Caller) -> dict[str, Any]:
    """PO-3: an invitation for another person's vault, and the pin of that person's user here."""
    state = service.require_unlocked()
    owner_fp = parse_fingerprint(request.owner)
    identity = state.identity
    now = _now_ms()
    devices = own_devices(state)
    name = request.name if request.name is not None else device_names(state)[identity.device_pub]
    invite, text = make_invite(identity.user_key, devices, name, owner_fp, now, request.hours * 3600 * 1000)
    pin = {"t": PIN_RECORD, "owner": owner_fp, "expires_ms": invite.expires_ms, "created_ms": now}
    audit = service.vault.audit_record(state, "invite_new", caller, outcome="ok")
    service.vault.commit(state, [], [], [pin, audit])
    names = device_names(state)
    return {
        "invite": text,
        "user_id": identity.user_pub.hex(),
        "user_fingerprint": fingerprint(identity.user_pub),
        "owner_fingerprint": owner_fp.hex(),
        "name": invite.name,
        "devices": [
            {
                "device_id": bytes(c["device"]).hex(),
                "fingerprint": fingerprint(bytes(c["device"])),
                "name": names.get(bytes(c["device"])),
            }
            for c, _ in devices
        ],
        "expires_ms": invite.expires_ms,
    }


def _last_write(state: Unlocked) -> dict[bytes, int]:
    seen: dict[bytes, int] = {}
    for rev in state.index.revisions.values():
        author = bytes(rev.author)
        seen[author] = max(seen.get(author, 0), rev.created_ms)
    return seen


def _last_sync(state: Unlocked) -> dict[bytes, int]:
    """When this device last completed a sync with each peer (the sync watermark records,
    ``handlers/sync.py`` WATERMARK_RECORD; by this device's clock)."""
    seen: dict[bytes, int] = {}
    for _, record in state.extra_records.get(_SYNC_RECORD, []):
        device = bytes(record["device"])
        seen[device] = max(seen.get(device, 0), int(record.get("ts_ms", 0)))
    return seen


@op(rq.Devices)
def devices(service: Service, request: rq.Devices, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    vault = state.vault
    policy = vault.policy
    certs = policy.certificates()
    names = device_names(state)
    seen, wrote = _last_sync(state), _last_write(state)
    revoked = policy.revoked()
    own = state.identity
    rows = []
    for device in policy.devices():
        cert = certs.get(device)
        if cert is not None:
            added: int | None = int(cert[0]["created_ms"])
        elif device == own.device_pub:
            added = int(own.certificate["created_ms"])
        else:
            added = None
        user = policy.device_user(device)
        rows.append(
            {
                "device_id": device.hex(),
                "name": names.get(device),
                "fingerprint": fingerprint(device),
                "user_id": user.hex() if user is not None else None,
                "added_ms": added,
                "last_seen_ms": seen.get(device),  # the last completed sync with it (issue 29)
                "last_write_ms": wrote.get(device),
                "revoked": device in revoked,
                "this_device": device == own.device_pub,
            }
        )
    return {"vault": vault.vault_id.hex(), "epoch": policy.epoch, "policy_seq": policy.seq, "devices": rows}


def _resolve_device(state: Unlocked, ref: str) -> bytes:
    listed = state.vault.policy.devices()
    names = device_names(state)
    matches = {device for device in listed if names.get(device) == ref}
    key = ref.strip().lower()
    if not matches and len(key) >= _MIN_PREFIX and set(key) <= _HEX:
        matches = {d for d in listed if d.hex().startswith(key) or fingerprint(d).startswith(key)}
    if not matches:
        raise MemoriesError(
            "device_not_found", "No device of this vault has that name, fingerprint or ID (see `memories devices`)."
        )
    if len(matches) > 1:
        raise MemoriesError("device_ambiguous", f"{len(matches)} devices match; give more hex digits of the fingerprint.")
    return matches.pop()


@op(rq.DeviceRevoke, needs_elevation=True)
def device_revoke(service: Service, request: rq.DeviceRevoke, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    target = _resolve_device(state, request.device)
    if target == state.identity.device_pub:
        raise MemoriesError(
            "invalid_input", "This device cannot revoke itself; revoke it from another of your devices. Nothing was changed."
        )
    if target in state.vault.policy.revoked():
        raise MemoriesError("invalid_input", "That device is already revoked; nothing was changed.")
    changes: list[tuple[bytes, Change]] = [
        (vault.vault_id, RevokeDevice(target))
        for vault in _shared_vaults(state)
        if target in vault.policy.devices() and target not in vault.policy.revoked()
    ]
    updated = service.vault.change_policies(state, changes, caller)
    head = state.vault.policy
    return {
        "revoked": target.hex(),
        "fingerprint": fingerprint(target),
        "name": device_names(state).get(target),
        "epoch": head.epoch,
        "policy_seq": head.seq,
        "vaults": len(updated),
    }


def _setup(service: Service) -> None:
    """A join killed after its store was published leaves the pending file: it has served."""
    if service.paths.store.exists():
        _remove_pending(service)


EXTENSIONS.append(_setup)
