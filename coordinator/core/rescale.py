"""The apply handlers of a rescale: StartRescale, RecordCut, StatesBuilt, FinishRescale.

Owns `ClusterState.rescale` and `ClusterState.routing` (docs/pipeline.md, "Rescaling"). A
rescale moves CUTTING -> MOVING -> HOSTING -> DONE (`coordinator/core/lifecycle.py`'s rescale
table): each old partition's cut is recorded (and made its checkpoint, so a failover replays
from it), the last one fixes `base_epoch`; StatesBuilt replaces the partition table with the
new generation's, every partition unowned at an epoch above every epoch the old table held;
FinishRescale ends it once every new partition is ONLINE. Each handler validates completely
before its first change. Invariants: `routing[-1] == total_partitions`; while the rescale is
CUTTING or MOVING, `len(cuts) == previous == total_partitions` and the new generation is not
in `routing` yet; from HOSTING on it is `routing`'s last.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.core import edits, lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    BuiltCheckpoint,
    CutResult,
    FinishRescale,
    Ok,
    RecordCut,
    RecordPipelineCut,
    Rejected,
    RescaleResult,
    Result,
    StartRescale,
    StatesBuilt,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    MAINTENANCE_BY_LEN_MAX,
    RESCALE_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    SLOT_BASE,
    URI_LEN_MAX,
    ChangeReason,
    Checkpoint,
    Epoch,
    MigrationPhase,
    OwnershipChange,
    Partition,
    PartitionId,
    PartitionStatus,
    PipelineName,
    PipelineRescale,
    Rescale,
    RescalePhase,
    WorkerState,
)

__all__ = [
    "built_table",
    "cut_answer",
    "finish_rescale",
    "in_flight",
    "record_cut",
    "rescale_result",
    "start_rescale",
    "states_built",
]

# The note of the migrations a rescale's new partition table aborts.
ABORT_NOTE = "rescale"


def in_flight(state: ClusterState) -> bool:
    """Whether a rescale is under way (started and not DONE)."""
    return state.rescale is not None and state.rescale.phase is not RescalePhase.DONE


def rescale_result(r: Rescale | PipelineRescale) -> RescaleResult:
    """Where a rescale is, as its commands answer (`default`'s and a recorded pipeline's)."""
    return RescaleResult(
        generation=r.generation, partitions=r.partitions, previous=r.previous, phase=r.phase
    )


def _moved(r: Rescale, phase: RescalePhase, command: str) -> Rejected | None:
    return lifecycle.check(
        lifecycle.RESCALE_EDGES, r.phase, phase, command, f"rescale to generation {r.generation}"
    )


def start_rescale(state: ClusterState, cmd: StartRescale) -> Result:
    if not 1 <= len(cmd.by) <= MAINTENANCE_BY_LEN_MAX:
        return rejected("invalid", f"by must be 1..{MAINTENANCE_BY_LEN_MAX} chars", "by")
    current = state.rescale
    if current is not None and current.phase is not RescalePhase.DONE:
        return rejected(
            "rescale_in_flight",
            f"the rescale to {current.partitions} partitions (generation {current.generation}) "
            f"is {current.phase.value}; one rescale at a time",
        )
    m = cmd.partitions
    if not 1 <= m <= RESCALE_PARTITIONS_MAX:
        return rejected("invalid", f"partitions must be 1..{RESCALE_PARTITIONS_MAX}", "partitions")
    if m == state.total_partitions:
        return rejected(
            "same_partition_count", f"the cluster has {m} partitions already", "partitions"
        )
    if len(state.routing) >= ROUTING_GENERATIONS_MAX:
        return rejected(
            "conflict", f"the cluster has {ROUTING_GENERATIONS_MAX} routing generations, the most"
        )
    problem = lifecycle.check(
        lifecycle.RESCALE_EDGES,
        None if current is None else current.phase,
        RescalePhase.CUTTING,
        "StartRescale",
        "the rescale",
    )
    if problem is not None:
        return problem
    state.rescale = Rescale(
        generation=len(state.routing),
        partitions=m,
        previous=state.total_partitions,
        phase=RescalePhase.CUTTING,
        cuts=(None,) * state.total_partitions,
        base_epoch=None,
        by=cmd.by,
        started_at_ms=cmd.now_ms,
        updated_at_ms=cmd.now_ms,
    )
    return Ok(value=rescale_result(state.rescale))


def cut_answer(
    part: Partition,
    recorded: Checkpoint | None,
    cmd: RecordCut | RecordPipelineCut,
    phase: RescalePhase,
) -> Result | None:
    """The answer to a cut of `part` that records nothing (None: record it). The leader
    repeats a call until its reply commits, so the same cut again is an answer; a cut at
    another epoch is fenced; one behind the partition's checkpoint would lose state."""
    n = part.partition
    if recorded is not None:
        if recorded.offset != cmd.offset:
            return rejected(
                "conflict", f"partition {n}'s cut is {recorded.offset}, not {cmd.offset}", "offset"
            )
        return Ok(value=CutResult(partition=n, status="accepted", phase=phase))
    if cmd.epoch != part.epoch:
        return Ok(value=CutResult(partition=n, status="fenced", phase=phase))
    if part.checkpoint is not None and cmd.offset < part.checkpoint.offset:
        return rejected(
            "conflict",
            f"partition {n}'s cut {cmd.offset} is behind its checkpoint {part.checkpoint.offset}",
            "offset",
        )
    return None


