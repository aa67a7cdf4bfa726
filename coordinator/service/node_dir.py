"""What a node added online keeps in its data directory beside Raft's own files.

Owns `<data_dir>/<node id>/join.json`: for a node added online (`ripple coordinator
--join`), its own address and the voters it joined, since the cluster file names neither,
the cluster id it joined (written as the directory's `cluster.id` too, by
`replication.identity`); and whether the log has made it a voter yet (`admitted`), so a
restart does not put it back in the joining mode.

Invariant: the record is replaced whole and synced with its directory (when `durable`), so
a crash leaves the old record or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replication.durability import durable_replace, make_directory
from replication.members import Member
from shared.errors import ConfigError

__all__ = ["JOIN_FILE", "JoinRecord", "read_join_record", "write_join_record"]

JOIN_FILE = "join.json"


def _write(path: Path, data: bytes, *, durable: bool) -> None:
    make_directory(str(path.parent), durable=durable)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    if durable:
        durable_replace(str(tmp), str(path))
    else:
        os.replace(tmp, path)


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
