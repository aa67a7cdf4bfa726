"""Command-set versions in the pure core: the version table, the gate a leader asks before it
proposes, the records apply keeps (reports, the finalized version, the last backup), and the
machine that halts rather than skip what it does not speak."""

from __future__ import annotations

import itertools
from dataclasses import replace

import msgpack
import pytest

from coordinator.core.codec import FORMAT_VERSION, CodecError, decode_result, encode_command
from coordinator.core.commands import (
    COMMAND_TYPES,
    Bootstrap,
    Command,
    FinalizeVersion,
    FinishRescale,
    MaintenanceOff,
    MaintenanceOn,
    Ok,
    RecordBackup,
    RecordCut,
    RegisterWorker,
    Rejected,
    ReportVersions,
    Result,
    RetireWorkers,
    StartRescale,
    StartWarm,
    StatesBuilt,
)
from coordinator.core.machine import Machine
from coordinator.core.model import MigrationId, WorkerId
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import (
    COMMAND_SET_VERSION,
    INTRODUCED_IN,
    SPOKEN,
    VersionRange,
    finalizable,
    refusal,
    spoken,
    version_of,
)

VOTERS = ("n1", "n2", "n3")
_IDS = itertools.count()


def report(node: str, high: int, low: int = 1, package: str = "0.2.0") -> ReportVersions:
    return ReportVersions(
        node_id=node, min_version=low, max_version=high, package_version=package, now_ms=5
    )


def backup(index: int) -> RecordBackup:
    return RecordBackup(
        cluster_id="c1",
        applied_index=index,
        term=2,
        sha256="ab" * 32,
        size_bytes=10,
        created_at_ms=7,
        now_ms=8,
    )


def run(state: ClusterState, *cmds: Command) -> list[Result]:
    return [apply(state, f"r{next(_IDS)}", cmd) for cmd in cmds]


def test_every_tag_has_the_version_that_introduced_it() -> None:
    assert {cls.TAG for cls in COMMAND_TYPES} == set(INTRODUCED_IN)
    assert INTRODUCED_IN[Bootstrap.TAG] == 1 and INTRODUCED_IN[RecordBackup.TAG] == 2
    assert version_of(backup(1)) == 2 and INTRODUCED_IN[RetireWorkers.TAG] == 3
    on = MaintenanceOn(by="admin", reason="upgrade", until_ms=None, now_ms=1)
    off = MaintenanceOff(by="admin", reason="done", since_ms=None, now_ms=2)
    warm = StartWarm(migration_id=MigrationId("m-1"), now_ms=0)
    assert version_of(on) == version_of(off) == version_of(warm) == 3
    # The rescale's commands are version 4; the pipelines' 5; their tokens' 6; a pipeline's
    # rescale's 7, the newest.
    for tag in (StartRescale.TAG, RecordCut.TAG, StatesBuilt.TAG, FinishRescale.TAG):
        assert INTRODUCED_IN[tag] == 4
    for tag in range(28, 35):
        assert INTRODUCED_IN[tag] == 5
    for tag in (35, 36):
        assert INTRODUCED_IN[tag] == 6
    for tag in range(38, 42):
        assert INTRODUCED_IN[tag] == 7 == COMMAND_SET_VERSION
    assert VersionRange(min_version=1, max_version=7) == SPOKEN
    assert spoken(0) == SPOKEN and spoken(1) == VersionRange(min_version=1, max_version=1)
    for bad in (-1, 8):
        with pytest.raises(ValueError):
            spoken(bad)


