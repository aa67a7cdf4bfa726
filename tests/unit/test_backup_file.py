"""The backup file and what is made from it: a backup reads back to the state it was taken
of; every kind of damage (wrong magic, short file, bad header, bad checksum, a body that does
not decode) is refused with the reason; the state a new cluster starts from is fenced from
the old one; a seeded data directory reads back as that state; and a refused restore writes
nothing."""

from __future__ import annotations

import gzip
import hashlib
import json
import struct
from pathlib import Path

import pysyncobj.pickle as syncobj_pickle
import pytest
from pysyncobj.journal import FileJournal

from coordinator.config import ClusterConfig, NodeSpec
from coordinator.core.backup import (
    MAGIC,
    BackupError,
    encode_backup,
    load_backup,
    read_backup,
)
from coordinator.core.codec import encode_command
from coordinator.core.commands import FinalizeVersion, ReportVersions
from coordinator.core.fencing import fence_for_new_cluster
from coordinator.core.invariants import state_violations
from coordinator.core.machine import Machine
from coordinator.core.model import ChangeReason, MigrationPhase, PartitionStatus
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState
from replication.batch import encode_batch
from replication.identity import read_cluster_id
from replication.members import Member, named
from replication.seed import read_log, seed_node
from ripple.restore import RestoreError, recover_from_data_dir, restore_from_backup
from tests.unit.test_core_codec import busy_state

JUMP = 1_000_000


def backup_of(state: ClusterState, **kw: object) -> bytes:
    fields: dict[str, object] = {
        "cluster_id": "c0ffee",
        "applied_index": 42,
        "term": 3,
        "package_version": "0.2.0",
        "command_set_version": state.finalized_version,
        "created_at_ms": 1_700_000_000_000,
    }
    _, data = encode_backup(encode_state(state), **{**fields, **kw})  # type: ignore[arg-type]
    return data


def test_a_backup_reads_back_to_its_state() -> None:
    state = busy_state()
    data = backup_of(state)
    header, restored = load_backup(data)
    assert (header.cluster_id, header.applied_index, header.term) == ("c0ffee", 42, 3)
    assert header.body_bytes == len(encode_state(state))
    assert encode_state(restored) == encode_state(state)


def _with_header(data: bytes, edit: dict[str, object]) -> bytes:
    (size,) = struct.unpack_from(">I", data, len(MAGIC))
    start = len(MAGIC) + 4
    header = json.loads(data[start : start + size])
    text = json.dumps({**header, **edit}).encode()
    return MAGIC + struct.pack(">I", len(text)) + text + data[start + size :]


