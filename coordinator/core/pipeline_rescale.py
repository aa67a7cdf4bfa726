"""The apply handlers of a recorded pipeline's rescale and spec update: StartPipelineRescale,
RecordPipelineCut, PipelineStatesBuilt, FinishPipelineRescale.

Owns `Pipeline.rescale`, `Pipeline.past` and the generation fields of a record
(`first_slot`, `partitions`, `routing_generation`, the spec). A spec update is a rescale
that changes the spec (at the same count or another): the new version starts at the cut, so
no partition mixes two versions within its offsets. The steps are `default`'s
(`coordinator/core/rescale.py`), CUTTING -> MOVING -> HOSTING -> DONE, one pipeline at a
time and each pipeline independently of the others and of `default`. The new generation
gets fresh partition numbers, reserved from `slot_seq` at the start, so the old and the new
generation never share a gate, a checkpoint or a source log. Each handler validates
completely before its first change, and a step repeated by a new leader is an Ok that
changes nothing. Invariants: before HOSTING the reserved numbers are not in the table and
`len(cuts) == previous == partitions`; from HOSTING on the record's partitions are exactly
the reserved numbers, each first at an epoch above every epoch the table held.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from coordinator.core import edits, lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    CutResult,
    FinishPipelineRescale,
    Ok,
    PipelineStatesBuilt,
    RecordPipelineCut,
    Rejected,
    Result,
    StartPipelineRescale,
    rejected,
)
from coordinator.core.edits import Outcome
from coordinator.core.model import (
    INT_VALUE_MAX,
    RESCALE_PARTITIONS_MAX,
    ROUTING_GENERATIONS_MAX,
    SHA256_HEX_LEN,
    SPEC_TEXT_BYTES_MAX,
    SPEC_TEXT_BYTES_TOTAL_MAX,
    TOTAL_PARTITIONS_MAX,
    URI_LEN_MAX,
    Checkpoint,
    Epoch,
    PartitionStatus,
    Pipeline,
    PipelineRescale,
    PipelineState,
    RescalePhase,
    SlotRange,
)
from coordinator.core.pipeline_commands import (
    by_problem,
    of_incarnation,
    partitions_going,
    partitions_held,
    spec_bytes_held,
)
from coordinator.core.rescale import ABORT_NOTE, built_table, cut_answer, rescale_result

__all__ = [
    "finish_pipeline_rescale",
    "in_flight",
    "pipeline_states_built",
    "record_pipeline_cut",
    "start_pipeline_rescale",
]


def in_flight(p: Pipeline) -> bool:
    """Whether a rescale of `p` is under way (started and not DONE)."""
    return p.rescale is not None and p.rescale.phase is not RescalePhase.DONE


def _result(r: PipelineRescale) -> Ok:
    return Ok(value=rescale_result(r))


def _moved(p: Pipeline, r: PipelineRescale, phase: RescalePhase, command: str) -> Rejected | None:
    return lifecycle.check(
        lifecycle.RESCALE_EDGES,
        r.phase,
        phase,
        command,
        f"pipeline {p.name}'s rescale to generation {r.generation}",
        "name",
    )


def _of_generation(
    state: ClusterState, name: str, incarnation: int, generation: int
) -> tuple[Pipeline, PipelineRescale] | Rejected:
    """The record a later step names, and its rescale to `generation`."""
    p = _changing(state, name, incarnation)
    if isinstance(p, Rejected):
        return p
    if p.rescale is None or p.rescale.generation != generation:
        return rejected(
            "conflict", f"no rescale of pipeline {p.name} to generation {generation}", "generation"
        )
    return p, p.rescale


def _changing(state: ClusterState, name: str, incarnation: int) -> Pipeline | Rejected:
    """The record a rescale step names, unless it is being dropped (the drop ends it)."""
    p = of_incarnation(state, name, incarnation)
    if isinstance(p, Pipeline) and p.state is PipelineState.DROPPING:
        return rejected("conflict", f"pipeline {name} is being dropped", "name")
    return p


def _new_spec(p: Pipeline, cmd: StartPipelineRescale) -> tuple[str, str] | Rejected:
    """The new generation's (text, sha256): ("", the current hash) keeps the spec."""
    if not cmd.spec_text:
        if cmd.spec_sha256:
            return rejected("invalid", "spec_sha256 names no spec_text", "spec_sha256")
        return "", p.spec_sha256
    text = cmd.spec_text.encode()
    if len(text) > SPEC_TEXT_BYTES_MAX:
        return rejected("invalid", f"spec_text must be 1..{SPEC_TEXT_BYTES_MAX} bytes", "spec_text")
    if len(cmd.spec_sha256) != SHA256_HEX_LEN or hashlib.sha256(text).hexdigest() != (
        cmd.spec_sha256
    ):
        return rejected("invalid", "spec_sha256 is not the sha256 of spec_text", "spec_sha256")
    if cmd.spec_sha256 == p.spec_sha256:
        return "", p.spec_sha256  # the spec it runs: nothing new to carry
    return cmd.spec_text, cmd.spec_sha256