def test_reports_come_before_the_bootstrap_and_the_finalized_version_only_rises() -> None:
    s = ClusterState()
    assert s.finalized_version == 1
    results = run(s, report("n1", 2), report("n2", 2), report("n3", 1))
    assert all(isinstance(r, Ok) for r in results)
    assert s.total_partitions == 0  # nothing of the partition table was needed
    assert finalizable(s, VOTERS, SPOKEN) is None  # n3 speaks 1 only
    (r,) = run(s, FinalizeVersion(version=2, voters=VOTERS, now_ms=9))
    assert (
        isinstance(r, Rejected)
        and r.code == "version_unsupported"
        and "n3 speaks 1..1" in (r.message)
    )
    assert s.finalized_version == 1
    run(s, report("n3", 2))
    assert finalizable(s, VOTERS, SPOKEN) == 2
    assert finalizable(s, VOTERS, spoken(1)) is None  # a leader held at 1 finalizes nothing
    (r,) = run(s, FinalizeVersion(version=2, voters=VOTERS, now_ms=10))
    assert isinstance(r, Ok) and s.finalized_version == 2
    (r,) = run(s, FinalizeVersion(version=1, voters=VOTERS, now_ms=11))
    assert isinstance(r, Ok) and s.finalized_version == 2  # never lowered
    assert finalizable(s, VOTERS, SPOKEN) is None


def test_bad_reports_and_finalizations_are_refused_without_a_change() -> None:
    s = ClusterState()
    before = encode_state(s)
    for cmd in (
        report("n 1", 2),
        report("n1", 1, low=2),
        report("n1", 2, low=0),
        report("n1", 2, package=""),
        FinalizeVersion(version=2, voters=(), now_ms=1),
        FinalizeVersion(version=0, voters=VOTERS, now_ms=1),
        FinalizeVersion(version=2, voters=("bad id",), now_ms=1),
        FinalizeVersion(version=2, voters=VOTERS, now_ms=1),  # nobody reported
    ):
        (r,) = run(s, cmd)
        assert isinstance(r, Rejected), cmd
    assert encode_state(s) == before


def test_the_gate_names_the_voter_behind_or_says_to_retry() -> None:
    s = ClusterState()
    assert refusal(s, "Bootstrap", 1, VOTERS) is None
    run(s, report("n1", 2), report("n2", 2, package="0.2.0"), report("n3", 1, package="0.1.9"))
    r = refusal(s, "RecordBackup", 2, VOTERS)
    assert r is not None and r.code == "version_unsupported"
    assert "n3 speaks 1..1 (ripple 0.1.9)" in r.message and "n1" not in r.message
    missing = refusal(s, "RecordBackup", 2, (*VOTERS, "n4"))
    assert missing is not None and "n4 has not reported" in missing.message
    run(s, report("n3", 2))
    r = refusal(s, "RecordBackup", 2, VOTERS)
    assert r is not None and r.code == "version_not_finalized"
    run(s, FinalizeVersion(version=2, voters=VOTERS, now_ms=3))
    assert refusal(s, "RecordBackup", 2, VOTERS) is None


def test_apply_rejects_a_command_above_the_finalized_version_on_every_replica() -> None:
    s = ClusterState()
    (r,) = run(s, backup(5))
    assert isinstance(r, Rejected) and r.code == "version_not_finalized"
    assert s.last_backup is None and not s.requests
    run(s, report("n1", 2), FinalizeVersion(version=2, voters=("n1",), now_ms=1))
    newer, older, same = run(s, backup(5), backup(3), backup(5))
    assert isinstance(newer, Ok) and newer.value.latest  # type: ignore[union-attr]
    assert isinstance(older, Ok) and not older.value.latest  # type: ignore[union-attr]
    assert isinstance(same, Ok)
    assert s.last_backup is not None and s.last_backup.applied_index == 5
    (bad,) = run(s, replace(backup(9), sha256="AB" * 32))
    assert isinstance(bad, Rejected) and bad.field == "sha256"