def damaged(data: bytes) -> dict[str, tuple[bytes, str]]:
    """Each kind of damage, and what the refusal must say."""
    body_at = len(data) - 10
    flipped = data[:body_at] + bytes([data[body_at] ^ 0xFF]) + data[body_at + 1 :]
    (size,) = struct.unpack_from(">I", data, len(MAGIC))
    garbage = b"\x00" * 40

    return {
        "empty": (b"", "shorter than its prefix"),
        "wrong magic": (b"PK\x03\x04" + data[4:], "wrong magic"),
        "truncated in the body": (data[:-7], "truncated"),
        "truncated in the header": (data[: len(MAGIC) + 4 + size // 2], "inside the header"),
        "padded": (data + b"\x00", "padded"),
        "flipped byte": (flipped, "bad checksum"),
        "huge header length": (MAGIC + struct.pack(">I", 1 << 30) + data[12:], "bad header"),
        "header not json": (
            MAGIC + struct.pack(">I", 5) + b"{{{{{" + data[len(MAGIC) + 4 + size :],
            "not JSON",
        ),
        "header missing a key": (
            MAGIC + struct.pack(">I", 2) + b"{}" + data[len(MAGIC) + 4 + size :],
            "need exactly",
        ),
        "header wrong type": (_with_header(data, {"term": "3"}), "bad header: term"),
        "unknown format": (_with_header(data, {"format": 9}), "backup format 9"),
        "body that does not decode": (
            _with_header(
                MAGIC
                + struct.pack(">I", size)
                + data[len(MAGIC) + 4 : len(MAGIC) + 4 + size]
                + garbage,
                {"body_bytes": 40, "body_sha256": hashlib.sha256(garbage).hexdigest()},
            ),
            "does not decode",
        ),
        "header disagrees with the state": (
            # No state is ever finalized at it: the tamper stays one as versions are added.
            _with_header(data, {"command_set_version": 1000}),
            "command-set version 1000, the state is finalized at",
        ),
    }


@pytest.mark.parametrize("kind", sorted(damaged(backup_of(busy_state()))))
def test_every_kind_of_damage_is_refused_with_its_reason(kind: str) -> None:
    data, reason = damaged(backup_of(busy_state()))[kind]
    with pytest.raises(BackupError, match=reason):
        load_backup(data)


def test_every_truncation_is_refused() -> None:
    data = backup_of(busy_state())
    for cut in range(len(data)):
        with pytest.raises(BackupError):
            read_backup(data[:cut])


def test_the_new_cluster_is_fenced_from_the_old_one() -> None:
    state = busy_state()  # owners, a checkpoint, a handed-off and an aborted migration
    before = {p.partition: p for p in state.partitions}
    in_flight = {m.migration_id: m.phase for m in state.in_flight_migrations()}
    assert MigrationPhase.HANDED_OFF in in_flight.values()
    generation = state.generation
    fence_for_new_cluster(state, epoch_jump=JUMP, now_ms=9, note="restored from a backup")
    assert state_violations(state) == []
    assert state.generation == generation + 1
    for p in state.partitions:
        old = before[p.partition]
        assert p.epoch == old.epoch + JUMP and p.owner == old.owner
        assert p.checkpoint == old.checkpoint and p.earlier == old.earlier
        assert p.status is (PartitionStatus.ASSIGNING if p.owner else PartitionStatus.UNASSIGNED)
        assert p.history[-1].reason is ChangeReason.RESTORE
        assert p.history[-1].note == "restored from a backup"
    for mid, phase in in_flight.items():
        now = state.migrations[mid].phase
        kept = phase is MigrationPhase.HANDED_OFF
        assert now is (phase if kept else MigrationPhase.ABORTED), (mid, phase, now)
    with pytest.raises(ValueError):
        fence_for_new_cluster(state, epoch_jump=0, now_ms=9, note="")


def test_a_seeded_data_directory_reads_back_as_its_snapshot(tmp_path: Path) -> None:
    snapshot = encode_state(busy_state())
    journal, dump = str(tmp_path / "n1" / "raft.journal"), str(tmp_path / "n1" / "raft.dump")
    members = [Member(id=f"n{i}", raft=f"127.0.0.1:{i}", http=f"127.0.0.1:8{i}") for i in (1, 2)]
    seed_node(journal, dump, snapshot, index=42, term=3, members=members)
    stored = read_log(journal, dump)
    assert stored.snapshot == snapshot
    assert (stored.snapshot_index, stored.snapshot_term, stored.entries) == (42, 3, ())
    # The dump's voter set names its members as membership entries do (ids and URLs).
    with open(dump, "rb") as f, gzip.GzipFile(fileobj=f) as g:
        cluster = syncobj_pickle.load(g)[3]
    assert sorted((named(node) for node in cluster), key=str) == members
    with pytest.raises(FileExistsError):
        seed_node(journal, dump, snapshot, index=42, term=3, members=[])


def config_for(tmp_path: Path) -> ClusterConfig:
    nodes = tuple(
        NodeSpec(id=f"n{i}", raft=f"127.0.0.1:{7000 + i}", http=f"127.0.0.1:{8000 + i}")
        for i in (1, 2, 3)
    )
    return ClusterConfig(
        cluster_secret="s" * 20, admin_token="a" * 20, data_dir=str(tmp_path / "new"), nodes=nodes
    )


def test_a_refused_restore_writes_nothing(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    for data, _ in damaged(backup_of(busy_state())).values():
        with pytest.raises(RestoreError):
            restore_from_backup(data, config, epoch_jump=JUMP, now_ms=1)
        assert not (tmp_path / "new").exists()
    (tmp_path / "new" / "n2").mkdir(parents=True)
    (tmp_path / "new" / "n2" / "raft.journal").write_bytes(b"")
    with pytest.raises(RestoreError, match="exist"):
        restore_from_backup(backup_of(busy_state()), config, epoch_jump=JUMP, now_ms=1)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["n2"]


def test_a_restore_seeds_every_node_with_the_fenced_state_under_a_new_id(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path)
    made = restore_from_backup(backup_of(busy_state()), config, epoch_jump=JUMP, now_ms=1)
    assert made.old_cluster_id == "c0ffee" and made.cluster_id != "c0ffee"
    assert (made.applied_index, made.term) == (42, 3)
    expected = busy_state()
    note = "restored from a backup of cluster c0ffee at index 42"
    fence_for_new_cluster(expected, epoch_jump=JUMP, now_ms=1, note=note)
    for n in config.nodes:
        node_dir = config.node_dir(n.id)
        assert read_cluster_id(node_dir) == made.cluster_id
        stored = read_log(str(node_dir / "raft.journal"), str(node_dir / "raft.dump"))
        assert stored.snapshot == encode_state(expected)
    assert not [p for p in (tmp_path / "new").iterdir() if p.name.startswith(".")]


def test_a_recovery_replays_the_survivors_journal_after_its_dump(tmp_path: Path) -> None:
    """The survivor's dump, then its journal entries (a batch among them), applied."""
    old = ClusterState()
    survivor = tmp_path / "survivor"
    seed_node(
        str(survivor / "raft.journal"),
        str(survivor / "raft.dump"),
        encode_state(old),
        index=5,
        term=2,
        members=[],
    )
    report = ReportVersions(
        node_id="n1", min_version=1, max_version=2, package_version="0.2.0", now_ms=1
    )
    finalize = FinalizeVersion(version=2, voters=("n1",), now_ms=2)

    from replication.raft_node import RaftNode  # noqa: F401  (the replicated call's shape)

    journal = FileJournal(str(survivor / "raft.journal"))
    try:
        for idx, payload in (
            (6, encode_command(report, "a")),
            (7, encode_batch([b"", encode_command(finalize, "b")])),
        ):
            # As pysyncobj journals a replicated call: its type, then (method id, args).
            journal.add(b"\x00" + syncobj_pickle.dumps((0, (payload,))), idx, 2)
        journal.add(b"\x01", 8, 3)  # a new leader's no-op
        journal.flush()
    finally:
        journal._destroy()
    config = config_for(tmp_path)
    made = recover_from_data_dir(survivor, config, epoch_jump=JUMP, now_ms=1)
    assert (made.applied_index, made.term) == (8, 3)
    node_dir = config.node_dir("n1")
    stored = read_log(str(node_dir / "raft.journal"), str(node_dir / "raft.dump"))
    assert stored.snapshot is not None
    state = decode_state(stored.snapshot)
    assert state.finalized_version == 2 and "n1" in state.node_versions
    held = Machine()
    held.restore(stored.snapshot)
    assert held.halted() is None
