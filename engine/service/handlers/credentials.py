"""Credential ops for remote targets and generated keys (RM-1…RM-4).

``credential_new`` stores a remote target (postgres, mysql, redis, ssh, ftp, tcp),
a PEM CA (``tls_ca``), an imported SSH key (``ssh_key``) or an imported TLS client
certificate with its key (``tls_cert``, for mTLS). ``credential_generate``
(under sudo) creates key material inside the engine; ``credential_public`` derives
only the public half. No op here returns a secret body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from engine.errors import MemoriesError
from engine.remote import keygen, targets
from engine.service.caller import Caller
from engine.service.registry import op
from engine.service.requests import Request
from engine.service.service import Service, Unlocked
from engine.vault.credentials import (
    backed_item,
    create_credential,
    credential_summary,
    find_credential,
    list_credentials,
    read_credential,
)

__all__ = ["CredentialNew", "CredentialGenerate", "CredentialPublic", "CredentialList", "CredentialShow"]

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Ref = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
HostStr = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
Short = Annotated[str, msgspec.Meta(max_length=1000)]
Pem = Annotated[str, msgspec.Meta(max_length=64 * 1024)]
Secret = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]

NEW_TYPES = targets.REMOTE_TYPES | {"tls_ca", "ssh_key", "tls_cert", "openpgp"}


class CredentialNew(Request, tag="credential_new"):
    name: Name
    type: Annotated[str, msgspec.Meta(pattern="^[a-z_]{1,16}$")]
    host: HostStr | None = None
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    user: Short | None = None
    database: Short | None = None
    tls: Literal["required", "disabled"] | None = None
    tls_ca: Ref | None = None
    tls_cert: Ref | None = None  # a tls_cert credential: the client certificate for mTLS (postgres/mysql/redis)
    allow_hosts: Annotated[list[HostStr], msgspec.Meta(max_length=64)] = []
    allow_auth: Annotated[list[Literal["md5", "cleartext"]], msgspec.Meta(max_length=2)] = []
    password: Secret | None = None
    private_key: Pem | None = None
    key_passphrase: Secret | None = None  # opens a passphrase-protected private_key once, at import
    key: Ref | None = None  # an ssh_key credential to authenticate with
    certificate: Pem | None = None
    host_key: Short | None = None
    known_hosts: Pem | None = None
    pem: Pem | None = None
    # tls_cert: a PKCS#12 bundle (.p12/.pfx, a PKCS12 keystore) holding key and certificate chain
    pkcs12: Annotated[bytes, msgspec.Meta(max_length=256 * 1024)] | None = None


class CredentialGenerate(Request, tag="credential_generate"):
    kind: Literal["ssh", "tls"]
    name: Name
    comment: Short = ""
    cn: Annotated[str, msgspec.Meta(max_length=64)] = ""
    days: Annotated[int, msgspec.Meta(ge=1, le=3650)] = 365
    san: Annotated[list[HostStr], msgspec.Meta(max_length=32)] = []
    csr: bool = False


class CredentialPublic(Request, tag="credential_public"):
    id: Ref


class CredentialList(Request, tag="credential_list"):
    type: Annotated[str, msgspec.Meta(pattern="^[a-z_]{1,16}$")] | None = None
    # Also the credentials made for a protected card, a login or a protected secret; without
    # it only the ones the user made on their own (issue 17: one credential, not four).
    all: bool = False


class CredentialShow(Request, tag="credential_show"):
    id: Ref


def _check_pem_cert(pem: str) -> None:
    from cryptography import x509

    try:
        x509.load_pem_x509_certificates(pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise MemoriesError("invalid_input", "The file is not a PEM certificate.") from exc


def _build(service: Service, request: CredentialNew) -> tuple[dict[str, Any], dict[str, Any]]:
    if request.pkcs12 is not None and request.type != "tls_cert":
        raise MemoriesError("invalid_input", "A PKCS#12 bundle is imported as a tls_cert credential.")
    if request.type == "tls_ca":
        if not request.pem:
            raise MemoriesError("invalid_input", "A tls_ca credential needs a PEM certificate.")
        _check_pem_cert(request.pem)
        return {"pem": request.pem.strip() + "\n"}, {}
    if request.type == "ssh_key":
        if not request.private_key:
            raise MemoriesError("invalid_input", "An ssh_key credential needs an OpenSSH private key.")
        private = keygen.import_ssh_private_key(request.private_key, request.key_passphrase)
        return {"public_key": keygen.ssh_public_line(private)}, {"private_key": private}
    if request.type == "tls_cert":
        return _import_tls_cert(service, request)
    if request.type == "openpgp":  # a key for crypto jobs (JB-1): armored public or secret key
        from engine.jobs.openpgp import import_openpgp_key

        if not request.private_key:
            raise MemoriesError("invalid_input", "An openpgp credential needs an armored key (--key-file).")
        return import_openpgp_key(request.private_key, service.paths.home / "jobs")
    fields = {f: getattr(request, f) for f in request.__struct_fields__ if f not in {"name", "type", "key_passphrase"}}
    if request.type == "ssh" and request.private_key:
        fields["private_key"] = keygen.import_ssh_private_key(request.private_key, request.key_passphrase)
    public, secret = targets.build(request.type, fields)
    state = service.require_unlocked()
    # References are checked now (typos fail early) but resolved at open time, so rotating a CA or key needs no edit.
    if request.tls_ca:
        ca = read_credential(service.vault, state, request.tls_ca)
        if ca.ctype != "tls_ca":
            raise MemoriesError("invalid_input", "--tls-ca must name a tls_ca credential.")
        public["tls_ca"] = ca.asset_id.hex()
    if request.tls_cert:
        client = read_credential(service.vault, state, request.tls_cert)
        if client.ctype != "tls_cert":
            raise MemoriesError("invalid_input", "--tls-cert must name a tls_cert credential (`credential generate tls`).")
        public["tls_cert"] = client.asset_id.hex()
    if request.type == "ssh":
        key_pem = str(secret.get("private_key", ""))
        if request.key:
            if key_pem:
                raise MemoriesError("invalid_input", "Give the private key either as a file or as --key, not both.")
            key = read_credential(service.vault, state, request.key)
            if key.ctype != "ssh_key":
                raise MemoriesError("invalid_input", "--key must name an ssh_key credential.")
            public["key_ref"] = key.asset_id.hex()
            key_pem = str(key.secret.get("private_key", ""))
        if request.certificate:
            if not key_pem:
                raise MemoriesError("invalid_input", "An SSH certificate needs the private key it certifies.")
            keygen.check_ssh_certificate(request.certificate, key_pem)
    elif request.key or request.private_key or request.certificate:
        raise MemoriesError("invalid_input", "Keys and certificates belong to ssh credentials.")
    return public, secret


def _import_tls_cert(service: Service, request: CredentialNew) -> tuple[dict[str, Any], dict[str, Any]]:
    """An mTLS client certificate (chain) with its key: the key from a file, or, for a CA-signed
    certificate of a generated key (`generate tls --csr`), copied from that tls_cert credential (--key)."""
    from engine.remote.tls import check_client_pair, load_pkcs12

    if request.pkcs12 is not None:
        if request.certificate or request.private_key or request.key:
            raise MemoriesError("invalid_input", "A PKCS#12 bundle holds key and certificate: give it alone.")
        certificate, private = load_pkcs12(request.pkcs12, request.key_passphrase)
        return {"certificate": certificate}, {"private_key": private}
    if not request.certificate:
        raise MemoriesError("invalid_input", "A tls_cert credential needs its PEM certificate (--certificate-file).")
    key_pem = request.private_key or ""
    if request.key:
        if key_pem:
            raise MemoriesError("invalid_input", "Give the private key either as a file or as --key, not both.")
        source = read_credential(service.vault, service.require_unlocked(), request.key)
        if source.ctype != "tls_cert":
            raise MemoriesError("invalid_input", "--key must name a tls_cert credential (e.g. from `credential generate tls`).")
        key_pem = str(source.secret.get("private_key", ""))
    if not key_pem:
        raise MemoriesError("invalid_input", "A tls_cert credential needs its private key (--key-file, or --key CRED).")
    certificate, private = check_client_pair(request.certificate, key_pem, request.key_passphrase)
    return {"certificate": certificate}, {"private_key": private}


@op(CredentialNew)
def credential_new(service: Service, request: CredentialNew, caller: Caller) -> dict[str, Any]:
    if request.type not in NEW_TYPES:
        raise MemoriesError("invalid_input", "Unknown credential type.")
    state = service.require_unlocked()
    public, secret = _build(service, request)
    if request.type == "ssh" and not secret and "key_ref" not in public:
        raise MemoriesError("invalid_input", "An SSH credential needs a password or a private key.")
    rev = create_credential(service.vault, state, caller, name=request.name, ctype=request.type, public=public, secret=secret)
    return credential_summary(service.vault, state, state.index.assets[rev.asset_id])


@op(CredentialGenerate, needs_elevation=True)
def credential_generate(service: Service, request: CredentialGenerate, caller: Caller) -> dict[str, Any]:
    """RM-3: the private key is created and stored here and is never returned."""
    state = service.require_unlocked()
    if request.kind == "ssh":
        private, line = keygen.generate_ssh_key(request.comment or request.name)
        public: dict[str, Any] = {"public_key": line, "algorithm": "ssh-ed25519"}
        ctype = "ssh_key"
    else:
        private, cert, csr = keygen.generate_tls(request.cn or request.name, request.days, request.san, request.csr)
        public = {"certificate": cert, **({"csr": csr} if csr else {})}
        ctype = "tls_cert"
    rev = create_credential(
        service.vault, state, caller, name=request.name, ctype=ctype, public=public, secret={"private_key": private}
    )
    return credential_summary(service.vault, state, state.index.assets[rev.asset_id])


@op(CredentialPublic)
def credential_public(service: Service, request: CredentialPublic, caller: Caller) -> dict[str, Any]:
    """RM-3: the OpenSSH public key line or PEM certificate; never a private key."""
    state = service.require_unlocked()
    summary = credential_summary(service.vault, state, find_credential(service.vault, state, request.id))
    public = summary["public"]
    if summary["type"] == "ssh":
        return _ssh_public(service, state, request.id, caller)
    if summary["type"] == "ssh_key":
        return {"type": "ssh_key", "public_key": public["public_key"]}
    if summary["type"] == "tls_cert":
        return {"type": "tls_cert", "certificate": public["certificate"], "csr": public.get("csr", "")}
    if summary["type"] == "tls_ca":
        return {"type": "tls_ca", "certificate": public["pem"]}
    raise MemoriesError("invalid_input", "That credential has no public key or certificate.")


def _ssh_public(service: Service, state: Unlocked, ref: str, caller: Caller) -> dict[str, Any]:
    """An ssh credential's login key as an OpenSSH line (plus its certificate line, if stored)."""
    # Deriving it decrypts the stored private key, so it needs sudo like key generation (RM-3).
    if not service.session.is_elevated(caller.namespace):
        raise MemoriesError("elevation_required")
    cred = read_credential(service.vault, state, ref)
    certificate = str(cred.public.get("certificate", ""))
    if cred.public.get("key_ref"):
        key = read_credential(service.vault, state, str(cred.public["key_ref"]))
        line = str(key.public.get("public_key", "")) or keygen.ssh_public_line(str(key.secret.get("private_key", "")))
    elif cred.secret.get("private_key"):
        line = keygen.ssh_public_line(str(cred.secret["private_key"]))
    else:
        raise MemoriesError("invalid_input", "This SSH credential logs in with a password; it holds no key to show.")
    return {"type": "ssh", "public_key": line, "certificate": certificate}


@op(CredentialList)
def credential_list(service: Service, request: CredentialList, caller: Caller) -> dict[str, Any]:
    state = service.require_unlocked()
    items = [
        c
        for c in list_credentials(service.vault, state)
        if (request.type is None or c["type"] == request.type) and (request.all or backed_item(c["public"]) is None)
    ]
    return {"items": sorted(items, key=lambda c: str(c["name"]))}


@op(CredentialShow)
def credential_show(service: Service, request: CredentialShow, caller: Caller) -> dict[str, Any]:
    """A credential by name or ID; also as cards show it (``cred:ID``), or by its login's or card's ID (IM-2)."""
    state = service.require_unlocked()
    ref = request.id.removeprefix("cred:")
    try:
        entry = find_credential(service.vault, state, ref)
    except MemoriesError as exc:
        if exc.code != "not_found":
            raise
        from engine.service.handlers.cards import _credential_of  # the login/protected card's own credential

        try:
            _, cred = _credential_of(service, state, ref)
        except MemoriesError:
            raise exc from None
        entry = state.index.assets[cred.asset_id]
    return credential_summary(service.vault, state, entry)
