"""A recorded pipeline's rescale and spec update in the core: StartPipelineRescale ..
FinishPipelineRescale on fresh partition numbers, every refusal (each changing nothing),
the leader's repeats, fenced cuts, a drop mid-rescale, pipelines rescaling side by side and
beside `default`, the snapshot, the version gate, and the invariants catching a broken
table."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.codec import (
    CodecError,
    decode_command,
    decode_result,
    encode_command,
    encode_result,
)
from coordinator.core.commands import (
    ActivatePipeline,
    Assignment,
    AssignPartitions,
    Bootstrap,
    BuiltCheckpoint,
    CheckpointReport,
    Command,
    CutResult,
    DrainWorker,
    DropPipeline,
    FinalizeVersion,
    FinishPipelineRescale,
    ForgetPipeline,
    Move,
    Ok,
    PartitionOnline,
    PausePipeline,
    PipelineStatesBuilt,
    PlanMigrations,
    RecordCheckpoints,
    RecordCut,
    RecordPipelineCut,
    RegisterWorker,
    ReportVersions,
    RescaleResult,
    ResumePipeline,
    StartPipelineRescale,
    StartRescale,
    StatesBuilt,
)
from coordinator.core.invariants import state_violations, step_violations, view
from coordinator.core.model import (
    PIPELINE_PARTITIONS_MAX,
    RESCALE_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    SLOT_BASE,
    TOTAL_PARTITIONS_MAX,
    MigrationId,
    MigrationPhase,
    MigrationReason,
    PartitionId,
    PartitionStatus,
    PipelineName,
    PipelineState,
    RescalePhase,
    SlotRange,
    WorkerId,
    WorkerState,
    unassigned_partition,
)
from coordinator.core.pipeline_fields import decode_pipeline, pipeline_plain
from coordinator.core.pipeline_invariants import PipelineView, pipeline_step_violations
from coordinator.core.pipelines import numbers_ever
from coordinator.core.snapshot import decode_state, encode_state
from coordinator.core.state import ClusterState, apply
from coordinator.core.versions import INTRODUCED_IN, refusal
from tests.unit.test_core_pipelines import ORDERS, SPEC, checked, create
from tests.unit.test_core_state import rejects

CLICKS = PipelineName("clicks")
W1, W2 = WorkerId("w1"), WorkerId("w2")
SPEC2 = SPEC + '\n[[aggregations]]\nname = "s"\nfn = "sum"\ncolumn = "v"\n'
_ids = itertools.count()
L = PipelineState


def go(s: ClusterState, cmd: Command) -> object:
    """Apply `cmd` (it must commit), hold the state and the step to the invariants, and
    return its result's value."""
    before = view(s)
    result = apply(s, f"pr-{next(_ids)}", cmd)
    assert isinstance(result, Ok), result
    assert state_violations(s) == []
    assert step_violations(before, s, cmd) == []
    return result.value


def cluster(version: int = 7) -> ClusterState:
    s = ClusterState()
    for cmd in (
        ReportVersions(node_id="n1", min_version=1, max_version=7, package_version="x", now_ms=1),
        FinalizeVersion(version=version, voters=("n1",), now_ms=1),
        Bootstrap(total_partitions=4, now_ms=1),
        RegisterWorker(worker_id=W1, address="http://w1", now_ms=2),
        RegisterWorker(worker_id=W2, address="http://w2", now_ms=2),
    ):
        assert isinstance(apply(s, f"boot-{next(_ids)}", cmd), Ok)
    return s


def set_up(s: ClusterState, name: str = ORDERS, partitions: int = 3) -> int:
    """Create and activate pipeline `name`; its partitions are put ONLINE on w1 and w2.
    Returns its incarnation."""
    go(s, create(name=name, partitions=partitions, pool=()))
    incarnation = s.pipelines[PipelineName(name)].incarnation
    go(s, ActivatePipeline(name=PipelineName(name), incarnation=incarnation, now_ms=110))
    online(s, name)
    return incarnation


def online(s: ClusterState, name: str) -> None:
    """Assign every UNASSIGNED partition of `name`, alternating w1 and w2, and bring it up."""
    parts = [p for p in s.partitions.of(name) if p.status is PartitionStatus.UNASSIGNED]
    if not parts:
        return
    owners = [W1 if i % 2 == 0 else W2 for i in range(len(parts))]
    go(
        s,
        AssignPartitions(
            assignments=tuple(
                Assignment(partition=p.partition, owner=w)
                for p, w in zip(parts, owners, strict=True)
            ),
            now_ms=120,
        ),
    )
    for p in parts:
        part = s.partitions[p.partition]
        assert part.owner is not None
        go(
            s,
            PartitionOnline(
                partition=part.partition, epoch=part.epoch, owner=part.owner, now_ms=121
            ),
        )


