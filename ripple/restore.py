"""`ripple restore` and `ripple recover`: a NEW cluster's data directories, made from a backup
file or from the data directory of the one survivor of a lost majority.

Owns making them (docs/runbooks/restore.md and docs/runbooks/lost-majority.md).
Every check comes first: the backup's magic, header, length and checksum, or the survivor's
dump and journal applied to a fresh machine; this release speaks the state's command set; no
node of the cluster file has a data directory yet. Then the state is fenced from the old
cluster (`coordinator/core/fencing.py`: every epoch jumps) and each node of the cluster file
gets a directory seeded with it (`replication/seed.py`) under ONE new random cluster id
(`replication/identity.py`), so no node of the old cluster can join the new one. Each
directory is written under a temporary name and renamed into place. Invariant: a check that
fails writes nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from coordinator.config import ClusterConfig
from coordinator.config_file import load_config
from coordinator.core.backup import BackupError, load_backup
from coordinator.core.codec import CodecError
from coordinator.core.fencing import fence_for_new_cluster
from coordinator.core.machine import Machine
from coordinator.core.snapshot import encode_state
from coordinator.core.state import ClusterState
from coordinator.core.versions import SPOKEN
from replication.durability import sync_directory
from replication.entry import apply_entry
from replication.identity import new_cluster_id, read_cluster_id, write_cluster_id
from replication.members import Member
from replication.seed import read_log, seed_node
from shared.clock import Clock
from shared.errors import RippleError
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "NewCluster",
    "RestoreError",
    "recover_from_data_dir",
    "restore_command",
    "restore_from_backup",
]

JOURNAL_FILE = "raft.journal"  # the names `coordinator/service/node.py` gives a node's files
DUMP_FILE = "raft.dump"
# A seeded log starts with two entries (`replication.seed.seed_node`), in a term >= 1.
SEED_INDEX_MIN = 2
SEED_TERM_MIN = 1


class RestoreError(RippleError):
    """Nothing was written: the source is damaged, or a target directory exists."""

    status = 2
    code = "restore_refused"


@dataclass(frozen=True, slots=True, kw_only=True)
class NewCluster:
    cluster_id: str
    old_cluster_id: str | None
    applied_index: int  # where the new cluster's log starts
    term: int
    node_dirs: tuple[Path, ...]
    partitions: int
    epoch_jump: int


def restore_from_backup(
    data: bytes, config: ClusterConfig, *, epoch_jump: int, now_ms: int
) -> NewCluster:
    """A new cluster's data directories from the bytes of a backup file."""
    try:
        header, state = load_backup(data)
    except BackupError as exc:
        raise RestoreError(f"the backup is refused: {exc}") from exc
    note = f"restored from a backup of cluster {header.cluster_id} at index {header.applied_index}"
    return _make(
        config,
        state,
        old_cluster_id=header.cluster_id,
        index=header.applied_index,
        term=header.term,
        note=note,
        epoch_jump=epoch_jump,
        now_ms=now_ms,
    )


def recover_from_data_dir(
    survivor: Path, config: ClusterConfig, *, epoch_jump: int, now_ms: int
) -> NewCluster:
    """A new cluster's data directories from what one stopped node's directory holds: its
    dump and every entry of its journal after it, committed or not."""
    journal, dump = survivor / JOURNAL_FILE, survivor / DUMP_FILE
    if not journal.exists() and not dump.exists():
        raise RestoreError(f"{survivor} holds no {JOURNAL_FILE} or {DUMP_FILE}")
    try:
        stored = read_log(str(journal), str(dump))
    except (OSError, ValueError, EOFError) as exc:
        raise RestoreError(f"cannot read the survivor's log in {survivor}: {exc}") from exc
    machine = Machine()
    if stored.snapshot is not None:
        try:
            machine.restore(stored.snapshot)
        except CodecError as exc:
            raise RestoreError(f"the survivor's dump does not decode: {exc.message}") from exc
    for entry in stored.entries:
        if entry.payload is not None:
            apply_entry(machine, entry.payload)
        reason = machine.halted()
        if reason is not None:
            raise RestoreError(
                f"entry {entry.index} of the survivor's log is of a newer release ({reason}): "
                "run ripple recover from that release"
            )
    old = read_cluster_id(survivor)
    note = f"recovered from a survivor of cluster {old} at index {stored.last_index}"
    return _make(
        config,
        machine.state,
        old_cluster_id=old,
        index=stored.last_index,
        term=stored.last_term,
        note=note,
        epoch_jump=epoch_jump,
        now_ms=now_ms,
    )


