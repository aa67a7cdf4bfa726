"""The safety invariants of the pipeline records, as pure functions that return violations.

Owns what must hold of `ClusterState.pipelines` in one state and from one state to the next;
`coordinator/core/invariants.py` adds these to its own checks, so the property tests and the
simulation hold every applied command to them. Each returns strings (none: it holds) and
never raises.

- one state: at most PIPELINES_MAX records, each under its own valid name and never
  `default`, within its partition and settings bounds, of an incarnation the counter has
  issued, no two of one incarnation; a record set up (`first_slot`) has exactly its
  partitions in the table, numbered first_slot .. first_slot + partitions - 1 below the
  number counter, one not set up has none, and the table holds no partition of a pipeline
  without a record but `default`'s; a record's earlier generations are one per generation
  before its own, none of their numbers in the table; a rescale has one cut per old
  partition (all of them from MOVING on), and its reserved numbers are below the counter
  and not in the table before HOSTING, exactly the record's from HOSTING on;
- one step: every record's change is an edge of the pipeline lifecycle table (a record that
  leaves the state, an edge to "gone"), the incarnation counter and a record's spec version
  never go back, a record keeps its incarnation, and a new record's incarnation is new; a
  rescale's change is an edge of the rescale table, and a record's new generation starts at
  epochs above every epoch of its old one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core import lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    PIPELINE_PARTITIONS_MAX,
    PIPELINES_MAX,
    ROUTING_GENERATIONS_MAX,
    SLOT_BASE,
    Pipeline,
    PipelineName,
    PipelineState,
    RescalePhase,
    WorkerId,
    valid_id,
)
from coordinator.core.pipeline_commands import settings_problem

__all__ = [
    "PipelineView",
    "pipeline_state_violations",
    "pipeline_step_violations",
    "placement_violations",
    "views",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineView:
    """What the step checks compare of a record before a command."""

    state: PipelineState
    incarnation: int
    spec_version: int
    routing_generation: int = 0
    rescale_phase: RescalePhase | None = None
    epoch_max: int = 0  # the highest epoch of its partitions


def views(state: ClusterState) -> dict[PipelineName, PipelineView]:
    return {
        p.name: PipelineView(
            state=p.state,
            incarnation=p.incarnation,
            spec_version=p.spec_version,
            routing_generation=p.routing_generation,
            rescale_phase=None if p.rescale is None else p.rescale.phase,
            epoch_max=max((x.epoch for x in state.partitions.of(p.name)), default=0),
        )
        for p in state.pipelines.values()
    }


def pipeline_state_violations(state: ClusterState) -> list[str]:
    out = []
    if len(state.pipelines) > PIPELINES_MAX:
        out.append(f"{len(state.pipelines)} pipelines, above {PIPELINES_MAX}")
    incarnations: dict[int, str] = {}
    for name, p in state.pipelines.items():
        if p.name != name or not valid_id(name) or name == DEFAULT_PIPELINE:
            out.append(f"pipeline record {p.name} is held under the name {name!r}")
        if not 1 <= p.partitions <= PIPELINE_PARTITIONS_MAX:
            out.append(f"pipeline {name} has {p.partitions} partitions")
        if settings_problem(p.settings) is not None:
            out.append(f"pipeline {name}'s settings are out of bounds: {p.settings}")
        if not 1 <= p.incarnation <= state.pipeline_seq:
            out.append(f"pipeline {name} is incarnation {p.incarnation} of {state.pipeline_seq}")
        other = incarnations.setdefault(p.incarnation, name)
        if other != name:
            out.append(f"pipelines {other} and {name} are both incarnation {p.incarnation}")
        if p.spec_version < 1:
            out.append(f"pipeline {name} is at spec version {p.spec_version}")
        out += _slot_violations(state, p)
        out += _generation_violations(state, p)
    if state.slot_seq < SLOT_BASE:
        out.append(f"the partition number counter is {state.slot_seq}, below {SLOT_BASE}")
    for part in state.partitions:
        if part.pipeline != DEFAULT_PIPELINE and part.pipeline not in state.pipelines:
            out.append(f"p{part.partition} is of {part.pipeline}, which has no record")
    return out


def _slot_violations(state: ClusterState, p: Pipeline) -> list[str]:
    numbers = [x.partition for x in state.partitions.of(p.name)]
    if p.first_slot == 0:
        if p.state not in (PipelineState.CREATING, PipelineState.DROPPING) or numbers:
            return [f"pipeline {p.name} is {p.state.value} with partitions {numbers[:4]}..."]
        return []
    want = list(range(p.first_slot, p.first_slot + p.partitions))
    out = []
    if p.first_slot < SLOT_BASE or p.first_slot + p.partitions > state.slot_seq:
        out.append(f"pipeline {p.name}'s partitions start at {p.first_slot}, not a slot made")
    if numbers != want:
        out.append(f"pipeline {p.name} holds partitions {numbers[:4]}..., not {want[:4]}...")
    return out


def _generation_violations(state: ClusterState, p: Pipeline) -> list[str]:
    out = []
    if len(p.past) != p.routing_generation or p.routing_generation >= ROUTING_GENERATIONS_MAX:
        out.append(f"pipeline {p.name} is at generation {p.routing_generation}, {len(p.past)} past")
    for g, old in enumerate(p.past):
        held = [
            n
            for n in range(old.first_slot, old.first_slot + old.partitions)
            if n in state.partitions
        ]
        if old.routing_generation != g or held:
            out.append(f"pipeline {p.name}'s generation {g} ({old}) holds partitions {held[:4]}")
    r = p.rescale
    if r is None:
        return out
    cut = r.cuts_done()
    before = r.phase in (RescalePhase.CUTTING, RescalePhase.MOVING)
    if len(r.cuts) != r.previous or (r.phase is not RescalePhase.CUTTING and cut != r.previous):
        out.append(
            f"pipeline {p.name}'s rescale is {r.phase.value} with {cut} of {r.previous} cuts"
        )
    if (r.base_epoch is None) != (r.phase is RescalePhase.CUTTING):
        out.append(f"pipeline {p.name}'s rescale is {r.phase.value}, base epoch {r.base_epoch}")
    reserved = range(r.first_slot, r.first_slot + r.partitions)
    if r.first_slot < SLOT_BASE or reserved.stop > state.slot_seq:
        out.append(f"pipeline {p.name}'s rescale reserved {reserved}, not below the counter")
    if before:
        if any(n in state.partitions for n in reserved):
            out.append(f"pipeline {p.name}'s reserved {reserved} is in the table before HOSTING")
        if (r.generation, r.previous) != (p.routing_generation + 1, p.partitions):
            out.append(f"pipeline {p.name}'s rescale to {r.generation} is {r.phase.value}")
    elif (r.generation, r.first_slot, r.partitions, r.spec_sha256) != (
        p.routing_generation,
        p.first_slot,
        p.partitions,
        p.spec_sha256,
    ):
        out.append(f"pipeline {p.name}'s rescale to {r.generation} is {r.phase.value}, not its own")
    return out


def pipeline_step_violations(
    before: Mapping[PipelineName, PipelineView],
    seq_before: int,
    state: ClusterState,
    command: str,
) -> list[str]:
    """What `command` did to the pipeline records (`before`, counter `seq_before`) that it
    must not have."""
    out = []
    if state.pipeline_seq < seq_before:
        out.append(f"{command} took the pipeline counter back to {state.pipeline_seq}")
    for name, was in before.items():
        if name not in state.pipelines and not lifecycle.allowed(
            lifecycle.PIPELINE_EDGES, was.state, None, command
        ):
            out.append(
                f"{command} removed pipeline {name} ({was.state.value}): not in lifecycle.py"
            )
    for p in state.pipelines.values():
        old = before.get(p.name)
        if old is None:
            if p.incarnation <= seq_before:
                out.append(f"{command} made pipeline {p.name} at old incarnation {p.incarnation}")
        elif p.incarnation != old.incarnation:
            out.append(f"{command} changed pipeline {p.name}'s incarnation to {p.incarnation}")
        elif p.spec_version < old.spec_version:
            out.append(f"{command} took pipeline {p.name}'s spec version back to {p.spec_version}")
        else:
            out += _rescale_step_violations(old, state, p, command)
        src = None if old is None else old.state
        if src != p.state and not lifecycle.allowed(
            lifecycle.PIPELINE_EDGES, src, p.state, command
        ):
            out.append(f"{command} moved pipeline {p.name} {src} -> {p.state}: not in lifecycle.py")
    return out


def placement_violations(state: ClusterState) -> list[str]:
    """What must hold of where recorded pipelines' partitions are once a cluster settled
    (a re-registered owner has no profile until it declares one again, so not after every
    command): each is owned by a worker whose profile carries its pool, and no worker owns
    more of them than its slots."""
    out = []
    held: dict[str, int] = {}
    for part in state.partitions:
        if part.pipeline == DEFAULT_PIPELINE or part.owner is None:
            continue
        p = state.pipelines.get(part.pipeline)
        w = state.workers.get(part.owner)
        profile = None if w is None else w.profile
        if p is not None and (profile is None or not profile.carries(p.pool)):
            out.append(f"p{part.partition} of {part.pipeline} is on {part.owner}, outside its pool")
        held[part.owner] = held.get(part.owner, 0) + 1
    for wid, n in held.items():
        w = state.workers.get(WorkerId(wid))
        if w is not None and w.profile is not None and n > w.profile.slots:
            out.append(f"{wid} holds {n} partitions of recorded pipelines, over {w.profile.slots}")
    return out


def _rescale_step_violations(
    old: PipelineView, state: ClusterState, p: Pipeline, command: str
) -> list[str]:
    out = []
    phase = None if p.rescale is None else p.rescale.phase
    if phase != old.rescale_phase and not lifecycle.allowed(
        lifecycle.RESCALE_EDGES, old.rescale_phase, phase, command
    ):
        out.append(f"{command} moved pipeline {p.name}'s rescale {old.rescale_phase} -> {phase}")
    if p.routing_generation < old.routing_generation:
        out.append(f"{command} took pipeline {p.name}'s generation back")
    elif p.routing_generation > old.routing_generation:
        low = min((x.epoch for x in state.partitions.of(p.name)), default=old.epoch_max + 1)
        if low <= old.epoch_max:
            out.append(
                f"{command} started pipeline {p.name}'s generation {p.routing_generation} at "
                f"epoch {low}, not above its old one's {old.epoch_max}"
            )
    return out
