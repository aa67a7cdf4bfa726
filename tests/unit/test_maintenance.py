"""Maintenance mode's replicated record (apply, snapshot bytes), the leader's timer for its
end, and the move throttles' caps."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.codec import CodecError
from coordinator.core.commands import (
    FinalizeVersion,
    MaintenanceOff,
    MaintenanceOn,
    MaintenanceResult,
    Ok,
    Rejected,
    ReportVersions,
    Result,
)
from coordinator.core.maintenance import balance_paused
from coordinator.core.maintenance_timer import EXPIRY_BY, MaintenanceTimer
from coordinator.core.model import (
    Migration,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionId,
    WorkerId,
)
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.core.throttle import startable

_seq = iter(range(1_000_000))


def run(state: ClusterState, cmd: MaintenanceOn | MaintenanceOff) -> Result:
    return apply(state, f"r{next(_seq)}", cmd)


def at_version_3() -> ClusterState:
    s = ClusterState()
    report = ReportVersions(
        node_id="n1", min_version=1, max_version=3, package_version="x", now_ms=1
    )
    assert isinstance(apply(s, "v1", report), Ok)
    assert isinstance(apply(s, "v2", FinalizeVersion(version=3, voters=("n1",), now_ms=2)), Ok)
    return s


def on(reason: str = "upgrade", until_ms: int | None = None, now_ms: int = 100) -> MaintenanceOn:
    return MaintenanceOn(by="admin", reason=reason, until_ms=until_ms, now_ms=now_ms)


def off(since_ms: int | None = None, now_ms: int = 200) -> MaintenanceOff:
    return MaintenanceOff(by="admin", reason="done", since_ms=since_ms, now_ms=now_ms)


def test_on_records_who_why_and_when_and_off_ends_it() -> None:
    s = at_version_3()
    assert not balance_paused(s)
    assert run(s, on(until_ms=5000)) == Ok(value=MaintenanceResult(maintenance=True, changed=True))
    assert s.maintenance is not None and balance_paused(s)
    assert (s.maintenance.by, s.maintenance.reason) == ("admin", "upgrade")
    assert (s.maintenance.since_ms, s.maintenance.until_ms) == (100, 5000)
    assert run(s, off()) == Ok(value=MaintenanceResult(maintenance=False, changed=True))
    assert s.maintenance is None and not balance_paused(s)
    assert run(s, off()) == Ok(value=MaintenanceResult(maintenance=False, changed=False))


def test_on_again_replaces_and_an_expiry_of_the_old_one_ends_nothing() -> None:
    s = at_version_3()
    run(s, on(until_ms=1000, now_ms=100))
    run(s, on(reason="longer", until_ms=9000, now_ms=500))
    assert s.maintenance is not None and s.maintenance.since_ms == 500
    stale = run(s, off(since_ms=100))
    assert stale == Ok(value=MaintenanceResult(maintenance=True, changed=False))
    assert s.maintenance is not None and s.maintenance.reason == "longer"
    assert run(s, off(since_ms=500)) == Ok(value=MaintenanceResult(maintenance=False, changed=True))


@pytest.mark.parametrize(
    ("cmd", "field"),
    [
        (MaintenanceOn(by="", reason="x", until_ms=None, now_ms=1), "by"),
        (MaintenanceOn(by="a" * 65, reason="x", until_ms=None, now_ms=1), "by"),
        (MaintenanceOn(by="admin", reason="", until_ms=None, now_ms=1), "reason"),
        (MaintenanceOn(by="admin", reason="x" * 257, until_ms=None, now_ms=1), "reason"),
        (MaintenanceOn(by="admin", reason="x", until_ms=1, now_ms=1), "until_ms"),
        (MaintenanceOff(by="admin", reason="", since_ms=None, now_ms=1), "reason"),
    ],
)
def test_bad_commands_are_refused_without_a_change(
    cmd: MaintenanceOn | MaintenanceOff, field: str
) -> None:
    s = at_version_3()
    run(s, on(reason="kept"))
    before = encode_state(s)
    result = run(s, cmd)
    assert isinstance(result, Rejected) and result.field == field and result.code == "invalid"
    assert encode_state(s) == before


def test_a_cluster_finalized_below_3_refuses_maintenance() -> None:
    s = ClusterState()
    result = run(s, on())
    assert isinstance(result, Rejected) and result.code == "version_not_finalized"
    assert s.maintenance is None


def test_the_record_survives_a_snapshot_and_bad_bytes_are_refused() -> None:
    s = at_version_3()
    without = encode_state(s)
    assert b"maintenance" not in without  # written only when on: older states keep their bytes
    run(s, on(until_ms=7000))
    data = encode_state(s)
    restored = decode_state(data)
    assert restored.maintenance == s.maintenance and encode_state(restored) == data
    good = msgpack.unpackb(data)
    for bad in ([1, 2], ["", "x", 1, None], ["admin", "", 1, None], ["admin", "x", -1, None]):
        with pytest.raises(CodecError):
            decode_state(msgpack.packb({**good, "maintenance": bad}))


def test_the_timer_uses_the_monotonic_clock_once_it_has_seen_the_record() -> None:
    s = at_version_3()
    run(s, on(until_ms=10_000, now_ms=4_000))  # 6 s long
    timer = MaintenanceTimer()
    assert timer.expiry(s, now_ms=50_000, wall_ms=4_000) == ()  # deadline: 56_000
    # The wall clock jumps far ahead, or back: the deadline stays.
    assert timer.expiry(s, now_ms=55_999, wall_ms=900_000) == ()
    (cmd,) = timer.expiry(s, now_ms=56_000, wall_ms=0)
    assert isinstance(cmd, MaintenanceOff) and cmd.since_ms == 4_000 and cmd.by == EXPIRY_BY


def test_a_new_leader_times_what_is_left_never_more_than_the_length() -> None:
    s = at_version_3()
    run(s, on(until_ms=10_000, now_ms=4_000))
    assert MaintenanceTimer().deadline_ms(s.maintenance, 0, 8_000) == 2_000  # 2 s left
    assert MaintenanceTimer().deadline_ms(s.maintenance, 0, 11_000) == 0  # over: end now
    assert MaintenanceTimer().deadline_ms(s.maintenance, 0, 0) == 6_000  # wall behind: length
    run(s, off())
    run(s, on(until_ms=None))
    assert MaintenanceTimer().expiry(s, now_ms=10**12, wall_ms=10**12) == ()  # no end given


def _migration(i: int, source: str, target: str, phase: MigrationPhase) -> Migration:
    return Migration(
        migration_id=MigrationId(f"m-{i}"),
        partition=PartitionId(i),
        source=WorkerId(source),
        target=WorkerId(target),
        phase=phase,
        reason=MigrationReason.ADMIN,
        created_at_ms=0,
        updated_at_ms=0,
        note="",
    )


workers = st.sampled_from(["w1", "w2", "w3", "w4", "w5"])
phases = st.sampled_from([MigrationPhase.PLANNED, MigrationPhase.RELEASING])


@given(
    st.lists(st.tuples(workers, workers, phases), max_size=20),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=3),
    st.frozensets(workers, max_size=2),
)
def test_starting_what_startable_returns_keeps_both_caps(
    rows: list[tuple[str, str, MigrationPhase]],
    cluster_max: int,
    per_worker: int,
    held: frozenset[str],
) -> None:
    migs = [_migration(i, s, t, ph) for i, (s, t, ph) in enumerate(rows) if s != t]
    started = set(startable(migs, held=held, cluster_max=cluster_max, per_worker_max=per_worker))
    before = [x for x in migs if x.phase is not MigrationPhase.PLANNED]
    after = before + [x for x in migs if x.migration_id in started]
    assert all(x.phase is MigrationPhase.PLANNED for x in migs if x.migration_id in started)
    assert not any(held & {x.source, x.target} for x in migs if x.migration_id in started)
    busy_before = {
        w: sum(w in (x.source, x.target) for x in before) for w in ["w1", "w2", "w3", "w4", "w5"]
    }
    if len(before) <= cluster_max and max(busy_before.values()) <= per_worker:
        assert len(after) <= cluster_max
        for w in busy_before:
            assert sum(w in (x.source, x.target) for x in after) <= per_worker
    # Nothing that fits is left out: every PLANNED one not started is blocked by a cap or a hold.
    for x in migs:
        if x.phase is MigrationPhase.PLANNED and x.migration_id not in started:
            busy = {w: sum(w in (y.source, y.target) for y in after) for w in (x.source, x.target)}
            assert (
                len(after) >= cluster_max
                or max(busy.values()) >= per_worker
                or bool(held & {x.source, x.target})
            )
