"""The PostgreSQL upstream leg shared by the proxy and remote sessions (PX-2, RM-4).

``connect`` sends SSLRequest, reads exactly one byte back and starts TLS with hostname
verification (and the credential's client certificate, if any). ``authenticate``
answers the server's authentication request with the credential:

* SCRAM-SHA-256-PLUS when the connection is TLS and the server offers it: the
  ``tls-server-end-point`` channel binding (RFC 5929: a hash of the server certificate
  *as this client saw it*) goes into the proof, so a TLS-terminating middlebox that
  holds some certificate we trust still cannot relay the exchange to the real server.
* SCRAM-SHA-256 otherwise. Over TLS the client then says "y" (RFC 5802 §6: I support
  channel binding, you did not offer it), so a server that *did* offer PLUS, whose offer
  was stripped on the way, refuses the downgrade.
* MD5 or cleartext only if the credential allows them; certificate-only logins (the
  server says AuthenticationOk at once) need no password at all.

scramp checks that the server nonce extends ours and verifies the server signature;
AuthenticationOk without a verified SASLFinal is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import struct

import scramp

from engine.errors import MemoriesError
from engine.remote.targets import Target
from engine.remote.tls import tls_error

__all__ = [
    "Streams",
    "MAX_MESSAGE",
    "SSL_REQUEST",
    "PROTOCOL_3",
    "message",
    "startup_message",
    "read_message",
    "server_error",
    "connect",
    "authenticate",
    "end_point_binding",
    "choose_scram",
]

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]

MAX_MESSAGE = 64 * 1024  # handshake messages (PX-2); sessions raise it for DataRow
SSL_REQUEST = 80877103
PROTOCOL_3 = 196608
AUTH_OK, AUTH_CLEARTEXT, AUTH_MD5, AUTH_SASL, AUTH_SASL_CONTINUE, AUTH_SASL_FINAL = 0, 3, 5, 10, 11, 12
SCRAM, SCRAM_PLUS = "SCRAM-SHA-256", "SCRAM-SHA-256-PLUS"
CHANNEL_BINDING = "tls-server-end-point"


def message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def startup_message(params: dict[str, str]) -> bytes:
    body = struct.pack("!I", PROTOCOL_3)
    for key, value in params.items():
        body += key.encode() + b"\x00" + value.encode() + b"\x00"
    body += b"\x00"
    return struct.pack("!I", len(body) + 4) + body


async def read_message(reader: asyncio.StreamReader, limit: int = MAX_MESSAGE) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    kind, length = head[:1], struct.unpack("!I", head[1:])[0]
    if not 4 <= length <= limit:
        raise MemoriesError("protocol_error", "The upstream sent an oversized or malformed message.")
    return kind, await reader.readexactly(length - 4)


def server_error(body: bytes) -> tuple[str, str]:
    """(SQLSTATE, message) of an ErrorResponse/NoticeResponse body."""
    fields = {}
    for part in body.split(b"\x00"):
        if part:
            fields[part[:1]] = part[1:].decode("utf-8", "replace")
    return fields.get(b"C", ""), fields.get(b"M", "")


async def connect(target: Target, host: str, context: ssl.SSLContext | None, limit: int = MAX_MESSAGE * 2) -> Streams:
    """TCP, then SSLRequest and TLS unless the credential disables it."""
    try:
        reader, writer = await asyncio.open_connection(host, target.port, limit=limit)
    except OSError as exc:
        raise MemoriesError("remote_unreachable") from exc
    try:
        if context is None:
            return reader, writer
        writer.write(struct.pack("!II", 8, SSL_REQUEST))
        await writer.drain()
        answer = await reader.readexactly(1)
        if answer != b"S":
            raise MemoriesError("remote_tls_failed", "The PostgreSQL server does not offer TLS.")
        if getattr(reader, "_buffer", b""):
            # Bytes after 'S' but before TLS would be injected plaintext (CVE-2021-23222).
            raise MemoriesError("protocol_error", "The server sent data before the TLS handshake.")
        try:
            await writer.start_tls(context, server_hostname=host)
        except (ssl.SSLError, ssl.CertificateError) as exc:
            raise tls_error(exc, target) from exc
        return reader, writer
    except BaseException:
        writer.transport.abort()
        raise


def end_point_binding(der: bytes) -> bytes | None:
    """RFC 5929 tls-server-end-point: the certificate hashed with its signature hash (MD5/SHA-1 → SHA-256)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import hashes

    try:
        algorithm = x509.load_der_x509_certificate(der).signature_hash_algorithm
    except (ValueError, UnsupportedAlgorithm):
        return None
    if algorithm is None:  # Ed25519/Ed448 certificates: RFC 5929 defines no hash, so no binding
        return None
    if isinstance(algorithm, hashes.MD5 | hashes.SHA1):
        algorithm = hashes.SHA256()
    digest = hashes.Hash(algorithm)
    digest.update(der)
    return digest.finalize()


