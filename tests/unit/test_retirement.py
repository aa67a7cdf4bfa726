"""Retirement of departed workers (coordinator/core/retirement.py): who leaves the state, when
the leader proposes it, and that fencing does not weaken (no token or incarnation of a
retired id acts again; epochs never go back)."""

from __future__ import annotations

import itertools
import random

import pytest

from coordinator.core.commands import (
    Assignment,
    AssignPartitions,
    Bootstrap,
    Command,
    DeclareDead,
    DrainWorker,
    FinalizeVersion,
    Move,
    Ok,
    PlanMigrations,
    RegisterResult,
    RegisterWorker,
    Rejected,
    ReportVersions,
    Result,
    RetireResult,
    RetireWorkers,
    StartRelease,
)
from coordinator.core.invariants import Ledger, step_violations, view
from coordinator.core.model import MigrationId, MigrationReason, WorkerId, WorkerState
from coordinator.core.planner import Planner
from coordinator.core.retirement import RETIRE_LOOKAHEAD_MAX, due
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.service.auth import Admission, call_token
from shared.errors import ErrorKind, RequestError
from tests.planner_base import quick_settings

_IDS = itertools.count()
SECRET = "s" * 32
HOUR_MS = 3_600_000


def run(state: ClusterState, *cmds: Command) -> list[Result]:
    out = []
    for cmd in cmds:
        before = view(state)
        result = apply(state, f"r{next(_IDS)}", cmd)
        assert step_violations(before, state, cmd) == [], cmd
        out.append(result)
    return out


def ok(state: ClusterState, cmd: Command) -> Ok:
    (result,) = run(state, cmd)
    assert isinstance(result, Ok), (cmd, result)
    return result


def cluster(partitions: int = 4, version: int = 3) -> ClusterState:
    s = ClusterState()
    ok(s, ReportVersions(node_id="n1", min_version=1, max_version=3, package_version="t", now_ms=0))
    ok(s, FinalizeVersion(version=version, voters=("n1",), now_ms=0))
    ok(s, Bootstrap(total_partitions=partitions, now_ms=0))
    return s


def register(s: ClusterState, wid: str, now_ms: int) -> int:
    value = ok(s, RegisterWorker(worker_id=WorkerId(wid), address="http://h:1", now_ms=now_ms))
    assert isinstance(value.value, RegisterResult)
    return value.value.incarnation


def leave(s: ClusterState, wid: str, now_ms: int) -> None:
    """A worker that owns nothing drains: LEFT at once."""
    ok(s, DrainWorker(worker_id=WorkerId(wid), moves=(), now_ms=now_ms))
    assert s.workers[WorkerId(wid)].state is WorkerState.LEFT


def retire(s: ClusterState, *wids: str, departed_by_ms: int, now_ms: int = 0) -> RetireResult:
    ids = tuple(WorkerId(w) for w in wids)
    value = ok(s, RetireWorkers(worker_ids=ids, departed_by_ms=departed_by_ms, now_ms=now_ms))
    assert isinstance(value.value, RetireResult)
    return value.value


def admission() -> Admission:
    return Admission(
        secret=SECRET,
        admin_token="a" * 32,
        join_token="j" * 32,
        open_registration=False,
        worker_token_lifetime_s=HOUR_MS / 1000,
    )


def test_an_old_token_of_a_retired_id_is_refused_after_the_id_registers_again() -> None:
    s = cluster()
    adm = admission()
    now = 1_000
    assert register(s, "w", now) == 1
    old_token, _ = adm.worker_token("w", 1, now)
    old_call = call_token(SECRET, "w", 1)
    leave(s, "w", now)
    assert retire(s, "w", departed_by_ms=now).retired == 1
    assert WorkerId("w") not in s.workers and s.incarnation_floor == 1
    # Retired, its token names no worker at all.
    claims = adm.admit_worker({"Authorization": f"Bearer {old_token}"}, now + 1)
    with pytest.raises(RequestError) as gone:
        adm.current_incarnation(s, claims)
    assert gone.value.kind is ErrorKind.NOT_FOUND
    # The id registers again (a new pod under an old name): a new incarnation, above the
    # one its old token and call token name, which stay refused while still unexpired.
    again = register(s, "w", now + 2)
    assert again == 2
    with pytest.raises(RequestError) as stale:
        adm.current_incarnation(s, claims)
    assert (stale.value.kind, stale.value.code) == (ErrorKind.CONFLICT, "stale_incarnation")
    assert call_token(SECRET, "w", again) != old_call
    fresh = adm.admit_worker(
        {"Authorization": f"Bearer {adm.worker_token('w', again, now + 2)[0]}"}, now + 3
    )
    assert adm.current_incarnation(s, fresh) == again


