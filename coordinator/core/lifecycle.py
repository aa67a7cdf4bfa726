"""Lifecycles as data: the transition tables of workers, partitions, migrations, rescales and
pipelines.

Owns which state changes exist and which commands make them, in the manner of h11's
`_state.py`: the tables below are the single description that `apply` consults before
every change it makes to a worker, a partition or a migration (all of a command's changes,
before the first one), that the property and simulation tests hold every change to, and
that `docs/architecture.md` renders (`render_markdown`, checked by a test). A change that
is not in its table is an error value (`Rejected`, code `conflict`), never an exception.
An edge is (state before the command, state after it): a command that moves a record twice
(a drain that ends at once: ACTIVE, DRAINING, LEFT) is one edge (ACTIVE -> LEFT).

`None` as a source is "no record yet" (a worker's first registration, a migration's
creation); as a destination, "no record any more" (a pipeline forgotten). A self-edge
(ASSIGNING -> ASSIGNING) is a new epoch without a status change.

HandOff straight from PLANNED is deliberately NOT an edge. A PLANNED migration's source has
not been asked to release: its gate is still open, so a hand-off would start the target while
the source still processes at the old epoch (fenced, but wasted and noisy), it would skip the
source's final checkpoint (a longer replay), and it would bypass `max_concurrent_migrations`,
which counts only migrations releasing or handed off. The one way from PLANNED (or WARMING)
to HANDED_OFF is DeclareDead when the source itself is dead: there is no gate left to close.
WARMING never changes a partition: the target's warm copy holds no epoch, so every edge
into or out of it that keeps the migration alive leaves owner, epoch and status as they are.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from enum import Enum
from typing import TypeVar, cast

from coordinator.core.commands import Rejected, rejected
from coordinator.core.model import (
    MigrationPhase,
    PartitionStatus,
    PipelineState,
    RescalePhase,
    WorkerState,
)

__all__ = [
    "MIGRATION_EDGES",
    "PARTITION_EDGES",
    "PIPELINE_EDGES",
    "RESCALE_EDGES",
    "WORKER_EDGES",
    "allowed",
    "check",
    "render_markdown",
]

W = WorkerState
P = PartitionStatus
M = MigrationPhase
R = RescalePhase
L = PipelineState

S = TypeVar("S", bound=Hashable)
Edges = Mapping[tuple[S | None, S], frozenset[str]]


def _edges(*rows: tuple[object, object, str]) -> dict[tuple[object, object], frozenset[str]]:
    out: dict[tuple[object, object], set[str]] = {}
    for src, dst, commands in rows:
        out.setdefault((src, dst), set()).update(commands.split())
    return {k: frozenset(v) for k, v in out.items()}


WORKER_EDGES: Edges[WorkerState] = _edges(  # type: ignore[assignment]
    (None, W.ACTIVE, "RegisterWorker"),
    # A re-registration is a new incarnation, whatever the worker's state was.
    (W.ACTIVE, W.ACTIVE, "RegisterWorker"),
    (W.DRAINING, W.ACTIVE, "RegisterWorker"),
    (W.DEAD, W.ACTIVE, "RegisterWorker"),
    (W.LEFT, W.ACTIVE, "RegisterWorker"),
    (W.ACTIVE, W.DRAINING, "DrainWorker"),
    # A drain of a worker that owns nothing and sources nothing is over at once.
    (W.ACTIVE, W.LEFT, "DrainWorker"),
    (W.ACTIVE, W.DEAD, "DeclareDead"),
    (W.DRAINING, W.DEAD, "DeclareDead"),
    # A draining worker leaves once it owns nothing and sources nothing in flight: whichever
    # command finishes its last migration (or the drain itself, when it owns nothing); a
    # new move that supersedes its handed-off migration finishes one too. Not HandOff: the
    # source still sources the migration it hands off until that is DONE or ABORTED.
    (
        W.DRAINING,
        W.LEFT,
        "DrainWorker PartitionOnline AbortMigration DeclareDead RegisterWorker PlanMigrations",
    ),
    # A rescale's new partition table: a draining worker owns nothing of it and every
    # migration it sourced is aborted; likewise a pipeline's tear-down for one that owned
    # only that pipeline's partitions.
    (W.DRAINING, W.LEFT, "StatesBuilt PipelineStatesBuilt ForgetPipeline"),
)

PARTITION_EDGES: Edges[PartitionStatus] = _edges(  # type: ignore[assignment]
    # The first table, each rescale's new one (the old partitions go with the old table), and
    # a recorded pipeline's, at its set-up and at each of its rescales.
    (None, P.UNASSIGNED, "Bootstrap StatesBuilt ActivatePipeline PipelineStatesBuilt"),
    # A recorded pipeline's, at its tear-down or its rescale, owned or not: its numbers are
    # never reused.
    (P.UNASSIGNED, None, "ForgetPipeline PipelineStatesBuilt"),
    (P.ASSIGNING, None, "ForgetPipeline PipelineStatesBuilt"),
    (P.ONLINE, None, "ForgetPipeline PipelineStatesBuilt"),
    (P.UNASSIGNED, P.ASSIGNING, "AssignPartitions DeclareDead"),
    (P.ASSIGNING, P.ONLINE, "PartitionOnline"),
    # A new epoch (new owner, or the same owner after a restart, an abort or a fallback).
    # Not ResetPartition: an ONLINE partition's owner holds its state, a reset would lose it.
    (P.ONLINE, P.ASSIGNING, "DeclareDead HandOff RegisterWorker AbortMigration"),
    (
        P.ASSIGNING,
        P.ASSIGNING,
        "DeclareDead HandOff RegisterWorker AbortMigration FallBack ResetPartition",
    ),
    # The owner died and no ACTIVE worker is left to take it.
    (P.ONLINE, P.UNASSIGNED, "DeclareDead"),
    (P.ASSIGNING, P.UNASSIGNED, "DeclareDead"),
)

MIGRATION_EDGES: Edges[MigrationPhase] = _edges(  # type: ignore[assignment]
    (None, M.PLANNED, "PlanMigrations DrainWorker"),
    (M.PLANNED, M.RELEASING, "StartRelease"),
    # A warm hand-off: the target warms up while the source serves, then the source releases
    # (once the target is warm, or cold when its warm-up deadline passed).
    (M.PLANNED, M.WARMING, "StartWarm"),
    (M.WARMING, M.RELEASING, "StartRelease"),
    (M.RELEASING, M.HANDED_OFF, "HandOff DeclareDead"),
    # Only when the source is dead (see the module doc: not HandOff).
    (M.PLANNED, M.HANDED_OFF, "DeclareDead"),
    (M.WARMING, M.HANDED_OFF, "DeclareDead"),
    (M.HANDED_OFF, M.DONE, "PartitionOnline"),
    (M.PLANNED, M.ABORTED, "AbortMigration DeclareDead RegisterWorker"),
    # The target died or restarted while warming (its warm copy is gone): the source, which
    # never stopped serving, keeps the partition.
    (M.WARMING, M.ABORTED, "AbortMigration DeclareDead RegisterWorker"),
    (M.RELEASING, M.ABORTED, "AbortMigration DeclareDead RegisterWorker"),
    # The target owns it since the hand-off but died or never came online; or a new move of
    # the partition (PlanMigrations, DrainWorker) supersedes it.
    (M.HANDED_OFF, M.ABORTED, "AbortMigration DeclareDead PlanMigrations DrainWorker"),
    # A rescale's new partition table ends every migration of the old one, and a pipeline's
    # tear-down or rescale every migration of its partitions.
    (M.PLANNED, M.ABORTED, "StatesBuilt PipelineStatesBuilt ForgetPipeline"),
    (M.WARMING, M.ABORTED, "StatesBuilt PipelineStatesBuilt ForgetPipeline"),
    (M.RELEASING, M.ABORTED, "StatesBuilt PipelineStatesBuilt ForgetPipeline"),
    (M.HANDED_OFF, M.ABORTED, "StatesBuilt PipelineStatesBuilt ForgetPipeline"),
)

RESCALE_EDGES: Edges[RescalePhase] = _edges(  # type: ignore[assignment]
    # One rescale at a time (of `default`, and of each recorded pipeline, independently): a
    # new one only once the last is DONE.
    (None, R.CUTTING, "StartRescale StartPipelineRescale"),
    (R.DONE, R.CUTTING, "StartRescale StartPipelineRescale"),
    # Each old partition's cut; the last one ends CUTTING.
    (R.CUTTING, R.CUTTING, "RecordCut RecordPipelineCut"),
    (R.CUTTING, R.MOVING, "RecordCut RecordPipelineCut"),
    (R.MOVING, R.HOSTING, "StatesBuilt PipelineStatesBuilt"),
    (R.HOSTING, R.DONE, "FinishRescale FinishPipelineRescale"),
)

# A create and a drop are each two commits, as the seed's createTable: CreatePipeline records
# the pipeline CREATING (the commit point: any leader finishes setting it up, then
# ActivatePipeline), DropPipeline records it DROPPING (any leader finishes tearing it down,
# then ForgetPipeline removes the record). A create a leader gives up on is dropped.
PIPELINE_EDGES: Mapping[tuple[PipelineState | None, PipelineState | None], frozenset[str]] = _edges(  # type: ignore[assignment]
    (None, L.CREATING, "CreatePipeline"),
    (L.CREATING, L.ACTIVE, "ActivatePipeline"),
    (L.ACTIVE, L.PAUSED, "PausePipeline"),
    (L.PAUSED, L.ACTIVE, "ResumePipeline"),
    (L.CREATING, L.DROPPING, "DropPipeline"),
    (L.ACTIVE, L.DROPPING, "DropPipeline"),
    (L.PAUSED, L.DROPPING, "DropPipeline"),
    (L.DROPPING, None, "ForgetPipeline"),
)

TABLES: dict[str, Mapping[tuple[object, object], frozenset[str]]] = {
    "worker": WORKER_EDGES,  # type: ignore[dict-item]
    "partition": PARTITION_EDGES,  # type: ignore[dict-item]
    "migration": MIGRATION_EDGES,  # type: ignore[dict-item]
    "rescale": RESCALE_EDGES,  # type: ignore[dict-item]
    "pipeline": PIPELINE_EDGES,  # type: ignore[dict-item]
}


def allowed(
    table: Mapping[tuple[S | None, S], frozenset[str]], src: S | None, dst: S | None, command: str
) -> bool:
    # A destination may be None (the pipeline table's "gone"): looked up as any other key.
    edges = cast(Mapping[tuple[object, object], frozenset[str]], table)
    return command in edges.get((src, dst), frozenset())


def check(
    table: Mapping[tuple[S | None, S], frozenset[str]],
    src: S | None,
    dst: S | None,
    command: str,
    what: str,
    field: str | None = None,
) -> Rejected | None:
    """None when `command` may move `what` from `src` to `dst`; otherwise the rejection."""
    if allowed(table, src, dst, command):
        return None
    name = "nothing" if src is None else _value(src)
    goal = "gone" if dst is None else _value(dst)
    return rejected("conflict", f"{what} is {name}: {command} cannot make it {goal}", field)


def _value(s: object) -> str:
    return str(s.value) if isinstance(s, Enum) else str(s)


def render_markdown() -> str:
    """The tables as the markdown docs/architecture.md carries (a test keeps them equal)."""
    lines: list[str] = []
    for name, table in TABLES.items():
        lines += [f"**{name}**", "", "| from | to | commands |", "|---|---|---|"]
        for (src, dst), commands in table.items():
            frm = "(new)" if src is None else _value(src)
            to = "(gone)" if dst is None else _value(dst)
            lines.append(f"| {frm} | {to} | {', '.join(sorted(commands))} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