def _start_problem(
    state: ClusterState, p: Pipeline, cmd: StartPipelineRescale, text: str, sha: str
) -> Rejected | None:
    """Why `p` cannot start this rescale now (its state, its bounds, the cluster's)."""
    m = cmd.partitions
    if p.state is PipelineState.PAUSED:
        return rejected(
            "conflict", f"pipeline {p.name} is paused and cannot cut: resume it first", "name"
        )
    if p.state is not PipelineState.ACTIVE:
        return rejected("conflict", f"pipeline {p.name} is {p.state.value}", "name")
    if m == p.partitions and sha == p.spec_sha256:
        return rejected(
            "same_partition_count",
            f"pipeline {p.name} has {m} partitions and this spec already",
            "partitions",
        )
    if p.routing_generation + 1 >= ROUTING_GENERATIONS_MAX:
        return rejected(
            "conflict",
            f"pipeline {p.name} has {ROUTING_GENERATIONS_MAX} routing generations, the most",
            "name",
        )
    held = partitions_held(state)
    if held - p.partitions + m > TOTAL_PARTITIONS_MAX:
        return rejected(
            "conflict",
            f"the cluster's pipelines have {held} partitions; {m} instead of {p.partitions} "
            f"would pass {TOTAL_PARTITIONS_MAX}",
            "partitions",
        )
    if text and spec_bytes_held(state) + len(text.encode()) > SPEC_TEXT_BYTES_TOTAL_MAX:
        return rejected(
            "conflict",
            f"the cluster's pipelines hold {spec_bytes_held(state)} bytes of spec text; this "
            f"one would pass {SPEC_TEXT_BYTES_TOTAL_MAX}",
            "spec_text",
        )
    if state.slot_seq + m - 1 > INT_VALUE_MAX:
        return rejected("conflict", "the cluster has used every partition number", "partitions")
    return lifecycle.check(
        lifecycle.RESCALE_EDGES,
        None if p.rescale is None else p.rescale.phase,
        RescalePhase.CUTTING,
        "StartPipelineRescale",
        f"pipeline {p.name}'s rescale",
        "name",
    )


def start_pipeline_rescale(state: ClusterState, cmd: StartPipelineRescale) -> Result:
    p = by_problem(cmd.by) or _changing(state, cmd.name, cmd.incarnation)
    if isinstance(p, Rejected):
        return p
    new = _new_spec(p, cmd)
    if isinstance(new, Rejected):
        return new
    text, sha = new
    m = cmd.partitions
    if not 1 <= m <= RESCALE_PARTITIONS_MAX:
        return rejected("invalid", f"partitions must be 1..{RESCALE_PARTITIONS_MAX}", "partitions")
    r = p.rescale
    if r is not None and in_flight(p):
        if (r.partitions, r.spec_sha256) == (m, sha):
            return _result(r)  # asked again (a new leader's retry): the one under way
        return rejected(
            "rescale_in_flight",
            f"pipeline {p.name}'s rescale to {r.partitions} partitions (generation "
            f"{r.generation}) is {r.phase.value}; one rescale of a pipeline at a time",
            "name",
        )
    problem = _start_problem(state, p, cmd, text, sha)
    if problem is not None:
        return problem
    first = state.slot_seq
    state.slot_seq += m  # reserved: the worker building the states knows them before HOSTING
    rescale = PipelineRescale(
        generation=p.routing_generation + 1,
        partitions=m,
        previous=p.partitions,
        first_slot=first,
        spec_text=text,
        spec_sha256=sha,
        spec_version=p.spec_version + (1 if sha != p.spec_sha256 else 0),
        phase=RescalePhase.CUTTING,
        cuts=(None,) * p.partitions,
        base_epoch=None,
        by=cmd.by,
        started_at_ms=cmd.now_ms,
        updated_at_ms=cmd.now_ms,
    )
    state.pipelines[p.name] = replace(p, rescale=rescale, updated_at_ms=cmd.now_ms, by=cmd.by)
    return _result(rescale)


def record_pipeline_cut(state: ClusterState, cmd: RecordPipelineCut) -> Result:
    if not 1 <= len(cmd.uri) <= URI_LEN_MAX:
        return rejected("invalid", f"uri must be 1..{URI_LEN_MAX} chars", "uri")
    p = _changing(state, cmd.name, cmd.incarnation)
    if isinstance(p, Rejected):
        return p
    r = p.rescale
    if r is None or r.phase not in (RescalePhase.CUTTING, RescalePhase.MOVING):
        return rejected("conflict", f"no rescale of pipeline {p.name} is cutting", "partition")
    i = cmd.partition - p.first_slot
    part = state.partitions.get(cmd.partition)
    if not 0 <= i < r.previous or part is None or part.pipeline != p.name:
        return rejected(
            "invalid",
            f"partition {cmd.partition} is not one of pipeline {p.name}'s {r.previous}",
            "partition",
        )
    answer = cut_answer(part, r.cuts[i], cmd, r.phase)
    if answer is not None:
        return answer
    cut = Checkpoint(offset=cmd.offset, uri=cmd.uri, epoch=part.epoch, at_ms=cmd.now_ms)
    cuts = (*r.cuts[:i], cut, *r.cuts[i + 1 :])
    done = all(c is not None for c in cuts)
    phase = RescalePhase.MOVING if done else RescalePhase.CUTTING
    problem = _moved(p, r, phase, "RecordPipelineCut")
    if problem is not None:
        return problem
    state.put_partition(edits.accept_checkpoint(part, cut, rescaled=edits.rescaled(state, part)))
    # Above every epoch in the table, as `default`'s: the new generation's checkpoints are
    # written at an epoch nothing of any pipeline ever held.
    base = Epoch(1 + max(x.epoch for x in state.partitions)) if done else None
    new = replace(r, cuts=cuts, phase=phase, base_epoch=base, updated_at_ms=cmd.now_ms)
    state.pipelines[p.name] = replace(p, rescale=new)
    return Ok(value=CutResult(partition=cmd.partition, status="accepted", phase=phase))