def test_the_floor_covers_every_retired_incarnation_and_never_goes_down() -> None:
    s = cluster()
    for _ in range(3):  # "a" reaches incarnation 3
        register(s, "a", 1)
    register(s, "b", 1)
    leave(s, "a", 2)
    leave(s, "b", 2)
    retire(s, "b", departed_by_ms=2)
    assert s.incarnation_floor == 1
    retire(s, "a", departed_by_ms=2)
    assert s.incarnation_floor == 3
    # b had 1; back, it starts above every retired incarnation, as does an id never seen.
    assert register(s, "b", 3) == 4
    assert register(s, "new", 3) == 4
    leave(s, "b", 4)
    retire(s, "b", departed_by_ms=4)
    assert s.incarnation_floor == 4  # max(3, 4)
    assert register(s, "a", 5) == 5
    restored = decode_state(encode_state(s))
    assert restored.incarnation_floor == 4 and restored.retired_total == 3


def test_epochs_never_go_back_through_deaths_retirements_and_returns() -> None:
    s = cluster(partitions=4)
    ledger = Ledger()
    register(s, "x", 1)
    register(s, "y", 1)
    assignments = tuple(
        Assignment(partition=p, owner=WorkerId("x" if p % 2 else "y")) for p in range(4)
    )
    ok(s, AssignPartitions(assignments=assignments, now_ms=1))
    assert ledger.observe("r", s) == []
    for round_ in range(3):
        # x dies: its partitions go to y under new epochs; x is retired; x comes back.
        owned = s.owned_by(WorkerId("x"))
        ok(
            s,
            DeclareDead(
                worker_ids=(WorkerId("x"),),
                assignments=tuple(Assignment(partition=p, owner=WorkerId("y")) for p in owned),
                now_ms=10 + round_,
            ),
        )
        assert ledger.observe("r", s) == []
        epochs = [p.epoch for p in s.partitions]
        assert retire(s, "x", departed_by_ms=10 + round_).retired == 1
        assert [p.epoch for p in s.partitions] == epochs  # retirement touches no partition
        assert ledger.observe("r", s) == []
        register(s, "x", 20 + round_)
        moves = tuple(Move(partition=p, source=WorkerId("y"), target=WorkerId("x")) for p in (1, 3))
        ok(s, PlanMigrations(moves=moves, reason=MigrationReason.ADMIN, now_ms=21))
        for m in list(s.in_flight_migrations()):
            run(s, StartRelease(migration_id=m.migration_id, now_ms=22))
        assert ledger.observe("r", s) == []
        assert all(p.epoch >= e for p, e in zip(s.partitions, epochs, strict=True))
    assert s.incarnation_floor == 3


