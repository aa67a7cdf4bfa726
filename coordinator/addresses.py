"""Host:port addresses in the cluster file and on the command line: parsing `host:port` and
`[v6]:port`, what counts as a wildcard or a loopback host, and the check that a listening
address is one this process may bind (a wildcard only when the operator allows it).
Errors are ConfigErrors naming the field at fault.
"""

from __future__ import annotations

import ipaddress
import socket

from shared.errors import ConfigError

__all__ = ["Network", "check_bind", "is_loopback", "is_wildcard", "split_host_port"]


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def split_host_port(text: str, field: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); ConfigError naming `field` otherwise."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":")
        if ":" in host:
            raise ConfigError(f"{field}: write an IPv6 address as [addr]:port", field=field)
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ConfigError(f"{field}: {text!r} is not host:port (port 1..65535)", field=field)
    return host, int(port_text)


def is_wildcard(host: str) -> bool:
    """True when binding `host` listens on every interface. Parsed, not string-compared:
    the OS reads '0', '0.0', '0x0' and '::0' as the unspecified address too."""
    if host in ("", "*"):
        return True
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(host)
    except ValueError:
        try:
            # The legacy numeric forms inet_aton (and so bind) accepts: '0', '0x0', '0.0'.
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return False  # a host name: bound to what it resolves to, never a wildcard
    return address.is_unspecified


def is_loopback(host: str) -> bool:
    """True for a loopback IP literal or `localhost` (where clear-text HTTP stays local)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(text: str, field: str, *, allow_wildcard: bool) -> tuple[str, int]:
    """A bind address as (host, port), refusing the wildcard unless allowed explicitly."""
    host, port = split_host_port(text, field)
    if is_wildcard(host) and not allow_wildcard:
        raise ConfigError(
            f"{field}: {text!r} binds every interface; give an explicit address (or set "
            "allow_wildcard_bind = true when that is really meant)",
            field=field,
        )
    return host, port