def start(
    partitions: int = 5, text: str = "", name: str = ORDERS, incarnation: int = 1
) -> StartPipelineRescale:
    return StartPipelineRescale(
        name=PipelineName(name),
        incarnation=incarnation,
        partitions=partitions,
        spec_text=text,
        spec_sha256=hashlib.sha256(text.encode()).hexdigest() if text else "",
        by="ops",
        now_ms=200,
    )


def cut(s: ClusterState, number: int, name: str = ORDERS, offset: int = 50) -> RecordPipelineCut:
    p = s.pipelines[PipelineName(name)]
    return RecordPipelineCut(
        name=p.name,
        incarnation=p.incarnation,
        partition=number,
        epoch=s.partitions[number].epoch,
        offset=offset,
        uri=f"s3://b/cut-{number}",
        now_ms=210,
    )


def cut_all(s: ClusterState, name: str = ORDERS) -> None:
    for part in list(s.partitions.of(name)):
        go(s, cut(s, part.partition, name))


def built(s: ClusterState, name: str = ORDERS) -> PipelineStatesBuilt:
    p = s.pipelines[PipelineName(name)]
    r = p.rescale
    assert r is not None
    return PipelineStatesBuilt(
        name=p.name,
        incarnation=p.incarnation,
        generation=r.generation,
        checkpoints=tuple(
            BuiltCheckpoint(partition=n, offset=0, uri=f"s3://b/built-{n}")
            for n in range(r.first_slot, r.first_slot + r.partitions)
        ),
        now_ms=220,
    )


def finish(s: ClusterState, name: str = ORDERS) -> FinishPipelineRescale:
    p = s.pipelines[PipelineName(name)]
    assert p.rescale is not None
    return FinishPipelineRescale(
        name=p.name, incarnation=p.incarnation, generation=p.rescale.generation, now_ms=230
    )


def numbers(s: ClusterState, name: str = ORDERS) -> list[int]:
    return [p.partition for p in s.partitions.of(name)]


def same_again(s: ClusterState, cmd: Command) -> object:
    """A leader's repeat under a new request id: Ok, and nothing changes."""
    before = encode_state(s)
    request_id = f"again-{next(_ids)}"
    result = apply(s, request_id, cmd)
    assert isinstance(result, Ok), result
    del s.requests[request_id]  # its answer is recorded: all that may change
    assert encode_state(s) == before
    return result.value


@pytest.fixture
def s() -> ClusterState:
    state = cluster()
    set_up(state)
    return state


def test_a_rescale_moves_the_pipeline_onto_fresh_numbers(s: ClusterState) -> None:
    old = numbers(s)
    assert old == [SLOT_BASE, SLOT_BASE + 1, SLOT_BASE + 2]
    seq = s.slot_seq
    r = go(s, start(partitions=5))
    assert r == RescaleResult(generation=1, partitions=5, previous=3, phase=RescalePhase.CUTTING)
    rescale = s.pipelines[ORDERS].rescale
    assert rescale is not None and rescale.first_slot == seq and s.slot_seq == seq + 5
    assert numbers(s) == old  # reserved, not in the table before HOSTING
    assert rescale.spec_sha256 == s.pipelines[ORDERS].spec_sha256 and rescale.spec_text == ""
    assert rescale.spec_version == 1
    same_again(s, start(partitions=5))
    for i, n in enumerate(old):
        c = go(s, cut(s, n))
        assert isinstance(c, CutResult) and c.status == "accepted"
        assert c.phase is (RescalePhase.MOVING if i == 2 else RescalePhase.CUTTING)
        checkpoint = s.partitions[n].checkpoint
        assert checkpoint is not None and checkpoint.uri == f"s3://b/cut-{n}"
        same_again(s, cut(s, n))
    rescale = s.pipelines[ORDERS].rescale
    assert rescale is not None and rescale.base_epoch == 1 + max(p.epoch for p in s.partitions)
    generation = s.generation
    go(s, built(s))
    p = s.pipelines[ORDERS]
    assert numbers(s) == list(range(seq, seq + 5))
    assert (p.first_slot, p.partitions, p.routing_generation) == (seq, 5, 1)
    assert p.past == (SlotRange(first_slot=SLOT_BASE, partitions=3, routing_generation=0),)
    assert p.rescale is not None and p.rescale.phase is RescalePhase.HOSTING
    assert s.generation == generation + 1  # owned partitions went
    assert not s.owned_by(W1) and not s.owned_by(W2)
    base = p.rescale.base_epoch
    for part in s.partitions.of(ORDERS):
        assert (part.owner, part.status) == (None, PartitionStatus.UNASSIGNED)
        assert part.checkpoint is not None and part.checkpoint.epoch == base
        assert part.epoch >= base and part.history[0].note == "generation 1"
    same_again(s, built(s))
    rejects(s, finish(s), "not_online")
    online(s, ORDERS)
    assert go(s, finish(s)) == RescaleResult(
        generation=1, partitions=5, previous=3, phase=RescalePhase.DONE
    )
    same_again(s, finish(s))
    # `default` never moved.
    assert [q.partition for q in s.partitions.of("default")] == [0, 1, 2, 3]