def record_cut(state: ClusterState, cmd: RecordCut) -> Result:
    r = state.rescale
    if len(cmd.uri) > URI_LEN_MAX or not cmd.uri:
        return rejected("invalid", f"uri must be 1..{URI_LEN_MAX} chars", "uri")
    if r is None or r.phase not in (RescalePhase.CUTTING, RescalePhase.MOVING):
        return rejected("conflict", "no rescale is cutting", "partition")
    p = cmd.partition
    if not 0 <= p < r.previous:
        return rejected("invalid", f"partition {p} is not one of {r.previous}", "partition")
    part = state.partitions[p]
    answer = cut_answer(part, r.cuts[p], cmd, r.phase)
    if answer is not None:
        return answer
    cuts = tuple(
        Checkpoint(offset=cmd.offset, uri=cmd.uri, epoch=part.epoch, at_ms=cmd.now_ms)
        if i == p
        else c
        for i, c in enumerate(r.cuts)
    )
    done = all(c is not None for c in cuts)
    phase = RescalePhase.MOVING if done else RescalePhase.CUTTING
    problem = _moved(r, phase, "RecordCut")
    if problem is not None:
        return problem
    cut = cuts[p]
    assert cut is not None
    state.put_partition(edits.accept_checkpoint(part, cut, rescaled=edits.rescaled(state, part)))
    base: Epoch | None = None
    if done:
        base = Epoch(1 + max(x.epoch for x in state.partitions))
    state.rescale = replace(r, cuts=cuts, phase=phase, base_epoch=base, updated_at_ms=cmd.now_ms)
    return Ok(value=CutResult(partition=p, status="accepted", phase=phase))


