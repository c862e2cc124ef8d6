"""Key material generated inside the engine (RM-3): SSH keys and TLS client certificates.

Private keys go straight into a credential's secret body; only public halves
(an OpenSSH public key line, a PEM certificate or CSR) ever leave the engine.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from engine.errors import MemoriesError

__all__ = [
    "generate_ssh_key",
    "ssh_public_line",
    "generate_tls",
    "private_key_is_encrypted",
    "import_ssh_private_key",
    "check_ssh_certificate",
]

# Legacy PEM (PKCS#1/SEC1 with a Proc-Type header) and PKCS#8 mark encryption in the armour.
_ENCRYPTED_PEM_MARKERS = ("-----BEGIN ENCRYPTED PRIVATE KEY-----", "Proc-Type: 4,ENCRYPTED")
_OPENSSH_BEGIN = "-----BEGIN OPENSSH PRIVATE KEY-----"
_OPENSSH_END = "-----END OPENSSH PRIVATE KEY-----"
_OPENSSH_MAGIC = b"openssh-key-v1\x00"


def private_key_is_encrypted(text: str) -> bool:
    """Whether a private key file is passphrase-protected, read from its structure alone.

    Asking the key library instead would mean telling "needs a passphrase" from "damaged"
    by its error *texts*. OpenSSH's format names its cipher right after the magic
    (``string ciphername``, ``none`` when unencrypted); PEM formats say so in the armour.
    Anything unreadable counts as not encrypted, so the ordinary import reports it.
    """
    if any(marker in text for marker in _ENCRYPTED_PEM_MARKERS):
        return True
    start = text.find(_OPENSSH_BEGIN)
    end = text.find(_OPENSSH_END, start + 1)
    if start < 0 or end < 0:
        return False
    armoured = "".join(text[start + len(_OPENSSH_BEGIN) : end].split())
    try:
        body = base64.b64decode(armoured, validate=True)
    except (binascii.Error, ValueError):
        return False
    if not body.startswith(_OPENSSH_MAGIC):
        return False
    head = len(_OPENSSH_MAGIC)
    if len(body) < head + 4:
        return False
    length = int.from_bytes(body[head : head + 4], "big")
    cipher = body[head + 4 : head + 4 + length]
    return len(cipher) == length and cipher != b"none"


def import_ssh_private_key(private_key: str, passphrase: str | None = None) -> str:
    """The SSH private key as the vault stores it: unencrypted inside the encrypted card.

    An unencrypted key is kept byte for byte (after a check that it parses), so its
    public line stays what ``ssh-keygen -y`` prints. A passphrase-protected one is opened
    here, once, and kept in OpenSSH format with its comment: sessions and proxies then
    never need the passphrase, and the vault's own encryption protects the key at rest.
    """
    if not private_key_is_encrypted(private_key):
        ssh_public_line(private_key)
        return private_key
    if not passphrase:
        raise MemoriesError("key_encrypted")
    import asyncssh

    try:
        key = asyncssh.import_private_key(private_key, passphrase)
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError, ValueError, TypeError) as exc:
        # The library's text is dropped: it may quote parts of the key.
        raise MemoriesError("wrong_key_passphrase") from exc
    return key.export_private_key("openssh").decode("ascii")


def check_ssh_certificate(certificate: str, private_key: str) -> None:
    """An OpenSSH certificate must certify this very key: a mismatch would only show up as a
    refused login much later, with nothing saying why."""
    import asyncssh

    try:
        cert = asyncssh.import_certificate(certificate)
        key = asyncssh.import_private_key(private_key)
    except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
        raise MemoriesError("invalid_input", "The SSH certificate is not an OpenSSH certificate.") from exc
    if cert.key.public_data != key.public_data:
        raise MemoriesError("invalid_input", "The SSH certificate does not certify that private key.")


def generate_ssh_key(comment: str) -> tuple[str, str]:
    """A fresh Ed25519 key: (OpenSSH private key PEM, public key line)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode("ascii")
    return private, ssh_public_line(private, comment)


def ssh_public_line(private_key: str, comment: str = "") -> str:
    """Derive the ``authorized_keys`` line of an unencrypted SSH private key (RM-2, RM-3).

    asyncssh reads every format an SSH session can log in with (OpenSSH, PKCS#1, PKCS#8)
    and keeps the key file's own comment, so the line equals ``ssh-keygen -y -f KEY``.
    ``comment`` replaces that comment (generated keys are named after their credential).
    """
    import asyncssh  # imported here: the daemon needs it only for key and SSH operations

    try:
        key = asyncssh.import_private_key(private_key)
    except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
        # The library's text is dropped: it may quote parts of the key.
        raise MemoriesError("invalid_input", "The private key is not an unencrypted OpenSSH, PKCS#1 or PKCS#8 key.") from exc
    if comment:
        key.set_comment(comment)
    return key.export_public_key("openssh").decode("ascii").strip()


def generate_tls(common_name: str, days: int, sans: list[str], csr: bool) -> tuple[str, str, str]:
    """An EC P-256 key with a self-signed certificate (and optionally a CSR): (key PEM, cert PEM, CSR PEM)."""
    if not common_name or len(common_name) > 64 or not 1 <= days <= 3650:
        raise MemoriesError("invalid_input", "A TLS certificate needs a CN (≤64 chars) and 1–3650 days.")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    alt: list[x509.GeneralName] = []
    for san in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt.append(x509.DNSName(san))
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
    )
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    csr_pem = ""
    if csr:
        request = x509.CertificateSigningRequestBuilder().subject_name(name)
        if alt:
            request = request.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        csr_pem = request.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode("ascii")
    return key_pem, cert_pem, csr_pem
