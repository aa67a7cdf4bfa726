"""The replication adapter: total on any bytes, and the state's invariants under random runs."""

from __future__ import annotations

import itertools

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from coordinator.core.codec import (
    FORMAT_VERSION,
    decode_result,
    encode_command,
    encode_result,
)
from coordinator.core.commands import (
    AbortMigration,
    Assignment,
    AssignPartitions,
    Barrier,
    BarrierResult,
    Bootstrap,
    BootstrapResult,
    CheckpointReport,
    Command,
    DeclareDead,
    DrainWorker,
    FallBack,
    FinalCheckpoint,
    HandOff,
    MarkStuck,
    Move,
    Ok,
    PartitionOnline,
    PlanMigrations,
    RecordCheckpoints,
    RegisterWorker,
    Rejected,
    ResetPartition,
    Result,
    StartRelease,
)
from coordinator.core.invariants import Ledger, state_violations, step_violations, view
from coordinator.core.machine import ClusterState, Machine
from coordinator.core.model import (
    OWNING_WORKER_STATES,
    MigrationId,
    MigrationReason,
    Partition,
    PartitionStatus,
    WorkerId,
    WorkerState,
)
from coordinator.core.result_codec import WIRE_STATUS_OF_CODE
from coordinator.core.snapshot import decode_state, encode_state
from tests.unit.test_core_codec import commands, json_like, request_ids


def _apply(machine: Machine, data: bytes) -> Result:
    return decode_result(machine.apply(data))


def test_apply_decodes_applies_and_encodes() -> None:
    m = Machine()
    assert _apply(m, encode_command(Bootstrap(total_partitions=3, now_ms=1), "r1")) == Ok(
        value=BootstrapResult(total_partitions=3, created=True)
    )
    r = _apply(m, b"\x93\x01\x02")
    assert isinstance(r, Rejected) and r.code == "invalid"
    bad_tag = msgpack.packb([FORMAT_VERSION, 77, "r", {}])
    r = _apply(m, bad_tag)
    assert isinstance(r, Rejected) and r.message == "unknown command tag 77" and r.field == "tag"


def test_internal_errors_become_values() -> None:
    m = Machine()
    m.state = None  # type: ignore[assignment]  # any bug inside apply
    r = _apply(m, encode_command(Bootstrap(total_partitions=3, now_ms=1), "r1"))
    assert isinstance(r, Rejected) and r.code == "internal"


def test_snapshot_restore() -> None:
    m = Machine()
    _apply(m, encode_command(Bootstrap(total_partitions=3, now_ms=1), "r1"))
    other = Machine()
    other.restore(m.snapshot())
    assert other.snapshot() == m.snapshot()


def _check_total(result_bytes: bytes) -> None:
    result = decode_result(result_bytes)
    if isinstance(result, Rejected):
        assert result.code != "internal", result
        # The legacy status slot is what releases before error kinds wrote for the code.
        assert msgpack.unpackb(result_bytes)[4] == WIRE_STATUS_OF_CODE[result.code]


@given(st.binary(max_size=200))
@settings(max_examples=300)
def test_apply_never_raises_on_bytes(data: bytes) -> None:
    _check_total(Machine().apply(data))


@given(json_like)
@settings(max_examples=300)
def test_apply_never_raises_on_msgpack(obj: object) -> None:
    _check_total(Machine().apply(msgpack.packb(obj)))


FIELD_NAMES = [
    "total_partitions",
    "now_ms",
    "worker_id",
    "address",
    "worker_ids",
    "assignments",
    "partition",
    "epoch",
    "owner",
    "moves",
    "reason",
    "migration_id",
    "checkpoint",
    "note",
    "incarnation",
    "entries",
    "nonce",
    "extra",
]


@given(
    st.integers(0, 14),
    st.one_of(st.text(max_size=70), json_like),
    st.dictionaries(
        st.sampled_from(FIELD_NAMES),
        json_like,
    ),
    st.booleans(),
)
@settings(max_examples=500)
def test_apply_never_raises_on_garbage_fields(
    tag: int, request_id: object, body: dict[str, object], bootstrap: bool
) -> None:
    m = Machine()
    if bootstrap:
        m.apply(encode_command(Bootstrap(total_partitions=4, now_ms=1), "boot"))
    _check_total(m.apply(msgpack.packb([FORMAT_VERSION, tag, request_id, body])))