def test_a_cut_at_another_epoch_is_fenced_and_changes_nothing(s: ClusterState) -> None:
    go(s, start())
    bad = dataclasses.replace(cut(s, SLOT_BASE), epoch=s.partitions[SLOT_BASE].epoch - 1)
    before = encode_state(s)
    result = apply(s, "fenced", bad)
    assert isinstance(result, Ok) and isinstance(result.value, CutResult)
    assert result.value.status == "fenced"
    s.requests.pop("fenced")
    assert encode_state(s) == before


def test_a_spec_update_at_the_same_count_is_a_new_version_from_the_cut(s: ClusterState) -> None:
    go(s, start(partitions=3, text=SPEC2))
    r = s.pipelines[ORDERS].rescale
    assert r is not None and r.spec_text == SPEC2 and r.spec_version == 2
    assert s.pipelines[ORDERS].spec_text == SPEC  # the old generation runs the old one
    cut_all(s)
    go(s, built(s))
    p = s.pipelines[ORDERS]
    assert (p.spec_text, p.spec_version, p.partitions) == (SPEC2, 2, 3)
    assert p.spec_sha256 == hashlib.sha256(SPEC2.encode()).hexdigest()
    assert p.rescale is not None and p.rescale.spec_text == ""  # held once, by the record
    online(s, ORDERS)
    go(s, finish(s))
    # The same spec again at the same count is nothing to do.
    rejects(s, start(partitions=3, text=SPEC2), "same_partition_count", "partitions")


def test_every_refusal_of_a_start_changes_nothing(s: ClusterState) -> None:
    r = start()
    rejects(s, dataclasses.replace(r, by=""), "invalid", "by")
    rejects(s, dataclasses.replace(r, incarnation=9), "conflict", "incarnation")
    rejects(s, dataclasses.replace(r, name=PipelineName("nope")), "not_found", "name")
    rejects(s, dataclasses.replace(r, name=PipelineName("default")), "conflict", "name")
    rejects(s, dataclasses.replace(r, spec_sha256="ab" * 32), "invalid", "spec_sha256")
    bad_sha = dataclasses.replace(start(text=SPEC2), spec_sha256="ab" * 32)
    rejects(s, bad_sha, "invalid", "spec_sha256")
    for m in (0, RESCALE_PARTITIONS_MAX + 1):
        rejects(s, start(partitions=m), "invalid", "partitions")
    rejects(s, start(partitions=3), "same_partition_count", "partitions")
    rejects(s, start(partitions=3, text=SPEC), "same_partition_count", "partitions")
    go(s, PausePipeline(name=ORDERS, by="ops", now_ms=150))
    rejects(s, r, "conflict", "name", match="resume it first")
    p = s.pipelines[ORDERS]
    s.pipelines[ORDERS] = dataclasses.replace(
        p, state=PipelineState.ACTIVE, routing_generation=ROUTING_GENERATIONS_MAX - 1
    )
    rejects(s, r, "conflict", "name", match="routing generations")
    s.pipelines[ORDERS] = p
    go(s, create(name=CLICKS, partitions=2, pool=()))  # CREATING: not set up yet
    rejects(s, start(name=CLICKS, incarnation=2), "conflict", "name", match="creating")


