"""Key material generated inside the engine (RM-3): SSH keys and TLS client certificates.

Private keys go straight into a credential's secret body; only public halves
(an OpenSSH public key line, a PEM certificate or CSR) ever leave the engine.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from engine.errors import MemoriesError

__all__ = ["generate_ssh_key", "ssh_public_line", "generate_tls"]


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