@given(request_ids, st.lists(commands, max_size=8))
@settings(max_examples=200)
def test_apply_never_raises_on_well_formed_commands(rid: str, cmds: list[Command]) -> None:
    m = Machine()
    m.apply(encode_command(Bootstrap(total_partitions=8, now_ms=1), "boot"))
    for i, cmd in enumerate(cmds):
        _check_total(m.apply(encode_command(cmd, f"{rid[:50]}{i}")))


# --- random runs of valid-ish commands ---------------------------------------------------------

POOL = [WorkerId(f"w{i}") for i in range(5)]


class CoordinatorRun(RuleBasedStateMachine):
    """Drives the Machine (through bytes) with commands a leader might plausibly send."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = Machine()
        self.ids = itertools.count()
        self.ledger = Ledger()
        self.last: tuple[str, bytes] | None = None
        # The owning set as a reader of ClusterState.owning_changes_since keeps it.
        self.owning_cursor: tuple[int, int] | None = None
        self.owning_view: set[WorkerId] = set()

    @property
    def s(self) -> ClusterState:
        return self.machine.state

    def run(self, cmd: Command) -> Result:
        rid = f"r{next(self.ids)}"
        data = encode_command(cmd, rid)
        before = view(self.s)
        out = self.machine.apply(data)
        result = decode_result(out)
        # Every change the command made is an edge of its lifecycle table, epochs and the
        # generation only grow, an epoch keeps its owner, checkpoints are fenced.
        assert step_violations(before, self.s, cmd) == []
        if isinstance(result, Rejected):
            assert result.code != "internal", result
        else:
            self.last = (data.hex(), out)
        return result

    @initialize(total=st.integers(1, 8), workers=st.integers(0, 4))
    def bootstrap(self, total: int, workers: int) -> None:
        # Start from a populated cluster most of the time so runs reach the deep transitions.
        assert isinstance(self.run(Bootstrap(total_partitions=total, now_ms=0)), Ok)
        for wid in POOL[:workers]:
            self.run(RegisterWorker(worker_id=wid, address="http://x", now_ms=0))
        if workers:
            assignments = tuple(
                Assignment(partition=p, owner=POOL[p % workers]) for p in range(total)
            )
            assert isinstance(self.run(AssignPartitions(assignments=assignments, now_ms=0)), Ok)

    def _workers(self, *states: WorkerState) -> list[WorkerId]:
        return sorted(w.worker_id for w in self.s.workers.values() if w.state in states)

    @rule(data=st.data())
    def register(self, data: st.DataObject) -> None:
        wid = data.draw(st.sampled_from(POOL))
        assert isinstance(self.run(RegisterWorker(worker_id=wid, address="http://x", now_ms=1)), Ok)

    @rule(data=st.data())
    def declare_dead(self, data: st.DataObject) -> None:
        owning = self._workers(*OWNING_WORKER_STATES)
        if not owning:
            return
        dead = data.draw(st.lists(st.sampled_from(owning), min_size=1, max_size=2, unique=True))
        heirs = [w for w in self._workers(WorkerState.ACTIVE) if w not in dead]
        orphaned = sorted(p for w in dead for p in self.s.owned_by(w))
        assignments = tuple(
            Assignment(partition=p, owner=data.draw(st.sampled_from([None, *heirs])))
            for p in orphaned
        )
        cmd = DeclareDead(worker_ids=tuple(dead), assignments=assignments, now_ms=2)
        assert isinstance(self.run(cmd), Ok)

    @rule(data=st.data())
    def assign(self, data: st.DataObject) -> None:
        active = self._workers(WorkerState.ACTIVE)
        free = [p.partition for p in self.s.partitions if p.status is PartitionStatus.UNASSIGNED]
        if not active or not free:
            return
        chosen = data.draw(st.lists(st.sampled_from(free), min_size=1, unique=True))
        assignments = tuple(
            Assignment(partition=p, owner=data.draw(st.sampled_from(active))) for p in chosen
        )
        assert isinstance(self.run(AssignPartitions(assignments=assignments, now_ms=3)), Ok)

    @rule(data=st.data(), exact=st.integers(0, 3))
    def online(self, data: st.DataObject, exact: int) -> None:
        pending = [p for p in self.s.partitions if p.status is PartitionStatus.ASSIGNING]
        part = data.draw(st.sampled_from(pending or list(self.s.partitions)))
        epochs = [part.epoch, max(0, part.epoch - 1), part.epoch + 1]
        epoch = part.epoch if exact else data.draw(st.sampled_from(epochs))
        owner = part.owner or data.draw(st.sampled_from(POOL))
        cmd = PartitionOnline(partition=part.partition, epoch=epoch, owner=owner, now_ms=4)
        result = self.run(cmd)
        assert isinstance(result, Ok) == (epoch == part.epoch and part.owner is not None)

    def _moves(self, data: st.DataObject, sources: list[WorkerId]) -> tuple[Move, ...]:
        movable = [p for p in self.s.partitions if p.owner in sources and p.migration is None]
        active = self._workers(WorkerState.ACTIVE)
        if not movable:
            return ()
        chosen = data.draw(st.lists(st.sampled_from(movable), min_size=1, max_size=3, unique=True))
        moves = []
        for p in chosen:
            assert p.owner is not None
            targets = [w for w in active if w != p.owner]
            if targets:
                target = data.draw(st.sampled_from(targets))
                moves.append(Move(partition=p.partition, source=p.owner, target=target))
        return tuple(moves)

    @rule(data=st.data(), reason=st.sampled_from(MigrationReason))
    def plan(self, data: st.DataObject, reason: MigrationReason) -> None:
        moves = self._moves(data, self._workers(*OWNING_WORKER_STATES))
        self.run(PlanMigrations(moves=moves, reason=reason, now_ms=5))

    def _migration(self, data: st.DataObject) -> MigrationId:
        in_flight = [m.migration_id for m in self.s.in_flight_migrations()]
        return data.draw(
            st.sampled_from(in_flight or list(self.s.migrations) or [MigrationId("m-0")])
        )

    @rule(data=st.data())
    def start_release(self, data: st.DataObject) -> None:
        self.run(StartRelease(migration_id=self._migration(data), now_ms=6))

    @rule(data=st.data(), offset=st.integers(0, 30), same_epoch=st.booleans(), give=st.booleans())
    def hand_off(self, data: st.DataObject, offset: int, same_epoch: bool, give: bool) -> None:
        mid = self._migration(data)
        m = self.s.migrations.get(mid)
        epoch = self.s.partitions[m.partition].epoch if m and same_epoch else 0
        final = FinalCheckpoint(offset=offset, uri="f", epoch=epoch) if give else None
        self.run(HandOff(migration_id=mid, checkpoint=final, now_ms=7))

    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self.run(AbortMigration(migration_id=self._migration(data), note="n", now_ms=8))

    @rule(data=st.data(), offset=st.integers(0, 30), stale=st.booleans())
    def checkpoints(self, data: st.DataObject, offset: int, stale: bool) -> None:
        owning = self._workers(*OWNING_WORKER_STATES)
        if not owning:
            return
        wid = data.draw(st.sampled_from(owning))
        entries = tuple(
            CheckpointReport(partition=p, epoch=e - stale, offset=offset, uri=f"c{offset}")
            for p, e in self.s.assignment_of(wid)
        )
        inc = self.s.workers[wid].incarnation
        assert isinstance(
            self.run(RecordCheckpoints(worker_id=wid, incarnation=inc, entries=entries, now_ms=9)),
            Ok,
        )

    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        owning = self._workers(*OWNING_WORKER_STATES)
        if not owning:
            return
        wid = data.draw(st.sampled_from(owning))
        moves = tuple(m for m in self._moves(data, [wid]) if m.target != wid)
        assert isinstance(self.run(DrainWorker(worker_id=wid, moves=moves, now_ms=10)), Ok)

    def _assigning(self, data: st.DataObject) -> Partition:
        """Preferably an ASSIGNING partition with earlier checkpoints (the deep cases)."""
        pending = [p for p in self.s.partitions if p.status is PartitionStatus.ASSIGNING]
        deep = [p for p in pending if p.earlier]
        return data.draw(st.sampled_from(deep or pending or list(self.s.partitions)))

    @rule(data=st.data(), exact=st.integers(0, 3), replay=st.booleans())
    def fall_back(self, data: st.DataObject, exact: int, replay: bool) -> None:
        part = self._assigning(data)
        epoch = part.epoch if exact else data.draw(st.sampled_from([part.epoch + 1, part.epoch]))
        known = [FinalCheckpoint(offset=c.offset, uri=c.uri, epoch=c.epoch) for c in part.earlier]
        bogus = FinalCheckpoint(offset=0, uri="nowhere", epoch=0)
        to = None if replay else data.draw(st.sampled_from([*known, bogus]))
        cmd = FallBack(partition=part.partition, epoch=epoch, checkpoint=to, note="f", now_ms=11)
        result = self.run(cmd)
        valid = (
            epoch == part.epoch
            and part.status is PartitionStatus.ASSIGNING
            and part.checkpoint is not None
            and (to is None or to in known)
        )
        assert isinstance(result, Ok) == valid, (result, part)
        if valid:
            new = self.s.partitions[part.partition]
            assert (new.owner, new.epoch, new.migration) == (
                part.owner,
                part.epoch + 1,
                part.migration,
            )

    @rule(data=st.data())
    def mark_stuck(self, data: st.DataObject) -> None:
        part = self._assigning(data)
        cmd = MarkStuck(partition=part.partition, epoch=part.epoch, note="s", now_ms=12)
        result = self.run(cmd)
        assert isinstance(result, Ok) == (part.status is PartitionStatus.ASSIGNING)

    @rule(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        part = self._assigning(data)
        result = self.run(ResetPartition(partition=part.partition, note="r", now_ms=13))
        assert isinstance(result, Ok) == (part.status is PartitionStatus.ASSIGNING)
        if isinstance(result, Ok):
            new = self.s.partitions[part.partition]
            assert (new.checkpoint, new.earlier, new.stuck) == (None, (), "")

    @rule()
    def retry_last(self) -> None:
        # A retried entry answers from the dedup table and changes nothing.
        if self.last is None:
            return
        data_hex, out = self.last
        before = self.machine.snapshot()
        assert self.machine.apply(bytes.fromhex(data_hex)) == out
        assert self.machine.snapshot() == before

    @rule(nonce=st.text(max_size=5))
    def barrier(self, nonce: str) -> None:
        before = self.machine.snapshot()
        assert self.run(Barrier(nonce=nonce)) == Ok(value=BarrierResult(nonce=nonce))
        assert self.machine.snapshot() == before

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def state_invariants(self) -> None:
        """coordinator/core/invariants.py: one live owner per partition (none when UNASSIGNED),
        migrations and partitions agree (PLANNED/RELEASING owned by the source, HANDED_OFF by
        the target), the fallback chain is bounded and newest first and never stuck ONLINE,
        and the indices (owner, worker state, in flight in order, the heartbeat's cached
        assignment) equal a scan of the records."""
        assert state_violations(self.s) == []

    @invariant()
    def epochs_and_generation_never_decrease(self) -> None:
        # Across every step, a restore from a snapshot included.
        assert self.ledger.observe("machine", self.s) == []

    @rule()
    def restore_from_snapshot(self) -> None:
        self.machine.restore(self.machine.snapshot())

    @invariant()
    def owning_changes_follow_the_owning_set(self) -> None:
        """A reader that follows the owning set by its changes holds the set a scan reads;
        it reads the whole set only when it must (first read, or a restore since)."""
        before = self.owning_cursor
        changed, self.owning_cursor = self.s.owning_changes_since(before)
        truth = self.s.worker_set(*OWNING_WORKER_STATES)
        if changed is None:
            assert before is None or before[0] != self.owning_cursor[0]
            self.owning_view = truth
        else:
            for wid in changed:
                if wid in truth:
                    self.owning_view.add(wid)
                else:
                    self.owning_view.discard(wid)
        assert self.owning_view == truth

    @invariant()
    def snapshot_round_trips(self) -> None:
        data = self.machine.snapshot()
        restored = decode_state(data)
        assert encode_state(restored) == data
        for wid in POOL:
            assert restored.owned_by(wid) == self.s.owned_by(wid)
        assert restored.in_flight_migrations() == self.s.in_flight_migrations()
        for rid, result in list(self.s.requests.items())[-3:]:
            assert decode_result(encode_result(result)) == result, rid


TestCoordinatorRun = CoordinatorRun.TestCase
TestCoordinatorRun.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
