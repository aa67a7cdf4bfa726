"""TLS for Ripple's HTTP: server contexts from a certificate and key, client contexts that
trust a given CA bundle. Used by the coordinator's API, the leader's calls to workers, the
worker's API, the SDK and the CLI, so every side builds its context the same way.

Clients always verify the server (certificate chain and host name); a CA bundle only says
which roots to trust instead of the system's. TLS is off unless a certificate is given.
"""

from __future__ import annotations

import ssl

from shared.errors import ConfigError

__all__ = ["client_context", "server_context"]


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context; ConfigError naming the file when it cannot be loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot load TLS certificate {cert_file!r} / key {key_file!r}: {exc}",
            field="tls_cert",
        ) from None
    return context


def client_context(ca_file: str | None) -> ssl.SSLContext:
    """A verifying client context: trusts `ca_file` when given, else the system's roots."""
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load TLS CA bundle {ca_file!r}: {exc}", field="tls_ca") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