def test_the_records_round_trip_in_snapshots_and_an_unused_state_keeps_its_bytes() -> None:
    s = ClusterState()
    plain = encode_state(s)
    run(
        s,
        report("n1", 2),
        report("n2", 2),
        FinalizeVersion(version=2, voters=("n1", "n2"), now_ms=4),
    )
    run(s, backup(11))
    data = encode_state(s)
    restored = decode_state(data)
    assert restored.node_versions == s.node_versions and restored.finalized_version == 2
    assert restored.last_backup == s.last_backup
    assert encode_state(restored) == data
    assert encode_state(decode_state(plain)) == plain
    assert "command_set" not in msgpack.unpackb(plain)
    good = msgpack.unpackb(data)
    for bad in (
        {**good, "command_set": [2]},
        {**good, "command_set": [2, [["n1", 1, 2, "0.2.0"]]]},
        {**good, "last_backup": [1, 2]},
        {
            "last_backup": good["last_backup"],
            **{k: v for k, v in good.items() if k != "last_backup"},
        },
        {
            **{k: v for k, v in good.items() if k not in ("command_set", "last_backup")},
            "last_backup": good["last_backup"],
            "command_set": good["command_set"],
        },
        {**good, "other": 1},
    ):
        with pytest.raises(CodecError):
            decode_state(msgpack.packb(bad))


def _apply(machine: Machine, cmd: Command, rid: str) -> Result:
    return decode_result(machine.apply(encode_command(cmd, rid)))


def test_a_node_held_at_an_older_version_halts_on_a_newer_command() -> None:
    held = Machine(speaks=spoken(1))
    for i, cmd in enumerate([report("n1", 2), report("n2", 2), report("n3", 2)]):
        assert isinstance(_apply(held, cmd, f"r{i}"), Ok)
    finalize = FinalizeVersion(version=2, voters=VOTERS, now_ms=1)
    assert isinstance(_apply(held, finalize, "f"), Ok)  # a version-1 command: applied
    assert held.state.finalized_version == 2
    reason = held.halted()
    assert reason is not None and "finalized at command-set version 2" in reason
    assert "speaks 1..1" in reason
    after = _apply(held, RegisterWorker(worker_id=WorkerId("w"), address="h:1", now_ms=2), "x")
    assert isinstance(after, Rejected) and after.code == "halted"
    assert held.halted() == reason  # the first reason stays


def test_a_held_node_refuses_a_newer_tag_even_if_its_code_knows_it() -> None:
    held = Machine(speaks=spoken(1))
    r = _apply(held, backup(1), "b")
    assert isinstance(r, Rejected) and r.field == "tag"
    assert "RecordBackup (tag 18) is of command-set version 2" in (held.halted() or "")
    assert held.state.last_backup is None


def test_an_unknown_tag_or_a_newer_format_halts_and_a_malformed_entry_does_not() -> None:
    m = Machine()
    malformed = msgpack.packb([FORMAT_VERSION, 2, "r", {}])  # RegisterWorker without fields
    assert isinstance(decode_result(m.apply(malformed)), Rejected)
    assert m.halted() is None
    newer = msgpack.packb([FORMAT_VERSION + 1, 2, "r", {}])
    assert isinstance(decode_result(m.apply(newer)), Rejected)
    assert "unsupported format version 2" in (m.halted() or "")
    other = Machine()
    other.apply(msgpack.packb([FORMAT_VERSION, 250, "r", {}]))
    assert "unknown command tag 250" in (other.halted() or "")


def test_restoring_a_state_finalized_above_the_node_halts_it_and_keeps_it_halted() -> None:
    s = ClusterState()
    run(s, report("n1", 2), FinalizeVersion(version=2, voters=("n1",), now_ms=1))
    held = Machine(speaks=spoken(1))
    held.restore(encode_state(s))
    assert held.halted() is not None and held.state.finalized_version == 2
    kept = held.state
    held.restore(encode_state(ClusterState()))  # a later snapshot changes nothing
    assert held.state is kept
    current = Machine()
    current.restore(encode_state(s))
    assert current.halted() is None
    assert isinstance(_apply(current, backup(3), "b"), Ok)