def test_only_departed_workers_past_the_window_and_named_by_no_migration_are_retired() -> None:
    s = cluster(partitions=2)
    register(s, "active", 1)
    register(s, "src", 1)
    register(s, "dst", 1)
    register(s, "late", 1)
    ok(
        s,
        AssignPartitions(
            assignments=(
                Assignment(partition=0, owner=WorkerId("src")),
                Assignment(partition=1, owner=WorkerId("active")),
            ),
            now_ms=1,
        ),
    )
    ok(
        s,
        PlanMigrations(
            moves=(Move(partition=0, source=WorkerId("src"), target=WorkerId("dst")),),
            reason=MigrationReason.ADMIN,
            now_ms=2,
        ),
    )
    ok(s, StartRelease(migration_id=MigrationId("m-1"), now_ms=3))
    # The source dies mid-move: the dead-source hand-off names it until the target is online.
    ok(
        s,
        DeclareDead(
            worker_ids=(WorkerId("src"),),
            assignments=(Assignment(partition=0, owner=WorkerId("dst")),),
            now_ms=5,
        ),
    )
    leave(s, "late", 50)
    result = retire(s, "active", "src", "late", departed_by_ms=10)
    assert (result.retired, result.kept) == (0, 3)
    assert set(s.workers) == {"active", "src", "dst", "late"}
    assert due(s, wall_ms=100, retire_after_ms=10) is not None
    cmd = due(s, wall_ms=100, retire_after_ms=10)
    assert cmd is not None and cmd.worker_ids == ("late",)  # src is still named
    (twice,) = run(s, RetireWorkers(worker_ids=(WorkerId("late"),) * 2, departed_by_ms=9, now_ms=9))
    assert isinstance(twice, Rejected) and twice.field == "worker_ids"


def test_the_leader_proposes_the_earliest_departed_in_bounded_batches() -> None:
    s = cluster()
    for i in range(10):
        register(s, f"w{i}", 0)
    for i in (3, 1, 4, 0, 9, 2, 6, 5, 8, 7):  # departure order, one ms apart
        leave(s, f"w{i}", 100 + len(s.workers_in(WorkerState.LEFT)))
    assert due(s, wall_ms=99 + HOUR_MS, retire_after_ms=HOUR_MS) is None  # none old enough
    assert due(s, wall_ms=10**9, retire_after_ms=0) is None  # 0: retirement is off
    cmd = due(s, wall_ms=104 + HOUR_MS, retire_after_ms=HOUR_MS, batch_max=3)
    assert cmd is not None and cmd.worker_ids == ("w3", "w1", "w4")
    assert cmd.departed_by_ms == 104 and cmd.now_ms == 104 + HOUR_MS
    ok(s, cmd)
    cmd = due(s, wall_ms=10**9, retire_after_ms=HOUR_MS, batch_max=100)
    assert cmd is not None and cmd.worker_ids == ("w0", "w9", "w2", "w6", "w5", "w8", "w7")
    # Before the cluster speaks version 3 the leader proposes nothing (apply would refuse).
    older = cluster(version=2)
    register(older, "gone", 0)
    leave(older, "gone", 1)
    assert due(older, wall_ms=10**9, retire_after_ms=1) is None
    (refused,) = run(
        older, RetireWorkers(worker_ids=(WorkerId("gone"),), departed_by_ms=5, now_ms=5)
    )
    assert isinstance(refused, Rejected) and refused.code == "version_not_finalized"


def test_a_departure_stamped_late_holds_back_only_a_bounded_lookahead() -> None:
    s = cluster()
    register(s, "skewed", 0)
    leave(s, "skewed", 10_000)  # a leader whose clock ran ahead stamped it
    for i in range(RETIRE_LOOKAHEAD_MAX - 1):
        register(s, f"n{i}", 0)
        leave(s, f"n{i}", 10)
    cmd = due(s, wall_ms=1_000, retire_after_ms=100)
    assert cmd is not None and len(cmd.worker_ids) == RETIRE_LOOKAHEAD_MAX - 1


def test_the_planner_retires_as_its_last_stage() -> None:
    s = cluster()
    register(s, "gone", 0)
    leave(s, "gone", 1_000)
    settings = quick_settings(total_partitions=4, retire_after_ms=HOUR_MS)
    planner = Planner(settings, random.Random(1), s, now_ms=0)
    early = planner.plan(s, now_ms=0, wall_ms=1_000 + HOUR_MS - 1)
    assert not any(isinstance(c, RetireWorkers) for c in early.commands)
    batch = planner.plan(s, now_ms=1, wall_ms=1_000 + HOUR_MS)
    assert batch.commands == (
        RetireWorkers(worker_ids=(WorkerId("gone"),), departed_by_ms=1_000, now_ms=1_000 + HOUR_MS),
    )
