"""Client TLS for remote targets (RM-4): verification and hostname checks are never off.

Optionally the context also carries a client certificate (mTLS) from a ``tls_cert``
credential. Its private key must never reach a disk in plaintext, yet Python's
``SSLContext.load_cert_chain`` only reads *files*. The key is therefore re-encrypted
(PKCS#8, PBES2/AES-256) under a random 256-bit passphrase that exists only in this
process's memory, and only that ciphertext is written:

* to an anonymous ``memfd`` on Linux (no name in any file system, never on disk, gone
  with its last descriptor), or
* to a 0600 temporary file that is unlinked right after loading elsewhere (macOS and
  Windows have no memfd).

Either way what could leak (a crash leaving the temp file, swap, a backup of /tmp) is
ciphertext under a key that is dropped once OpenSSL has the key in memory. A plain
memfd holding the *plaintext* key would be memory-only on Linux but has no portable
equivalent; an encrypted temp file alone would work everywhere, so the memfd is just
the better container where it exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import ssl
import sys
import tempfile
from collections.abc import Iterator

from engine.errors import MemoriesError
from engine.remote.targets import Target

__all__ = [
    "client_context",
    "load_client_cert",
    "check_client_pair",
    "tls_error",
    "refusal_after_handshake",
    "CLIENT_CERT_ALERTS",
]

# TLS alerts a server sends when it refuses (or misses) the client certificate. OpenSSL
# reports them as the SSLError ``reason``; in TLS 1.3 they arrive on the first read
# after the client's side of the handshake already finished.
CLIENT_CERT_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)


def client_context(target: Target) -> ssl.SSLContext | None:
    """The system trust store plus the optional ``tls_ca`` PEM and client certificate; None when TLS is off."""
    if target.tls == "disabled":
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # create_default_context already sets both; restated because RM-4 depends on them.
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if target.tls_ca_pem:
        try:
            context.load_verify_locations(cadata=target.tls_ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise MemoriesError("invalid_input", "The tls_ca credential is not a PEM certificate.") from exc
    if target.tls_client_cert:
        load_client_cert(context, target.tls_client_cert, target.tls_client_key)
    return context


def _encrypted_key(key_pem: str, passphrase: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(key_pem.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise MemoriesError("invalid_input", "The TLS client key is not an unencrypted PEM private key.") from exc
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(passphrase),
    )


def load_client_cert(context: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """Load a certificate chain and its key into ``context`` without writing the key in plaintext."""
    passphrase = secrets.token_bytes(32)
    try:
        blob = cert_pem.strip().encode("ascii") + b"\n" + _encrypted_key(key_pem, passphrase)
    except UnicodeEncodeError as exc:
        raise MemoriesError("invalid_input", "The TLS client certificate is not PEM text.") from exc
    try:
        with _blob_path(blob) as path:
            # A callable, so the passphrase is handed over only when OpenSSL asks for it.
            context.load_cert_chain(path, password=lambda: passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise MemoriesError("invalid_input", "The TLS client certificate does not match its private key.") from exc
        raise MemoriesError("invalid_input", "The TLS client certificate could not be loaded.") from exc
    except OSError as exc:
        raise MemoriesError("io_error", "The TLS client certificate could not be handed to OpenSSL.") from exc


@contextlib.contextmanager
def _blob_path(blob: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds ``blob``: a memfd on Linux, else a 0600 temp file removed at once."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None and sys.platform.startswith("linux"):
        fd = memfd_create("memories-tls", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, blob)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="memories-tls-", suffix=".pem")  # created 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def check_client_pair(cert_pem: str, key_pem: str, passphrase: str | None = None) -> tuple[str, str]:
    """Validate an imported client certificate (chain) and key; returns (certificate PEM, PKCS#8 key PEM).

    The certificate's public key must be the key's: a mismatch would only show up as a
    failed handshake much later. A passphrase-protected key is opened once, here, and
    stored unencrypted inside the encrypted card (like an SSH key, keygen.import_ssh_private_key).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from engine.remote.keygen import private_key_is_encrypted

    try:
        chain = x509.load_pem_x509_certificates(cert_pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise MemoriesError("invalid_input", "The certificate file is not a PEM certificate.") from exc
    encrypted = private_key_is_encrypted(key_pem)
    if encrypted and not passphrase:
        raise MemoriesError("key_encrypted")
    try:
        key = serialization.load_pem_private_key(
            key_pem.encode("ascii"), password=passphrase.encode("utf-8") if encrypted and passphrase else None
        )
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        if encrypted:
            raise MemoriesError("wrong_key_passphrase") from exc
        raise MemoriesError("invalid_input", "The key file is not a PEM private key.") from exc
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise MemoriesError("invalid_input", "The certificate does not belong to that private key.")
    certificate = "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in chain)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode("ascii")
    return certificate, private


def load_pkcs12(data: bytes, passphrase: str | None = None) -> tuple[str, str]:
    """A PKCS#12 bundle (``.p12``/``.pfx``, or an Android Studio / Java keystore of type PKCS12)
    as (certificate chain PEM, PKCS#8 key PEM), checked like a PEM pair (:func:`check_client_pair`).

    Bundles are nearly always password-protected, but an empty password is legal: without a
    passphrase that is tried before ``key_encrypted`` asks for one. A Java
    keystore of the older JKS type is named as such, with the command that converts it.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    if data[:4] == b"\xfe\xed\xfe\xed":  # JKS magic: not PKCS#12 at all
        raise MemoriesError(
            "invalid_input",
            "That is a Java keystore of the older JKS type; convert it first: keytool -importkeystore "
            "-srckeystore FILE -destkeystore FILE.p12 -deststoretype pkcs12",
        )
    try:
        # Without a passphrase OpenSSL tries both "no password" and the empty one.
        loaded = pkcs12.load_key_and_certificates(data, passphrase.encode("utf-8") if passphrase is not None else None)
    except ValueError:
        if not _looks_like_pkcs12(data):
            raise MemoriesError("invalid_input", "The file is not a PKCS#12 bundle (.p12, .pfx or a PKCS12 keystore).") from None
        raise MemoriesError("key_encrypted" if passphrase is None else "wrong_key_passphrase") from None
    key, certificate, extra = loaded
    if key is None or certificate is None:
        raise MemoriesError("invalid_input", "The PKCS#12 bundle holds no private key with its certificate.")
    chain = [certificate, *extra]
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode("ascii")
    return check_client_pair("".join(c.public_bytes(pem).decode("ascii") for c in chain), key_pem)


def _looks_like_pkcs12(data: bytes) -> bool:
    """A DER SEQUENCE whose first element is the version INTEGER 3 (PFX, RFC 7292): the file is
    PKCS#12 and only the password failed."""
    if len(data) < 8 or data[0] != 0x30:
        return False
    length = data[1]
    offset = 2 + (length & 0x7F if length & 0x80 else 0)
    return data[offset : offset + 3] == b"\x02\x01\x03"


def tls_error(exc: BaseException, target: Target) -> MemoriesError:
    """Map a TLS failure to a typed error that says *which* certificate was the problem (API-8)."""
    if isinstance(exc, ssl.SSLCertVerificationError | ssl.CertificateError):
        return MemoriesError("remote_tls_failed")  # the server's certificate or name did not verify
    reason = getattr(exc, "reason", None)
    if isinstance(exc, ssl.SSLError) and reason in CLIENT_CERT_ALERTS:
        if not target.tls_client_cert:
            return MemoriesError(
                "remote_auth_failed",
                "The server requires a TLS client certificate; add one to the credential with --tls-cert.",
            )
        return MemoriesError(
            "remote_auth_failed",
            "The server rejected the credential's TLS client certificate (unknown CA, wrong name or expired).",
        )
    if isinstance(exc, ssl.SSLEOFError) and target.tls_client_cert:
        # Some servers (MariaDB) drop a refused client certificate without an alert.
        return MemoriesError(
            "remote_tls_failed",
            "The server closed the connection during the TLS handshake; it may not accept the "
            "credential's TLS client certificate.",
        )
    if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
        # TLS 1.2 servers say this both for "no common cipher" and for "no client certificate".
        return MemoriesError(
            "remote_tls_failed",
            "The TLS handshake failed: no common protocol or cipher, or the server wants a client certificate.",
        )
    return MemoriesError("remote_tls_failed", "The TLS handshake with the remote server failed.")


async def refusal_after_handshake(host: str, port: int, target: Target, timeout: float = 2.0) -> MemoriesError | None:
    """Why a direct-TLS server closed a new connection during the client's first exchange, when
    it refused the client certificate: None when it did not (or this cannot tell).

    In TLS 1.3 the server checks the client certificate after the client's side of the handshake
    has finished, so the client may already have written its first command. The server then sends
    its alert and closes with that command unread, and the reset that follows can discard the
    alert before it is read: the client sees only a closed connection. This second connection
    completes the handshake and writes nothing, so the alert arrives intact. It runs only after
    such a failure, so a successful connect costs nothing."""
    context = client_context(target)
    if context is None:
        return None
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
            await reader.read(1)  # the server speaks second: only an alert (or a close) comes
    except ssl.SSLError as exc:
        if getattr(exc, "reason", None) in CLIENT_CERT_ALERTS:
            return tls_error(exc, target)
    except (OSError, TimeoutError):
        pass
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
    return None
