"""`ripple backup`: take a backup from the cluster, check it, store it, then tell the cluster.

Owns the operator's side of a backup (docs/runbooks/backup.md): GET
/v1/admin/backup from the leader (the state at one applied index, after a barrier;
`coordinator/core/backup.py` is the file's format), the same checks a restore makes before
anything is stored, the file written whole or not at all (a temporary file synced, then
renamed; an existing file is never replaced) and/or the object put create-only in the
pipeline's store, and only then the record (POST /v1/admin/backups), so the cluster's last
backup always names one that was stored. A record the cluster refuses (during a rolling
upgrade, before command-set version 2 is finalized) leaves the stored backup good: the
command says so and succeeds.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from coordinator.client import CoordinatorClient
from coordinator.core.backup import BackupError, BackupHeader, load_backup
from shared.errors import ClientError, ErrorKind, RippleError

__all__ = ["StoredBackup", "backup_command", "store_key", "take_backup", "write_backup_file"]

BACKUP_PATH = "/v1/admin/backup"
RECORD_PATH = "/v1/admin/backups"


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredBackup:
    header: BackupHeader
    where: list[str]  # the file and/or the store object it was written to
    recorded: bool
    why_not: str | None  # why the cluster did not record it


def store_key(header: BackupHeader) -> str:
    """Where `ripple backup --store` puts a backup: per cluster, in time order."""
    return f"backups/{header.cluster_id}/{header.created_at_ms:015d}-i{header.applied_index}.backup"


def write_backup_file(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all; an existing file is refused, not replaced."""
    if path.exists():
        raise RippleError(f"{path} exists: a backup never replaces a file", code="usage")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.unlink(missing_ok=True)  # a run that stopped half-way left it
    # Mode 0600 from the start: the backup is the cluster's map (docs/security.md).
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def take_backup(
    client: CoordinatorClient,
    *,
    bytes_max: int,
    out: Path | None,
    store_uri: str | None,
    s3_endpoint: str | None,
) -> StoredBackup:
    """Take a backup, check it, write it to `out` and/or the store, record it."""
    data = await client.download(BACKUP_PATH, bytes_max=bytes_max)
    try:
        header, _ = load_backup(data)
    except BackupError as exc:
        raise RippleError(f"the leader sent a damaged backup: {exc}", code="bad_backup") from exc
    where: list[str] = []
    if out is not None:
        write_backup_file(out, data)
        where.append(str(out))
    if store_uri is not None:
        from pipeline.store import open_store

        store = open_store(store_uri, s3_endpoint)
        key = store_key(header)
        if not store.put_if_absent(key, data):
            raise RippleError(f"{store.uri(key)} exists already", code="conflict")
        where.append(store.uri(key))
    record = {
        "cluster_id": header.cluster_id,
        "applied_index": header.applied_index,
        "term": header.term,
        "sha256": header.body_sha256,
        "size_bytes": len(data),
        "created_at_ms": header.created_at_ms,
    }
    try:
        await client.post(RECORD_PATH, record, idempotency_key=header.body_sha256[:64])
    except ClientError as exc:
        if exc.kind not in (ErrorKind.CONFLICT, ErrorKind.UNAVAILABLE):
            raise
        return StoredBackup(header=header, where=where, recorded=False, why_not=exc.message)
    return StoredBackup(header=header, where=where, recorded=True, why_not=None)


async def backup_command(args: argparse.Namespace, client: CoordinatorClient) -> int:
    """`ripple backup`, on a client with the admin token: take, store, record, say so."""
    done = await take_backup(
        client,
        bytes_max=args.bytes_max,
        out=None if args.out is None else Path(args.out),
        store_uri=args.store,
        s3_endpoint=args.s3_endpoint,
    )
    h = done.header
    print(
        f"backup of cluster {h.cluster_id} at applied index {h.applied_index} (term {h.term}, "
        f"command-set version {h.command_set_version}, ripple {h.package_version}), "
        f"sha256 {h.body_sha256}: " + ", ".join(done.where)
    )
    if not done.recorded:
        print(f"warning: stored, but the cluster did not record it: {done.why_not}")
    return 0
