"""How a `ripple` subcommand reaches the coordinators: the URLs (--coordinator, RIPPLE_URL,
else the cluster file `ripple up` wrote), the CA bundle for https:// ones, the admin token
(--admin-token, RIPPLE_ADMIN_TOKEN, else that cluster file), and the flags that choose them.
"""

from __future__ import annotations

import argparse
import os

from coordinator.client import CoordinatorClient
from coordinator.config_file import load_config
from ripple.local_cluster import cluster_file
from shared.errors import RippleError

__all__ = [
    "DEFAULT_DATA_DIR",
    "admin_token",
    "client_for",
    "coordinator_arg",
    "coordinator_urls",
    "tls_ca",
]

DEFAULT_DATA_DIR = "./ripple-data"


def coordinator_urls(args: argparse.Namespace) -> list[str]:
    if args.coordinator:
        return list(args.coordinator)
    env = os.environ.get("RIPPLE_URL")
    if env:
        return [u for u in env.split(",") if u]
    data_dir = getattr(args, "data_dir", None)  # `ripple worker` has no cluster file
    path = cluster_file(data_dir) if data_dir else None
    if path is not None and path.exists():
        cfg = load_config(path, env={}, validate=False)
        return [n.url for n in cfg.nodes]
    raise RippleError(
        "no coordinator URL: pass --coordinator URL, set RIPPLE_URL, or run `ripple up` first",
        code="usage",
        field="coordinator",
    )


def tls_ca(args: argparse.Namespace) -> str | None:
    """The CA bundle https:// coordinators are verified against: --tls-ca (RIPPLE_TLS_CA),
    else the local cluster file's tls_ca, else the system's roots (None)."""
    if getattr(args, "tls_ca", None):
        return str(args.tls_ca)
    data_dir = getattr(args, "data_dir", None)
    path = cluster_file(data_dir) if data_dir else None
    if path is not None and path.exists():
        return load_config(path, env={}, validate=False).tls_ca or None
    return None


def client_for(args: argparse.Namespace, token: str | None = None) -> CoordinatorClient:
    return CoordinatorClient(coordinator_urls(args), token=token, ca_file=tls_ca(args))


def admin_token(args: argparse.Namespace) -> str:
    token = getattr(args, "admin_token", None) or os.environ.get("RIPPLE_ADMIN_TOKEN")
    if token:
        return str(token)
    path = cluster_file(args.data_dir)
    if path.exists():
        return load_config(path, env={}, validate=False).admin_token
    raise RippleError("admin token needed: --admin-token or RIPPLE_ADMIN_TOKEN", code="usage")


def coordinator_arg(sp: argparse.ArgumentParser) -> None:
    """The one flag for coordinator URLs, on every subcommand that needs them. `--url` is
    kept as an alias: the read, admin, produce and get commands used to spell it that way."""
    sp.add_argument(
        "--coordinator",
        "--url",
        dest="coordinator",
        action="append",
        metavar="URL",
        help="coordinator URL (repeatable; default RIPPLE_URL, comma-separated)",
    )
    sp.add_argument(
        "--tls-ca",
        default=os.environ.get("RIPPLE_TLS_CA"),
        metavar="PEM",
        help="CA bundle to verify https:// coordinators (and workers) against "
        "(env RIPPLE_TLS_CA; default: the cluster file's tls_ca, else the system's roots)",
    )