def _built_problem(p: Pipeline, r: PipelineRescale, cmd: PipelineStatesBuilt) -> Rejected | None:
    moved = _moved(p, r, RescalePhase.HOSTING, "PipelineStatesBuilt")
    if moved is not None:
        return moved
    if r.base_epoch is None:  # set by the last cut, with MOVING
        return rejected("internal", "a moving rescale without a base epoch")
    got = sorted(c.partition for c in cmd.checkpoints)
    if got != list(range(r.first_slot, r.first_slot + r.partitions)):
        return rejected(
            "invalid",
            f"checkpoints must name each reserved partition {r.first_slot}.."
            f"{r.first_slot + r.partitions - 1} once",
            "checkpoints",
        )
    for c in cmd.checkpoints:
        if not 1 <= len(c.uri) <= URI_LEN_MAX:
            return rejected("invalid", f"uri must be 1..{URI_LEN_MAX} chars", "checkpoints")
    return None


def pipeline_states_built(state: ClusterState, cmd: PipelineStatesBuilt) -> Outcome:
    """The swap, in one commit: the old generation's partitions leave the table (their
    in-flight migrations ABORTED, a DRAINING worker left with nothing LEFT), the reserved
    numbers join it UNASSIGNED, each with its starting checkpoint, and the record becomes
    the new generation's. The generation grows when an owned partition went."""
    found = _of_generation(state, cmd.name, cmd.incarnation, cmd.generation)
    if isinstance(found, Rejected):
        return found, False
    p, r = found
    if r.phase in (RescalePhase.HOSTING, RescalePhase.DONE):
        return _result(r), False  # built already: a new leader's retry
    problem = _built_problem(p, r, cmd)
    if problem is not None:
        return problem, False
    going = partitions_going(state, p, "PipelineStatesBuilt", ABORT_NOTE)
    if isinstance(going, Rejected):
        return going, False
    problem = lifecycle.check(
        lifecycle.PARTITION_EDGES,
        None,
        PartitionStatus.UNASSIGNED,
        "PipelineStatesBuilt",
        f"pipeline {p.name}",
        "name",
    )
    if problem is not None:
        return problem, False
    going.end_migrations(state, cmd.now_ms)
    table = built_table(state, r, cmd.checkpoints, p.name, cmd.now_ms)
    state.swap_partitions(p.name, table)
    edits.leave(state, going.leaving, cmd.now_ms)
    hosting = replace(r, phase=RescalePhase.HOSTING, spec_text="", updated_at_ms=cmd.now_ms)
    state.pipelines[p.name] = replace(
        p,
        first_slot=r.first_slot,
        partitions=r.partitions,
        routing_generation=r.generation,
        spec_text=r.spec_text or p.spec_text,
        spec_sha256=r.spec_sha256,
        spec_version=r.spec_version,
        past=(
            *p.past,
            SlotRange(
                first_slot=p.first_slot,
                partitions=p.partitions,
                routing_generation=p.routing_generation,
            ),
        ),
        rescale=hosting,
        updated_at_ms=cmd.now_ms,
    )
    return _result(hosting), going.owned


def finish_pipeline_rescale(state: ClusterState, cmd: FinishPipelineRescale) -> Result:
    found = _of_generation(state, cmd.name, cmd.incarnation, cmd.generation)
    if isinstance(found, Rejected):
        return found
    p, r = found
    if r.phase is RescalePhase.DONE:
        return _result(r)
    problem = _moved(p, r, RescalePhase.DONE, "FinishPipelineRescale")
    if problem is not None:
        return problem
    waiting = sum(1 for x in state.partitions.of(p.name) if x.status is not PartitionStatus.ONLINE)
    if waiting:
        return rejected(
            "not_online",
            f"{waiting} of pipeline {p.name}'s {r.partitions} new partitions are not online yet",
        )
    done = replace(r, phase=RescalePhase.DONE, updated_at_ms=cmd.now_ms)
    state.pipelines[p.name] = replace(p, rescale=done, updated_at_ms=cmd.now_ms)
    return _result(done)
