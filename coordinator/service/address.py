"""Worker addresses: the one URL form the leader will call, checked at registration.

The leader POSTs to `<address>/v1/partitions/...` with the worker's call token, so the
address must not be able to steer that call anywhere but a worker's API root: it is a
scheme (`http` or `https`), a host and a port, and nothing else (no path, query, userinfo
or fragment; the host a name or an IP literal). With `worker_networks` set, the host must
be an IP literal inside one of those networks (a name could resolve anywhere).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from coordinator.addresses import Network
from shared.errors import RequestError

__all__ = ["HOST_VERDICTS_CACHED_MAX", "check_address"]

# Hosts whose verdict is kept (`_host_refusal`). Workers share a handful of hosts and differ by
# port; the bound keeps a stream of distinct names from growing it.
HOST_VERDICTS_CACHED_MAX = 4096

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*$")


def _refuse(why: str) -> RequestError:
    return RequestError(f"address: {why}", field="address")


def check_address(address: str, networks: Sequence[Network] = ()) -> str:
    """The address as the leader will use it (`scheme://host:port`), or 400 naming `address`."""
    if not address.isascii() or not address.isprintable():
        raise _refuse("must be printable ASCII")
    parts = urlsplit(address)
    if parts.scheme not in ("http", "https"):
        raise _refuse("scheme must be http or https")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _refuse("no user information (user@) allowed")
    if parts.path or parts.query or parts.fragment or "?" in address or "#" in address:
        raise _refuse("scheme, host and port only: no path, query or fragment")
    try:
        port = parts.port
    except ValueError:
        raise _refuse("port must be 1..65535") from None
    if port is None or port == 0:
        raise _refuse("a port is required (1..65535)")
    refusal = _host_refusal(parts.hostname or "", tuple(networks))
    if refusal is not None:
        raise _refuse(refusal)
    return address


@functools.lru_cache(maxsize=HOST_VERDICTS_CACHED_MAX)
def _host_refusal(host: str, networks: tuple[Network, ...]) -> str | None:
    """Why `host` is refused under `networks`, or None. A pure function of its arguments,
    cached: `ipaddress` parses in Python, and a worker registers with the same host each
    time."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
        if not _HOST_NAME.match(host):
            return "host must be a DNS name or an IP address"
    if ip is not None and ip.is_unspecified:
        return "host must not be the unspecified address"
    if networks:
        if ip is None:
            return "worker_networks is set: the host must be an IP address in it"
        if not any(ip in net for net in networks):
            return f"{ip} is not in worker_networks"
    return None