def test_a_rescale_counts_its_new_generation_against_the_clusters_partitions(
    s: ClusterState,
) -> None:
    for i in range(15):
        go(s, create(name=f"big{i}", partitions=PIPELINE_PARTITIONS_MAX, pool=()))
    room = TOTAL_PARTITIONS_MAX - 4 - 15 * PIPELINE_PARTITIONS_MAX  # default's 4
    rejects(s, start(partitions=room + 1), "conflict", "partitions", match="would pass")
    go(s, start(partitions=room))
    # While it is under way the larger generation counts: no room for one more partition.
    rejects(s, create(name="one", partitions=1, pool=()), "conflict", "partitions")


def test_one_rescale_of_a_pipeline_at_a_time(s: ClusterState) -> None:
    go(s, start(partitions=5))
    rejects(s, start(partitions=6), "rescale_in_flight", "name")
    rejects(s, start(partitions=5, text=SPEC2), "rescale_in_flight", "name")


def test_every_refusal_of_a_cut_a_build_and_a_finish_changes_nothing(s: ClusterState) -> None:
    rejects(s, cut(s, SLOT_BASE), "conflict", "partition", match="no rescale")
    go(s, start())
    c = cut(s, SLOT_BASE)
    rejects(s, dataclasses.replace(c, uri=""), "invalid", "uri")
    rejects(s, dataclasses.replace(c, partition=0), "invalid", "partition")  # default's
    rejects(s, dataclasses.replace(c, partition=SLOT_BASE + 3), "invalid", "partition")
    rejects(s, dataclasses.replace(c, incarnation=2), "conflict", "incarnation")
    rejects(s, built(s), "conflict", "name", match="is cutting")
    rejects(s, finish(s), "conflict", "name", match="is cutting")
    go(s, c)
    rejects(s, dataclasses.replace(c, offset=51), "conflict", "offset")
    cp = s.partitions[SLOT_BASE + 1]
    go(s, dataclasses.replace(cut(s, cp.partition), offset=60))
    assert s.partitions[cp.partition].checkpoint is not None
    go(s, cut(s, SLOT_BASE + 2))
    b = built(s)
    rejects(s, dataclasses.replace(b, generation=2), "conflict", "generation")
    rejects(s, dataclasses.replace(b, checkpoints=b.checkpoints[1:]), "invalid", "checkpoints")
    shifted = tuple(dataclasses.replace(x, partition=x.partition - 1) for x in b.checkpoints)
    rejects(s, dataclasses.replace(b, checkpoints=shifted), "invalid", "checkpoints")
    bad_uri = (dataclasses.replace(b.checkpoints[0], uri=""), *b.checkpoints[1:])
    rejects(s, dataclasses.replace(b, checkpoints=bad_uri), "invalid", "checkpoints")
    rejects(s, dataclasses.replace(finish(s), generation=3), "conflict", "generation")


def test_a_cut_behind_the_partitions_checkpoint_is_refused(s: ClusterState) -> None:
    part = s.partitions[SLOT_BASE]
    assert part.owner is not None
    report = CheckpointReport(
        partition=part.partition, epoch=part.epoch, offset=100, uri="s3://b/ck-100"
    )
    go(
        s,
        RecordCheckpoints(
            worker_id=part.owner,
            incarnation=s.workers[part.owner].incarnation,
            entries=(report,),
            now_ms=150,
        ),
    )
    go(s, start())
    rejects(s, cut(s, SLOT_BASE, offset=99), "conflict", "offset", match="behind")
    go(s, cut(s, SLOT_BASE, offset=100))


def test_a_drop_ends_the_rescale_and_leaves_nothing_in_the_table(s: ClusterState) -> None:
    go(s, start())
    go(s, cut(s, SLOT_BASE))
    go(s, DropPipeline(name=ORDERS, purge=True, by="ops", now_ms=300))
    rejects(s, cut(s, SLOT_BASE + 1), "conflict", "name", match="dropped")
    rejects(s, start(partitions=7), "conflict", "name", match="dropped")
    go(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=301))
    assert numbers(s) == [] and ORDERS not in s.pipelines
    assert all(p.partition < SLOT_BASE for p in s.partitions)


