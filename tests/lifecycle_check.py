"""Holds a state machine to coordinator/core/lifecycle.py: every worker, partition and
migration change one applied command makes must be an edge of its table.

Used by the simulation (every applied entry of every seed) and the planner scenario files.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core import lifecycle
from coordinator.core.model import MigrationPhase, PartitionStatus, WorkerState
from coordinator.core.state import ClusterState


@dataclass(frozen=True, slots=True)
class LifecycleView:
    workers: dict[str, tuple[WorkerState, int]]
    partitions: list[tuple[PartitionStatus, int]]
    migrations: dict[str, MigrationPhase]


def lifecycle_view(state: ClusterState) -> LifecycleView:
    return LifecycleView(
        workers={w.worker_id: (w.state, w.incarnation) for w in state.workers.values()},
        partitions=[(p.status, p.epoch) for p in state.partitions],
        migrations={m.migration_id: m.phase for m in state.migrations.values()},
    )


def lifecycle_problem(before: LifecycleView, state: ClusterState, command: str) -> str | None:
    """What `command` changed that its table does not allow, or None."""
    after = lifecycle_view(state)
    for wid, (w_state, incarnation) in after.workers.items():
        old = before.workers.get(wid)
        if old == (w_state, incarnation):
            continue
        src = None if old is None else old[0]
        if not lifecycle.allowed(lifecycle.WORKER_EDGES, src, w_state, command):
            return f"{command} moved worker {wid} {src} -> {w_state}: not in lifecycle.py"
    for p, now in enumerate(after.partitions):
        old_p = before.partitions[p] if p < len(before.partitions) else None
        if old_p == now:
            continue
        src_p = None if old_p is None else old_p[0]
        if not lifecycle.allowed(lifecycle.PARTITION_EDGES, src_p, now[0], command):
            return f"{command} moved partition {p} {src_p} -> {now[0]}: not in lifecycle.py"
    for mid, phase in after.migrations.items():
        old_m = before.migrations.get(mid)
        if old_m != phase and not lifecycle.allowed(
            lifecycle.MIGRATION_EDGES, old_m, phase, command
        ):
            return f"{command} moved migration {mid} {old_m} -> {phase}: not in lifecycle.py"
    return None
