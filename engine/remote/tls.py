"""Client TLS contexts for remote targets (RM-4): verification and hostname checks are never off."""

from __future__ import annotations

import ssl

from engine.errors import MemoriesError
from engine.remote.targets import Target

__all__ = ["client_context"]


def client_context(target: Target) -> ssl.SSLContext | None:
    """The system trust store plus the optional ``tls_ca`` PEM; None when the credential disables TLS."""
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
    return context
