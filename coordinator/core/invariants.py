"""The safety invariants of the replicated state, as pure functions that return violations.

Owns what must hold of every applied `ClusterState`, of every step from one applied state to
the next, and across a whole run, so that the simulation, the Hypothesis state machine and
the planner's tests check one set of rules. Each check returns its violations as strings
(none: it holds) and never raises: the caller adds its context (a seed, a replica, a
scenario line) and decides what a violation costs.

- `state_violations(state)`: one live owner per partition, migrations and partitions agree
  and name workers the state holds, the fallback chain is ordered and bounded, the routing
  generations and the rescale agree with the partition table, the derived indices equal
  a scan, and the pipeline records hold theirs (`coordinator/core/pipeline_invariants.py`);
- `step_violations(before, state, command)`: every change is an edge of
  `coordinator/core/lifecycle.py` (a rescale's new partition table is a table of new
  partitions), epochs and the generation only grow, an epoch keeps its
  owner, a checkpoint is accepted only at its partition's current epoch (and, reported, only
  from its owner), a rescaled table's partitions keep their builds as their chains' floors,
  only RetireWorkers removes a worker (a DEAD or LEFT one, below the
  incarnation floor after it), a new worker registers above the floor, and every pipeline
  record's change is an edge of its table, its spec version never going back;
- `Ledger`: across a run and any number of replicas, epochs only grow on each replica, no
  (partition, epoch) ever has two owners, no (worker, incarnation) is issued twice (a
  retired id comes back above every incarnation it had), and neither the pipeline counter
  nor a pipeline's spec version goes back;
- `gate_violations`: no two workers hold an open gate for one partition at one epoch;
- `settled_violations(state)`: once settled, every migration ended DONE or ABORTED, a
  rescale ended DONE, and the owned counts add up to every partition, each ONLINE.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.core import lifecycle
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    Bootstrap,
    Command,
    RecordCheckpoints,
    RetireWorkers,
    StatesBuilt,
)
from coordinator.core.edits import rescaled
from coordinator.core.model import (
    CHECKPOINTS_KEPT_MAX,
    DEFAULT_PIPELINE,
    DEPARTED_WORKER_STATES,
    OWNING_WORKER_STATES,
    SLOT_BASE,
    TERMINAL_PHASES,
    Checkpoint,
    Epoch,
    MigrationId,
    MigrationPhase,
    PartitionId,
    PartitionStatus,
    PipelineName,
    RescalePhase,
    WorkerId,
    WorkerState,
)
from coordinator.core.pipeline_invariants import (
    PipelineView,
    pipeline_state_violations,
    pipeline_step_violations,
    placement_violations,
    views,
)

__all__ = [
    "Ledger",
    "View",
    "gate_violations",
    "settled_violations",
    "state_violations",
    "step_violations",
    "view",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionView:
    status: PartitionStatus
    epoch: Epoch
    owner: WorkerId | None
    # The accepted checkpoints it holds (current first), to tell a newly accepted one.
    checkpoints: tuple[Checkpoint, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """What the step checks compare of the state before a command (the records are frozen,
    so holding them costs a pointer each)."""

    workers: dict[WorkerId, tuple[WorkerState, int]]
    partitions: dict[PartitionId, PartitionView]
    migrations: dict[MigrationId, MigrationPhase]
    generation: int
    incarnation_floor: int = 0
    routing: tuple[int, ...] = ()
    rescale_phase: RescalePhase | None = None
    pipelines: dict[PipelineName, PipelineView] = field(default_factory=dict)
    pipeline_seq: int = 0


def view(state: ClusterState) -> View:
    return View(
        workers={w.worker_id: (w.state, w.incarnation) for w in state.workers.values()},
        partitions={
            p.partition: PartitionView(
                status=p.status,
                epoch=p.epoch,
                owner=p.owner,
                checkpoints=(p.checkpoint, *p.earlier) if p.checkpoint else p.earlier,
            )
            for p in state.partitions
        },
        migrations={m.migration_id: m.phase for m in state.migrations.values()},
        generation=state.generation,
        incarnation_floor=state.incarnation_floor,
        routing=state.routing,
        rescale_phase=None if state.rescale is None else state.rescale.phase,
        pipelines=views(state),
        pipeline_seq=state.pipeline_seq,
    )


# --- one state -----------------------------------------------------------------------------------


def state_violations(state: ClusterState) -> list[str]:
    out: list[str] = []
    owned: dict[WorkerId, list[int]] = {}
    for p in state.partitions:
        if (p.owner is None) != (p.status is PartitionStatus.UNASSIGNED):
            out.append(f"p{p.partition} is {p.status.value} with owner {p.owner}")
        if p.owner is not None:
            owned.setdefault(p.owner, []).append(p.partition)
            w = state.workers.get(p.owner)
            if w is None or w.state not in OWNING_WORKER_STATES:
                out.append(f"p{p.partition} owned by {p.owner}, which is not active/draining")
        if p.migration is not None:
            m = state.migrations.get(p.migration)
            if m is None or m.phase in TERMINAL_PHASES or m.partition != p.partition:
                out.append(f"p{p.partition} points at {p.migration}, not its migration in flight")
        out += _chain_violations(p.partition, p.checkpoint, p.earlier, rescaled(state, p))
        if p.stuck and p.status is PartitionStatus.ONLINE:
            out.append(f"p{p.partition} is online and marked stuck")
    out += _routing_violations(state)
    for m in state.in_flight_migrations():
        for wid in (m.source, m.target):
            if wid not in state.workers:
                out.append(f"{m.migration_id} in flight names {wid}, which the state lacks")
        if m.partition not in state.partitions:
            out.append(f"{m.migration_id} in flight names p{m.partition}, beyond the table")
            continue
        part = state.partitions[m.partition]
        if part.migration != m.migration_id:
            out.append(f"{m.migration_id} in flight but p{m.partition} points at {part.migration}")
        # Until the hand-off the source owns the partition; from it on, the target does.
        holder = m.target if m.phase is MigrationPhase.HANDED_OFF else m.source
        if part.owner != holder:
            out.append(f"{m.migration_id} is {m.phase.value} but p{m.partition} is {part.owner}'s")
    out += pipeline_state_violations(state)
    return out + _index_violations(state, owned)


def _routing_violations(state: ClusterState) -> list[str]:
    """The routing generations end at the partition count; the rescale's cuts are one per
    old partition, all of them from MOVING on; its generation is routing's last from
    HOSTING on and the next one before."""
    out = []
    total = state.total_partitions
    numbers = [p.partition for p in state.partitions.of(DEFAULT_PIPELINE)]
    if numbers != list(range(total)):
        out.append(f"{DEFAULT_PIPELINE}'s partitions are not 0..{total - 1}: {numbers[:8]}...")
    if state.routing[-1:] != ((total,) if total else ()):
        out.append(f"routing {list(state.routing)} does not end at total_partitions {total}")
    r = state.rescale
    if r is None:
        return out
    if len(r.cuts) != r.previous:
        out.append(f"rescale has {len(r.cuts)} cuts of {r.previous} old partitions")
    cut = r.cuts_done()
    if r.phase is RescalePhase.CUTTING:
        if r.base_epoch is not None or cut == r.previous:
            out.append(f"rescale is CUTTING with {cut} of {r.previous} cuts and a base epoch")
    elif cut != r.previous or r.base_epoch is None:
        out.append(f"rescale is {r.phase.value} with {cut} of {r.previous} cuts")
    before = r.phase in (RescalePhase.CUTTING, RescalePhase.MOVING)
    if before and (len(state.routing) != r.generation or total != r.previous):
        out.append(f"rescale to {r.generation} is {r.phase.value}, routing {list(state.routing)}")
    if not before and (len(state.routing) != r.generation + 1 or total != r.partitions):
        out.append(f"rescale to {r.generation} is {r.phase.value}, routing {list(state.routing)}")
    return out


def _chain_violations(
    p: int, current: Checkpoint | None, earlier: tuple[Checkpoint, ...], rescaled: bool
) -> list[str]:
    """The fallback chain: at most CHECKPOINTS_KEPT_MAX earlier ones, strictly older offsets,
    none without a current one; in a rescaled table the floor (its build, the oldest) may
    also sit at the offset of the current one right before it."""
    out = []
    if len(earlier) > CHECKPOINTS_KEPT_MAX:
        out.append(f"p{p} keeps {len(earlier)} earlier checkpoints")
    if current is None and earlier:
        out.append(f"p{p} keeps earlier checkpoints without a current one")
    offsets = [c.offset for c in (current, *earlier) if c is not None]
    beside_floor = rescaled and len(offsets) == 2 and offsets[0] == offsets[1]
    if not beside_floor and any(a <= b for a, b in itertools.pairwise(offsets)):
        out.append(f"p{p} checkpoint offsets {offsets} are not newest first")
    return out


def _index_violations(state: ClusterState, owned: dict[WorkerId, list[int]]) -> list[str]:
    """The indices `apply` keeps beside the records (the planner reads them every tick) equal
    a scan of the records."""
    out = []
    for w in state.workers.values():
        mine = owned.get(w.worker_id, [])
        if state.owned_by(w.worker_id) != mine:
            out.append(f"owner index of {w.worker_id} {state.owned_by(w.worker_id)} != {mine}")
        fresh = tuple((p, state.partitions[p].epoch) for p in mine)
        if state.assignment_of(w.worker_id) != fresh:
            out.append(f"cached assignment of {w.worker_id} is stale")
    for ws in WorkerState:
        scanned = sorted(w.worker_id for w in state.workers.values() if w.state is ws)
        if state.workers_in(ws) != scanned:
            out.append(f"index of {ws.value} workers {state.workers_in(ws)} != {scanned}")
    departed = {w.worker_id for w in state.workers.values() if w.state in DEPARTED_WORKER_STATES}
    if set(state.departed()) != departed:
        out.append("departed index disagrees with the DEAD and LEFT workers")
    in_flight = [m for m in state.migrations.values() if m.phase not in TERMINAL_PHASES]
    if state.in_flight_migrations() != in_flight:
        out.append("in-flight index disagrees with the migrations it indexes")
    return out


# --- one step ------------------------------------------------------------------------------------


def step_violations(before: View, state: ClusterState, command: Command) -> list[str]:
    """What applying `command` to the state `before` describes did that it must not have."""
    name = type(command).__name__
    # A rescale's StatesBuilt replaces the table: its partitions are new (at epochs above
    # every old one), so only the epochs are compared with the old table's.
    changed = state.routing != before.routing
    new_table = changed and bool(before.routing)
    first = not before.routing and isinstance(command, Bootstrap)
    out = []
    if changed and not first and not isinstance(command, StatesBuilt):
        out.append(f"{name} changed the routing generations to {list(state.routing)}")
    out += _lifecycle_violations(before, state, name, new_table)
    out += _retirement_violations(before, state, command)
    out += pipeline_step_violations(before.pipelines, before.pipeline_seq, state, name)
    if state.generation < before.generation:
        out.append(f"{name} took the generation back to {state.generation}")
    if new_table:
        top = max((p.epoch for p in before.partitions.values()), default=0)
        out += [
            f"{name} made p{p.partition} at epoch {p.epoch}, not above the old table's {top}"
            for p in state.partitions.of(DEFAULT_PIPELINE)
            if p.epoch <= top
        ]
    # A rescaled table's oldest checkpoint is its build: the floor every command keeps.
    for p in state.partitions:
        was = before.partitions.get(p.partition)
        if was is None or (new_table and p.pipeline == DEFAULT_PIPELINE):
            continue  # created by this command
        if p.epoch < was.epoch:
            out.append(f"{name} took p{p.partition} epoch back to {p.epoch}")
        elif p.epoch == was.epoch and p.owner != was.owner:
            out.append(f"p{p.partition} epoch {p.epoch} has two owners: {was.owner} and {p.owner}")
        floor = was.checkpoints[-1] if rescaled(state, p) and was.checkpoints else None
        if floor is not None and floor not in (p.checkpoint, *p.earlier):
            out.append(f"{name} dropped p{p.partition}'s floor {was.checkpoints[-1].uri}")
        ck = p.checkpoint
        if ck is None or ck in was.checkpoints:
            continue
        if ck.epoch != was.epoch:
            out.append(
                f"checkpoint p{p.partition} accepted at stale epoch {ck.epoch} "
                f"(current {was.epoch}, owner {was.owner})"
            )
        elif isinstance(command, RecordCheckpoints) and command.worker_id != was.owner:
            out.append(
                f"checkpoint p{p.partition} accepted from {command.worker_id}, not its owner"
            )
    return out


def _retirement_violations(before: View, state: ClusterState, command: Command) -> list[str]:
    """Workers leave the state only by RetireWorkers, DEAD or LEFT, under the floor after it;
    a worker new to the state registers above the floor it found."""
    name = type(command).__name__
    out = []
    if state.incarnation_floor < before.incarnation_floor:
        out.append(f"{name} lowered the incarnation floor to {state.incarnation_floor}")
    for wid, (was, incarnation) in before.workers.items():
        if wid in state.workers:
            continue
        if not isinstance(command, RetireWorkers):
            out.append(f"{name} removed worker {wid}")
        if was not in DEPARTED_WORKER_STATES:
            out.append(f"{name} retired worker {wid}, which was {was.value}")
        if incarnation > state.incarnation_floor:
            out.append(f"retired {wid} incarnation {incarnation} is above the floor")
    for w in state.workers.values():
        if w.worker_id not in before.workers and w.incarnation <= before.incarnation_floor:
            out.append(
                f"{w.worker_id} registered at incarnation {w.incarnation}, not above the "
                f"floor {before.incarnation_floor}"
            )
    return out


def _lifecycle_violations(
    before: View, state: ClusterState, command: str, new_table: bool
) -> list[str]:
    """Every worker, partition, migration and rescale change is an edge of its table, taken
    as (state before the command, state after it); a new epoch at the same status is a
    self-edge; every partition of a new table is a new record."""
    out = []
    for w in state.workers.values():
        old = before.workers.get(w.worker_id)
        if old == (w.state, w.incarnation):
            continue
        src = None if old is None else old[0]
        if not lifecycle.allowed(lifecycle.WORKER_EDGES, src, w.state, command):
            out.append(
                f"{command} moved worker {w.worker_id} {src} -> {w.state}: not in lifecycle.py"
            )
    for p in state.partitions:
        old_p = None
        if not (new_table and p.pipeline == DEFAULT_PIPELINE):
            old_p = before.partitions.get(p.partition)
        if old_p is not None and (old_p.status, old_p.epoch) == (p.status, p.epoch):
            continue
        src_p = None if old_p is None else old_p.status
        if not lifecycle.allowed(lifecycle.PARTITION_EDGES, src_p, p.status, command):
            out.append(
                f"{command} moved partition {p.partition} {src_p} -> {p.status}: "
                "not in lifecycle.py"
            )
    for number, was in before.partitions.items():
        if number in state.partitions or (new_table and number < SLOT_BASE):
            continue  # kept, or `default`'s old table that a rescale replaced
        if not lifecycle.allowed(lifecycle.PARTITION_EDGES, was.status, None, command):
            out.append(
                f"{command} removed partition {number} ({was.status.value}): not in lifecycle.py"
            )
    for m in state.migrations.values():
        old_m = before.migrations.get(m.migration_id)
        if old_m != m.phase and not lifecycle.allowed(
            lifecycle.MIGRATION_EDGES, old_m, m.phase, command
        ):
            out.append(
                f"{command} moved migration {m.migration_id} {old_m} -> {m.phase}: "
                "not in lifecycle.py"
            )
    r = state.rescale
    if (
        r is not None
        and r.phase != before.rescale_phase
        and not lifecycle.allowed(lifecycle.RESCALE_EDGES, before.rescale_phase, r.phase, command)
    ):
        out.append(
            f"{command} moved the rescale {before.rescale_phase} -> {r.phase}: not in lifecycle.py"
        )
    return out


# --- a run ---------------------------------------------------------------------------------------


class Ledger:
    """Across a run: each replica's epochs and generation only grow, and every (partition,
    epoch) any replica ever held names one owner (the epoch is the fencing token, so a second
    owner at it could write beside the first)."""

    def __init__(self) -> None:
        self.max_epoch: dict[str, dict[int, int]] = {}
        self.generation: dict[str, int] = {}
        self.owner_at: dict[tuple[int, int], WorkerId | None] = {}
        # Per replica, each worker id's highest incarnation seen, retired or not.
        self.incarnations: dict[str, dict[WorkerId, int]] = {}
        # Per replica, the ids seen and since retired (absent from the state).
        self.retired: dict[str, set[WorkerId]] = {}
        # Per replica, the pipeline counter and each (pipeline, incarnation)'s spec version.
        self.pipeline_seq: dict[str, int] = {}
        # Per replica, the partition number counter (it only grows: numbers are never reused).
        self.slot_seq: dict[str, int] = {}
        self.spec_versions: dict[str, dict[tuple[PipelineName, int], int]] = {}

    def observe(self, replica: str, state: ClusterState) -> list[str]:
        out = []
        if state.generation < self.generation.get(replica, 0):
            out.append(f"{replica} generation went back to {state.generation}")
        self.generation[replica] = state.generation
        epochs = self.max_epoch.setdefault(replica, {})
        for p in state.partitions:
            if p.epoch < epochs.get(p.partition, 0):
                out.append(f"{replica} p{p.partition} epoch went back to {p.epoch}")
            epochs[p.partition] = p.epoch
            owner = self.owner_at.setdefault((p.partition, p.epoch), p.owner)
            if owner != p.owner:
                out.append(f"p{p.partition} epoch {p.epoch} has two owners: {owner} and {p.owner}")
        seen = self.incarnations.setdefault(replica, {})
        gone = self.retired.setdefault(replica, set())
        gone.update(w for w in seen if w not in state.workers)
        for w in state.workers.values():
            had = seen.get(w.worker_id, 0)
            back = w.worker_id in gone
            if w.incarnation < had or (back and w.incarnation == had):
                out.append(
                    f"{replica} {w.worker_id} is at incarnation {w.incarnation} after {had}"
                    f"{' and its retirement' if back else ''}: an old token could act again"
                )
            seen[w.worker_id] = w.incarnation
            gone.discard(w.worker_id)
        return out + self._pipelines(replica, state)

    def _pipelines(self, replica: str, state: ClusterState) -> list[str]:
        out = []
        if state.pipeline_seq < self.pipeline_seq.get(replica, 0):
            out.append(f"{replica} pipeline counter went back to {state.pipeline_seq}")
        self.pipeline_seq[replica] = state.pipeline_seq
        if state.slot_seq < self.slot_seq.get(replica, 0):
            out.append(f"{replica} partition number counter went back to {state.slot_seq}")
        self.slot_seq[replica] = state.slot_seq
        versions = self.spec_versions.setdefault(replica, {})
        for p in state.pipelines.values():
            key = (p.name, p.incarnation)
            if p.spec_version < versions.get(key, 0):
                out.append(
                    f"{replica} pipeline {p.name} spec version went back to {p.spec_version}"
                )
            versions[key] = p.spec_version
        return out


def gate_violations(open_gates: Iterable[tuple[str, int, int]]) -> list[str]:
    """`open_gates`: (worker, partition, epoch) for every open gate of every live worker."""
    holders: dict[tuple[int, int], str] = {}
    out = []
    for worker, p, epoch in open_gates:
        other = holders.setdefault((p, epoch), worker)
        if other != worker:
            out.append(f"p{p} epoch {epoch} open on both {other} and {worker}")
    return out


def settled_violations(state: ClusterState) -> list[str]:
    """What must hold once faults healed and the cluster settled."""
    out = [
        f"migration {m.migration_id} ended {m.phase.value}"
        for m in state.migrations.values()
        if m.phase not in TERMINAL_PHASES
    ]
    # `default`'s only: a recorded pipeline's partitions are not placed yet
    # (stages.assign_unassigned), so they stay UNASSIGNED however long the cluster settles.
    out += [
        f"p{p.partition} is {p.status.value}"
        for p in state.partitions.of(DEFAULT_PIPELINE)
        if p.status is not PartitionStatus.ONLINE
    ]
    r = state.rescale
    if r is not None and r.phase is not RescalePhase.DONE:
        out.append(f"the rescale to generation {r.generation} ended {r.phase.value}")
    owned = sum(1 for w in state.workers for p in state.owned_by(w) if p < SLOT_BASE)
    if owned != state.total_partitions:
        out.append(f"workers own {owned} partitions of {state.total_partitions}")
    return out + placement_violations(state)