def test_every_number_a_pipeline_was_given_is_known_until_it_is_forgotten(
    s: ClusterState,
) -> None:
    first = range(SLOT_BASE, SLOT_BASE + 3)
    assert numbers_ever(s.pipelines[ORDERS]) == (first,)
    go(s, start(partitions=2))
    r = s.pipelines[ORDERS].rescale
    assert r is not None
    reserved = range(r.first_slot, r.first_slot + 2)
    assert numbers_ever(s.pipelines[ORDERS]) == (first, reserved)  # a build may write there
    cut_all(s)
    go(s, built(s))
    assert numbers_ever(s.pipelines[ORDERS]) == (first, reserved)  # now the current ones
    online(s, ORDERS)
    go(s, finish(s))
    go(s, start(partitions=1))
    third = s.pipelines[ORDERS].rescale
    assert third is not None
    assert numbers_ever(s.pipelines[ORDERS]) == (
        first,
        reserved,
        range(third.first_slot, third.first_slot + 1),
    )


def test_a_drop_after_the_swap_forgets_the_new_numbers() -> None:
    s = cluster()
    set_up(s)
    go(s, start(partitions=2))
    cut_all(s)
    go(s, built(s))
    online(s, ORDERS)
    go(s, DropPipeline(name=ORDERS, purge=False, by="ops", now_ms=300))
    rejects(s, finish(s), "conflict", "name", match="dropped")
    go(s, ForgetPipeline(name=ORDERS, incarnation=1, now_ms=301))
    assert all(p.partition < SLOT_BASE for p in s.partitions)
    assert all(n < SLOT_BASE for w in (W1, W2) for n in s.owned_by(w))


def test_pipelines_rescale_side_by_side_and_beside_default() -> None:
    s = cluster()
    set_up(s, ORDERS, 3)
    go(s, start(partitions=4))
    clicks = set_up(s, CLICKS, 2)  # numbered above the numbers orders reserved
    assert numbers(s, CLICKS)[0] > s.pipelines[ORDERS].rescale.first_slot  # type: ignore[union-attr]
    go(s, start(partitions=1, name=CLICKS, incarnation=clicks))
    assert isinstance(apply(s, "dflt", StartRescale(partitions=6, by="ops", now_ms=5)), Ok)
    cut_all(s, CLICKS)
    cut_all(s, ORDERS)
    go(s, built(s, ORDERS))  # its numbers sit below clicks': the table stays in number order
    order = [p.partition for p in s.partitions]
    assert order == sorted(order)
    go(s, built(s, CLICKS))
    online(s, ORDERS)
    online(s, CLICKS)
    go(s, finish(s, CLICKS))
    go(s, finish(s, ORDERS))
    assert len(numbers(s, ORDERS)) == 4 and len(numbers(s, CLICKS)) == 1
    assert s.rescale is not None and s.rescale.phase is RescalePhase.CUTTING  # default's own


def test_defaults_rescale_leaves_a_pipelines_migration_alone(s: ClusterState) -> None:
    mine = [n for n in numbers(s) if s.partitions[n].owner == W2]
    move = Move(partition=PartitionId(mine[0]), source=W2, target=W1)
    go(s, PlanMigrations(moves=(move,), reason=MigrationReason.ADMIN, now_ms=130))
    go(s, StartRescale(partitions=2, by="ops", now_ms=131))
    for n in range(4):
        go(s, RecordCut(partition=n, epoch=0, offset=0, uri=f"s3://b/d{n}", now_ms=132))
    go(
        s,
        StatesBuilt(
            generation=1,
            checkpoints=tuple(
                BuiltCheckpoint(partition=n, offset=0, uri=f"s3://b/dn{n}") for n in range(2)
            ),
            now_ms=133,
        ),
    )
    assert s.migrations[MigrationId("m-1")].phase is MigrationPhase.PLANNED
    assert s.partitions[mine[0]].migration == MigrationId("m-1")


def test_the_swap_aborts_its_migrations_and_lets_a_drained_worker_leave(s: ClusterState) -> None:
    mine = [n for n in numbers(s) if s.partitions[n].owner == W2]
    go(
        s,
        PlanMigrations(
            moves=(Move(partition=PartitionId(mine[0]), source=W2, target=W1),),
            reason=MigrationReason.ADMIN,
            now_ms=130,
        ),
    )
    go(s, DrainWorker(worker_id=W2, moves=(), now_ms=131))
    go(s, start())
    cut_all(s)
    go(s, built(s))
    m = s.migrations[MigrationId("m-1")]
    assert (m.phase, m.note) == (MigrationPhase.ABORTED, "rescale")
    assert s.workers[W2].state is WorkerState.LEFT  # it owned only the old partitions