def choose_scram(mechanisms: list[str], target: Target, peer_der: bytes | None) -> tuple[scramp.ScramClient, str]:
    """Pick the mechanism: PLUS when offered and the connection is TLS, plain SCRAM-SHA-256 otherwise."""
    binding = end_point_binding(peer_der) if peer_der else None
    if binding is not None and SCRAM_PLUS in mechanisms:
        client = scramp.ScramClient([SCRAM_PLUS], target.user, target.password, channel_binding=(CHANNEL_BINDING, binding))
        return client, SCRAM_PLUS
    if SCRAM not in mechanisms:
        raise MemoriesError("protocol_error", "The server offers no SCRAM-SHA-256 this proxy can use.")
    if binding is not None:
        # gs2 flag "y": binding supported here but not offered; lets the server detect a stripped PLUS offer.
        client = scramp.ScramClient([SCRAM], target.user, target.password, channel_binding=(CHANNEL_BINDING, binding))
    else:
        client = scramp.ScramClient([SCRAM], target.user, target.password)
    return client, SCRAM


def _login_refused(code: str, text: str, target: Target, mechanism: str | None) -> MemoriesError:
    """Turn the server's ErrorResponse during authentication into a typed error (never echoing the credential)."""
    lowered = text.lower()
    if "channel binding" in lowered:
        # PG answers 08P01 "SCRAM channel binding check failed" / "... negotiation error".
        return MemoriesError(
            "remote_tls_failed",
            "The server rejected the SCRAM channel binding: the TLS connection does not end at the real "
            "server (a TLS-intercepting middlebox?) or the channel-binding offer was altered on the way.",
        )
    if code == "28000" and "certificate" in lowered:
        if not target.tls_client_cert:
            return MemoriesError(
                "remote_auth_failed",
                "The server requires a TLS client certificate; add one to the credential with --tls-cert.",
            )
        return MemoriesError(
            "remote_auth_failed", "The server did not accept the credential's TLS client certificate for this user."
        )
    if code in {"28P01", "28000"}:
        return MemoriesError("remote_auth_failed")
    return MemoriesError("remote_error", f"The PostgreSQL server refused the login ({code or 'no code'}).")


def _need_password(target: Target) -> None:
    if not target.password:
        raise MemoriesError(
            "remote_auth_failed", "The server asked for a password, but the credential has only a TLS client certificate."
        )


async def authenticate(upstream: Streams, target: Target) -> str:
    """Run the auth exchange until AuthenticationOk; returns the method used ("SCRAM-SHA-256-PLUS", "md5", …)."""
    try:
        return await _authenticate(upstream, target)
    except ssl.SSLError as exc:
        # TLS 1.3: a refused client certificate arrives as an alert on the first read.
        raise tls_error(exc, target) from exc


async def _authenticate(upstream: Streams, target: Target) -> str:
    reader, writer = upstream
    scram: scramp.ScramClient | None = None
    mechanism: str | None = None
    scram_verified = False
    method = "trust"
    ssl_object = writer.get_extra_info("ssl_object")
    peer_der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    while True:
        kind, body = await read_message(reader)
        if kind == b"E":
            raise _login_refused(*server_error(body), target, mechanism)
        if kind == b"N":
            continue
        if kind != b"R" or len(body) < 4:
            raise MemoriesError("protocol_error", "Unexpected message during PostgreSQL authentication.")
        code = struct.unpack("!I", body[:4])[0]
        data = body[4:]
        if code == AUTH_OK:
            if scram is not None and not scram_verified:
                # A server that skips SASLFinal never proved it knows the password.
                raise MemoriesError("protocol_error", "The server ended SCRAM without its signature.")
            if scram is None and ssl_object is not None and target.tls_client_cert and method == "trust":
                method = "cert"
            return method
        if code == AUTH_SASL and scram is None:
            _need_password(target)
            mechanisms = [m.decode("ascii", "replace") for m in data.split(b"\x00") if m]
            scram, mechanism = choose_scram(mechanisms, target, peer_der)
            method = mechanism
            first = scram.get_client_first().encode()
            writer.write(message(b"p", mechanism.encode() + b"\x00" + struct.pack("!i", len(first)) + first))
        elif code == AUTH_SASL_CONTINUE and scram is not None and not scram_verified:
            try:
                scram.set_server_first(data.decode("utf-8"))  # checks the nonce extends ours
                final = scram.get_client_final().encode()
            except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
                raise MemoriesError("protocol_error", "The server's SCRAM challenge is invalid.") from exc
            writer.write(message(b"p", final))
        elif code == AUTH_SASL_FINAL and scram is not None and not scram_verified:
            try:
                scram.set_server_final(data.decode("utf-8"))  # verifies the server signature
            except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
                raise MemoriesError("protocol_error", "The server's SCRAM signature did not verify.") from exc
            scram_verified = True
            continue
        elif code == AUTH_MD5 and "md5" in target.allow_auth and scram is None and len(data) == 4:
            _need_password(target)
            inner = hashlib.md5((target.password + target.user).encode(), usedforsecurity=False).hexdigest()
            outer = hashlib.md5(inner.encode() + data, usedforsecurity=False).hexdigest()
            writer.write(message(b"p", b"md5" + outer.encode() + b"\x00"))
            method = "md5"
        elif code == AUTH_CLEARTEXT and "cleartext" in target.allow_auth and scram is None:
            _need_password(target)
            writer.write(message(b"p", target.password.encode() + b"\x00"))
            method = "cleartext"
        else:
            raise MemoriesError("protocol_error", "The server asked for an authentication method this proxy refuses.")
        await writer.drain()
