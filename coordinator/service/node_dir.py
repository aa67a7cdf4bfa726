"""What a coordinator node keeps in its data directory beside Raft's own files.

Owns two files of `<data_dir>/<node id>/`:

- `cluster.id`: the cluster the directory belongs to. Written once, at the node's first
  start (from the cluster file's `cluster_id`, else derived from the cluster secret and the
  configured nodes, so nodes started from one cluster file agree), or by whatever creates a
  new cluster's directories (a restore writes a new id, so no node of the old cluster can
  talk to the new one). The Raft handshake refuses a peer with another id.
- `join.json`: for a node added online (`ripple coordinator --join`), its own address and
  the voters it joined, since the cluster file names neither; and whether the log has made
  it a voter yet (`admitted`), so a restart does not put it back in the joining mode.

Invariant: both are replaced whole and synced with their directory (when `durable`), so a
crash leaves the old file or the new one, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.config import ClusterConfig
from replication.durability import durable_replace, make_directory
from replication.members import Member
from shared.errors import ConfigError

__all__ = [
    "CLUSTER_ID_FILE",
    "JOIN_FILE",
    "JoinRecord",
    "cluster_id_of",
    "derived_cluster_id",
    "read_join_record",
    "write_cluster_id",
    "write_join_record",
]

CLUSTER_ID_FILE = "cluster.id"
JOIN_FILE = "join.json"
CLUSTER_ID_LABEL = b"ripple cluster id v1"


def _write(path: Path, data: bytes, *, durable: bool) -> None:
    make_directory(str(path.parent), durable=durable)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    if durable:
        durable_replace(str(tmp), str(path))
    else:
        os.replace(tmp, path)


def derived_cluster_id(config: ClusterConfig) -> str:
    """The id every node started from `config` agrees on: the configured one, else a digest
    of the secret and the configured nodes' Raft addresses."""
    if config.cluster_id:
        return config.cluster_id
    digest = hashlib.sha256(CLUSTER_ID_LABEL)
    digest.update(config.cluster_secret.encode())
    for raft in sorted(n.raft for n in config.nodes):
        digest.update(b"\0" + raft.encode())
    return digest.hexdigest()[:32]


def write_cluster_id(node_dir: Path, cluster_id: str, *, durable: bool = True) -> None:
    """Make `node_dir` belong to the cluster `cluster_id` (a new directory, or a restore)."""
    _write(node_dir / CLUSTER_ID_FILE, cluster_id.encode() + b"\n", durable=durable)


def cluster_id_of(node_dir: Path, config: ClusterConfig) -> str:
    """The cluster id of the directory, written from `config` at the first start."""
    path = node_dir / CLUSTER_ID_FILE
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    cluster_id = derived_cluster_id(config)
    write_cluster_id(node_dir, cluster_id, durable=config.fsync)
    return cluster_id


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRecord:
    """A node added online: who it is, the voters it joined, and whether it votes yet."""

    node: Member
    raft_bind: str | None
    voters: tuple[Member, ...]
    cluster_id: str
    admitted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "node": _member_json(self.node),
            "raft_bind": self.raft_bind,
            "voters": [_member_json(m) for m in self.voters],
            "cluster_id": self.cluster_id,
            "admitted": self.admitted,
        }


def _member_json(m: Member) -> dict[str, str]:
    return {"id": m.id, "raft": m.raft, "http": m.http}


def _member(raw: Any) -> Member:
    return Member(id=str(raw["id"]), raft=str(raw["raft"]), http=str(raw["http"]))


def read_join_record(node_dir: Path) -> JoinRecord | None:
    path = node_dir / JOIN_FILE
    try:
        raw = json.loads(path.read_text())
        bind = raw.get("raft_bind")
        return JoinRecord(
            node=_member(raw["node"]),
            raft_bind=None if bind is None else str(bind),
            voters=tuple(_member(v) for v in raw["voters"]),
            cluster_id=str(raw["cluster_id"]),
            admitted=bool(raw["admitted"]),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a join record: {exc}", field="join") from exc


def write_join_record(node_dir: Path, record: JoinRecord, *, durable: bool = True) -> None:
    data = json.dumps(record.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    _write(node_dir / JOIN_FILE, data, durable=durable)