def test_the_records_round_trip_in_snapshots_and_an_older_form_still_loads(
    s: ClusterState,
) -> None:
    plain = pipeline_plain(s.pipelines[ORDERS])
    assert len(plain) == 15  # no rescale, no past: the form before either existed
    assert decode_pipeline(plain, "p") == s.pipelines[ORDERS]
    go(s, start(partitions=2, text=SPEC2))
    for phase in ("cutting", "moving", "hosting", "done"):
        data = encode_state(s)
        restored = decode_state(data)
        assert restored.pipelines == s.pipelines and restored.partitions == s.partitions
        assert restored.slot_seq == s.slot_seq and encode_state(restored) == data
        assert state_violations(restored) == []
        if phase == "cutting":
            cut_all(s)
        elif phase == "moving":
            go(s, built(s))
        elif phase == "hosting":
            online(s, ORDERS)
            go(s, finish(s))
    assert len(pipeline_plain(s.pipelines[ORDERS])) == 18
    for bad in (plain[:14], [*plain, [], []]):
        with pytest.raises(CodecError):
            decode_pipeline(bad, "p")


def test_the_commands_and_their_results_round_trip_on_the_wire(s: ClusterState) -> None:
    cmds: list[Command] = [start(partitions=2, text=SPEC2)]
    results = [go(s, cmds[0])]
    for n in numbers(s):
        cmds.append(cut(s, n))
        results.append(go(s, cmds[-1]))
    cmds.append(built(s))
    results.append(go(s, cmds[-1]))
    for i, cmd in enumerate(cmds):
        assert decode_command(encode_command(cmd, f"x{i}")) == (f"x{i}", cmd)
    for value in results:
        result = Ok(value=value)  # type: ignore[arg-type]
        assert decode_result(encode_result(result)) == result


def test_a_cluster_below_version_7_refuses_them_before_proposing() -> None:
    s = cluster(version=6)
    set_up(s)
    for cmd in (
        start(),
        cut(s, SLOT_BASE),
        PipelineStatesBuilt(name=ORDERS, incarnation=1, generation=1, checkpoints=(), now_ms=1),
        FinishPipelineRescale(name=ORDERS, incarnation=1, generation=1, now_ms=1),
    ):
        assert INTRODUCED_IN[cmd.TAG] == 7
        refused = refusal(s, type(cmd).__name__, INTRODUCED_IN[cmd.TAG], ("n1",))
        assert refused is not None and refused.code == "version_not_finalized"
        rejects(s, cmd, "version_not_finalized", "command_set_version")
    # A voter that does not speak 7 is named: upgrade it first.
    refused = refusal(s, "StartPipelineRescale", 7, ("n1", "n2"))
    assert refused is not None and refused.code == "version_unsupported" and "n2" in refused.message


def test_the_invariants_catch_a_broken_table(s: ClusterState) -> None:
    go(s, start())
    r = s.pipelines[ORDERS].rescale
    assert r is not None
    broken = decode_state(encode_state(s))
    broken.partitions.add([unassigned_partition(r.first_slot, ORDERS)])
    assert any("before HOSTING" in v for v in state_violations(broken))
    broken = decode_state(encode_state(s))
    p = broken.pipelines[ORDERS]
    broken.pipelines[ORDERS] = dataclasses.replace(p, rescale=dataclasses.replace(r, cuts=()))
    assert any("cut" in v for v in state_violations(broken))
    broken.pipelines[ORDERS] = dataclasses.replace(
        p, past=(SlotRange(first_slot=SLOT_BASE, partitions=3, routing_generation=0),)
    )
    assert any("generation" in v for v in state_violations(broken))
    # A new generation that starts at an epoch its old one held.
    cut_all(s)
    go(s, built(s))
    low = min(x.epoch for x in s.partitions.of(ORDERS))
    was = PipelineView(
        state=PipelineState.ACTIVE,
        incarnation=1,
        spec_version=1,
        routing_generation=0,
        rescale_phase=RescalePhase.MOVING,
        epoch_max=low,
    )
    found = pipeline_step_violations({ORDERS: was}, s.pipeline_seq, s, "PipelineStatesBuilt")
    assert any("not above its old one's" in v for v in found)
    was = dataclasses.replace(was, epoch_max=low - 1)
    assert pipeline_step_violations({ORDERS: was}, s.pipeline_seq, s, "PipelineStatesBuilt") == []