def states_built(state: ClusterState, cmd: StatesBuilt) -> Outcome:
    r = state.rescale
    if r is None or r.generation != cmd.generation:
        return rejected(
            "conflict", f"no rescale to generation {cmd.generation}", "generation"
        ), False
    moved = _moved(r, RescalePhase.HOSTING, "StatesBuilt")
    if moved is not None:
        return moved, False
    if r.base_epoch is None:  # set by the last cut, with MOVING
        return rejected("internal", "a moving rescale without a base epoch"), False
    got = sorted(c.partition for c in cmd.checkpoints)
    if got != list(range(r.partitions)):
        return rejected(
            "invalid",
            f"checkpoints must name each new partition 0..{r.partitions - 1} once",
            "checkpoints",
        ), False
    for c in cmd.checkpoints:
        if not 1 <= len(c.uri) <= URI_LEN_MAX:
            return rejected("invalid", f"uri must be 1..{URI_LEN_MAX} chars", "checkpoints"), False
    # `default`'s own: a recorded pipeline's migrations go on through `default`'s rescale.
    aborting = [m for m in state.in_flight_migrations() if m.partition < SLOT_BASE]
    ending = [m.migration_id for m in aborting]
    draining = state.workers_in(WorkerState.DRAINING)
    leaving = edits.leavers(
        state, draining, ending=ending, new_owner={PartitionId(p): None for p in range(r.previous)}
    )
    problem = edits.lifecycle_problem(
        state,
        "StatesBuilt",
        workers=((w, WorkerState.LEFT) for w in leaving),
        migrations=((mid, MigrationPhase.ABORTED) for mid in ending),
    )
    if problem is None and not lifecycle.allowed(
        lifecycle.PARTITION_EDGES, None, PartitionStatus.UNASSIGNED, "StatesBuilt"
    ):
        problem = lifecycle.check(
            lifecycle.PARTITION_EDGES, None, PartitionStatus.UNASSIGNED, "StatesBuilt", "partition"
        )
    if problem is not None:
        return problem, False
    for m in aborting:
        edits.finish_migration(state, m, MigrationPhase.ABORTED, ABORT_NOTE, cmd.now_ms)
    table = built_table(state, r, cmd.checkpoints, DEFAULT_PIPELINE, cmd.now_ms)
    state.replace_partitions(table)
    edits.leave(state, leaving, cmd.now_ms)
    state.routing = (*state.routing, r.partitions)
    state.rescale = replace(r, phase=RescalePhase.HOSTING, updated_at_ms=cmd.now_ms)
    # Every (owner, epoch) pair changed: the old table's went with it.
    return Ok(value=rescale_result(state.rescale)), True


def built_table(
    state: ClusterState,
    r: Rescale | PipelineRescale,
    checkpoints: tuple[BuiltCheckpoint, ...],
    pipeline: PipelineName,
    now_ms: int,
) -> list[Partition]:
    """A new generation's partitions, by number: unowned, each from its built checkpoint
    (written at the base epoch), at an epoch above every epoch in the table (and so above
    every table before it, each of which started above its own predecessor): no
    (partition, epoch) ever names two partitions."""
    assert r.base_epoch is not None, "set by the last cut"
    epoch = Epoch(max(r.base_epoch, 1 + max(p.epoch for p in state.partitions)))
    change = OwnershipChange(
        epoch=epoch,
        owner=None,
        reason=ChangeReason.RESCALE,
        at_ms=now_ms,
        note=f"generation {r.generation}",
    )
    return [
        Partition(
            partition=PartitionId(c.partition),
            owner=None,
            epoch=epoch,
            status=PartitionStatus.UNASSIGNED,
            migration=None,
            checkpoint=Checkpoint(offset=c.offset, uri=c.uri, epoch=r.base_epoch, at_ms=now_ms),
            history=(change,),
            pipeline=pipeline,
        )
        for c in sorted(checkpoints, key=lambda c: c.partition)
    ]


def finish_rescale(state: ClusterState, cmd: FinishRescale) -> Result:
    r = state.rescale
    if r is None or r.generation != cmd.generation:
        return rejected("conflict", f"no rescale to generation {cmd.generation}", "generation")
    if r.phase is RescalePhase.DONE:
        return Ok(value=rescale_result(r))
    problem = _moved(r, RescalePhase.DONE, "FinishRescale")
    if problem is not None:
        return problem
    waiting = sum(
        1 for p in state.partitions.of(DEFAULT_PIPELINE) if p.status is not PartitionStatus.ONLINE
    )
    if waiting:
        return rejected(
            "not_online", f"{waiting} of the {r.partitions} new partitions are not online yet"
        )
    state.rescale = replace(r, phase=RescalePhase.DONE, updated_at_ms=cmd.now_ms)
    return Ok(value=rescale_result(state.rescale))
