"""A node's cluster id: the file `cluster.id` in its data directory.

Owns reading and writing that file (plain text: the id and a newline). A cluster id names
one cluster for its whole life; the Raft handshake carries it (`RaftSettings.cluster_id`),
so a node of another cluster, such as the old cluster after a restore, is refused. Invariants:
a directory's id, once written, is never replaced (`ensure_cluster_id` only fills a missing
one); it is on disk (the file and its directory synced, unless syncing is off) before the
caller goes on; an id is 1..64 characters of `[A-Za-z0-9._-]`.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from replication.durability import durable_replace, make_directory

__all__ = [
    "CLUSTER_ID_FILE",
    "ClusterIdError",
    "ensure_cluster_id",
    "new_cluster_id",
    "read_cluster_id",
    "write_cluster_id",
]

CLUSTER_ID_FILE = "cluster.id"
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_FILE_BYTES_MAX = 128


class ClusterIdError(ValueError):
    """A cluster.id file that does not hold one id."""


def new_cluster_id() -> str:
    """A fresh random id (128 bits): what a restore or a forced recovery gives its cluster."""
    return secrets.token_hex(16)


def read_cluster_id(node_dir: str | os.PathLike[str]) -> str | None:
    """The id in `node_dir`'s cluster.id, or None when there is no such file."""
    path = Path(node_dir) / CLUSTER_ID_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    text = raw.decode("ascii", "replace").strip()
    if len(raw) > _FILE_BYTES_MAX or _ID.fullmatch(text) is None:
        raise ClusterIdError(f"{path} does not hold a cluster id ([A-Za-z0-9._-]{{1,64}})")
    return text


def write_cluster_id(
    node_dir: str | os.PathLike[str], cluster_id: str, *, durable: bool = True
) -> None:
    """Write `cluster_id` as `node_dir`'s id (creating the directory)."""
    if _ID.fullmatch(cluster_id) is None:
        raise ClusterIdError(f"{cluster_id!r} is not a cluster id ([A-Za-z0-9._-]{{1,64}})")
    make_directory(str(node_dir), durable=durable)
    path = Path(node_dir) / CLUSTER_ID_FILE
    tmp = path.with_suffix(".id.tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(cluster_id + "\n")
    if durable:
        durable_replace(str(tmp), str(path))
    else:
        os.replace(tmp, path)


def ensure_cluster_id(node_dir: str | os.PathLike[str], first: str, *, durable: bool = True) -> str:
    """`node_dir`'s id; at a node's first start (no file yet) `first` is written as it."""
    found = read_cluster_id(node_dir)
    if found is not None:
        return found
    write_cluster_id(node_dir, first, durable=durable)
    return first