# What a step may do, the rescale's own steps more often than the rest, so that sequences
# reach every phase.
_ACTIONS = (
    *("start", "update", "cut", "cuts", "cuts", "built", "built", "online", "finish") * 3,
    *("create", "pause", "resume", "drop", "forget"),
)


def _intended(s: ClusterState, action: str, name: str, n: int, flip: bool) -> list[Command]:
    """The commands `action` on pipeline `name` would be now, built from the state so that
    most of them apply (`flip` makes a cut stale, a build short)."""
    p = s.pipelines.get(PipelineName(name))
    if action == "cuts" and p is not None and p.rescale is not None:
        return [cut(s, x.partition, name) for x in s.partitions.of(name)]
    one = _one(s, action, name, n, flip)
    return [] if one is None else [one]


def _one(s: ClusterState, action: str, name: str, n: int, flip: bool) -> Command | None:
    p = s.pipelines.get(PipelineName(name))
    if action == "create":
        return create(name=name, partitions=n, pool=(), now_ms=100)
    if p is None:
        return None
    r = p.rescale
    match action:
        case "start" | "update":
            text = SPEC2 if action == "update" and p.spec_text == SPEC else ""
            return start(partitions=n, text=text, name=name, incarnation=p.incarnation)
        case "cut":
            numbers_now = [x.partition for x in s.partitions.of(name)]
            if not numbers_now:
                return None
            c = cut(s, numbers_now[n % len(numbers_now)], name)
            return dataclasses.replace(c, epoch=c.epoch + 1) if flip else c
        case "built" if r is not None:
            b = built(s, name)
            return dataclasses.replace(b, checkpoints=b.checkpoints[1:]) if flip else b
        case "online":
            return None
        case "finish" if r is not None:
            return finish(s, name)
        case "pause":
            return PausePipeline(name=p.name, by="ops", now_ms=300)
        case "resume":
            return ResumePipeline(name=p.name, by="ops", now_ms=300)
        case "drop":
            return DropPipeline(name=p.name, purge=flip, by="ops", now_ms=300)
        case "forget":
            return ForgetPipeline(name=p.name, incarnation=p.incarnation, now_ms=300)
    return None


@given(
    st.lists(
        st.tuples(
            st.sampled_from(_ACTIONS),
            st.sampled_from([str(ORDERS), str(CLICKS)]),
            st.integers(1, 5),
            st.booleans(),
        ),
        min_size=12,
        max_size=50,
    )
)
@settings(max_examples=150, deadline=None)
def test_any_sequence_of_rescales_holds_the_invariants(
    steps: list[tuple[str, str, int, bool]],
) -> None:
    s = cluster()
    set_up(s, ORDERS, 3)
    set_up(s, CLICKS, 2)
    for action, name, n, flip in steps:
        p = s.pipelines.get(PipelineName(name))
        # A finish, unless flipped, comes once the new generation is hosted.
        hosting = action == "finish" and not flip
        if (action == "online" or hosting) and p is not None and p.state is not L.DROPPING:
            if p.state is PipelineState.CREATING:
                go(s, ActivatePipeline(name=p.name, incarnation=p.incarnation, now_ms=1))
            online(s, name)
            if not hosting:
                continue
        for cmd in _intended(s, action, name, n, flip):
            checked(s, cmd, f"h-{next(_ids)}")
    restored = decode_state(encode_state(s))
    assert restored.pipelines == s.pipelines and restored.partitions == s.partitions
    for p in s.pipelines.values():
        got = [x.partition for x in s.partitions.of(p.name)]
        assert got == list(range(p.first_slot, p.first_slot + p.partitions)) or not got


def test_the_table_swaps_a_generation_only_for_new_numbers_of_that_pipeline(
    s: ClusterState,
) -> None:
    table = s.partitions.copy()
    for bad in (
        [unassigned_partition(SLOT_BASE, ORDERS)],  # a number it holds
        [unassigned_partition(SLOT_BASE + 50, CLICKS)],  # another pipeline's
    ):
        with pytest.raises(ValueError):
            table.swap(ORDERS, bad)
    assert table == s.partitions  # a refused swap changed nothing
    old = table.swap(ORDERS, [unassigned_partition(SLOT_BASE + 7, ORDERS)])
    assert [p.partition for p in old] == [SLOT_BASE, SLOT_BASE + 1, SLOT_BASE + 2]
    assert [p.partition for p in table.of(ORDERS)] == [SLOT_BASE + 7]