def _make(
    config: ClusterConfig,
    state: ClusterState,
    *,
    old_cluster_id: str | None,
    index: int,
    term: int,
    note: str,
    epoch_jump: int,
    now_ms: int,
) -> NewCluster:
    if state.finalized_version > SPOKEN.max_version:
        raise RestoreError(
            f"the state is finalized at command-set version {state.finalized_version}; this "
            f"release speaks {SPOKEN}: restore with a release that speaks it"
        )
    if not config.nodes:
        raise RestoreError("the cluster file names no [[nodes]]")
    targets = [config.node_dir(n.id) for n in config.nodes]
    taken = [str(d) for d in targets if d.exists() and any(d.iterdir())]
    if taken:
        raise RestoreError(
            "refusing to write over data directories that exist: " + ", ".join(taken)
        )
    try:
        fence_for_new_cluster(state, epoch_jump=epoch_jump, now_ms=now_ms, note=note)
    except ValueError as exc:
        raise RestoreError(str(exc)) from exc
    snapshot = encode_state(state)
    cluster_id = new_cluster_id()
    index, term = max(index, SEED_INDEX_MIN), max(term, SEED_TERM_MIN)
    members = [Member(id=n.id, raft=n.raft, http=n.http) for n in config.nodes]
    for target in targets:
        tmp = target.with_name(f".{target.name}.restoring")
        shutil.rmtree(tmp, ignore_errors=True)  # a run that stopped half-way left it
        seed_node(
            str(tmp / JOURNAL_FILE),
            str(tmp / DUMP_FILE),
            snapshot,
            index=index,
            term=term,
            members=members,
            durable=config.fsync,
        )
        write_cluster_id(tmp, cluster_id, durable=config.fsync)
        if target.exists():
            target.rmdir()  # empty: checked above
        os.replace(tmp, target)
        if config.fsync:
            sync_directory(str(target.parent))
    return NewCluster(
        cluster_id=cluster_id,
        old_cluster_id=old_cluster_id,
        applied_index=index,
        term=term,
        node_dirs=tuple(targets),
        partitions=state.total_partitions,
        epoch_jump=epoch_jump,
    )


def restore_command(args: argparse.Namespace, clock: Clock = SYSTEM_CLOCK) -> int:
    """`ripple restore --backup FILE` or `ripple recover --from-data-dir DIR`, with the new
    cluster's `--config`: make its data directories and say what was made."""
    config = load_config(args.config)
    now_ms = clock.wall_ms()  # stamped into the partitions' history only
    if args.command == "restore":
        try:
            data = Path(args.backup).read_bytes()
        except OSError as exc:
            raise RestoreError(f"cannot read {args.backup}: {exc.strerror}") from exc
        made = restore_from_backup(data, config, epoch_jump=args.epoch_jump, now_ms=now_ms)
    else:
        made = recover_from_data_dir(
            Path(args.from_data_dir), config, epoch_jump=args.epoch_jump, now_ms=now_ms
        )
    print(
        f"new cluster {made.cluster_id} (was {made.old_cluster_id}): {made.partitions} "
        f"partitions at applied index {made.applied_index}, term {made.term}, every epoch "
        f"+{made.epoch_jump}; data directories: " + ", ".join(map(str, made.node_dirs))
    )
    print("start every node of the cluster file on them (ripple coordinator --config ...)")
    return 0
