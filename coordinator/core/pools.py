"""Where a recorded pipeline's partitions may go: its pool, each pipeline spread, slots.

Owns the placement of recorded pipelines' partitions (`default`'s are `placement.py`'s).
A partition of pipeline P goes only to a worker the caller found eligible (ACTIVE and
heard from) that declared a profile (it runs recorded pipelines) carrying every label of
P's pool, and whose slots are not all taken: never to another worker, so a pool nobody
serves leaves its partitions UNASSIGNED and `unplaceable` says why (a tag with no
instance must not fall back to every instance, as Helix's once did). Among the workers
that may take it, it goes to the one with the fewest of P's partitions (each pipeline
spread across its pool first, the seed's rule), then the most free slots, then by id.
Invariants: the choice is a function of the state and the eligible list alone; no worker
is given more partitions of recorded pipelines than its slots; at most
PIPELINE_ASSIGNMENTS_PER_PASS_MAX partitions of one pipeline are placed per call, so one
pipeline's thousands of partitions do not make another's wait for a long pass. A call
reads the recorded partitions once and each pool's workers once, so its cost follows the
partitions and the workers, not how many pipelines they belong to (`python -m bench
pipelines`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Move
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    SLOT_BASE,
    Label,
    MigrationPhase,
    Partition,
    PartitionId,
    Pipeline,
    PipelineName,
    PipelineState,
    WorkerId,
)

__all__ = ["PIPELINE_ASSIGNMENTS_PER_PASS_MAX", "outside", "place", "unplaceable", "waiting"]

PIPELINE_ASSIGNMENTS_PER_PASS_MAX = 1_024
HANDED_OFF = MigrationPhase.HANDED_OFF  # its target owns the partition already
# Pipelines whose partitions the planner places: a CREATING one has none yet, a DROPPING one
# is being torn down.
PLACED_STATES = frozenset({PipelineState.ACTIVE, PipelineState.PAUSED})


def _profiled(state: ClusterState, eligible: Iterable[WorkerId]) -> list[WorkerId]:
    """The eligible workers that declared a profile: the only ones that run recorded
    pipelines."""
    return [w for w in eligible if (rec := state.workers.get(w)) is not None and rec.profile]


def _slots(state: ClusterState, w: WorkerId) -> int:
    profile = state.workers[w].profile
    return 0 if profile is None else profile.slots


def members(state: ClusterState, p: Pipeline, eligible: Iterable[WorkerId]) -> list[WorkerId]:
    """The eligible workers in `p`'s pool, by id."""
    out = []
    for w in eligible:
        rec = state.workers.get(w)
        if rec is not None and rec.profile is not None and rec.profile.carries(p.pool):
            out.append(w)
    return sorted(out)


def _recorded(state: ClusterState) -> Iterator[Partition]:
    """Every recorded pipeline's partitions in ascending number: the table's records after
    all of `default`'s (partition_table.py), read in one pass rather than one per pipeline,
    whose fixed cost a thousand pipelines would pay a thousand times."""
    table = state.partitions
    return itertools.islice(table, table.count_of(DEFAULT_PIPELINE), None)


def _used(
    state: ClusterState, workers: Iterable[WorkerId], pipelines: Collection[PipelineName] = ()
) -> tuple[Counter[WorkerId], Counter[tuple[WorkerId, PipelineName]]]:
    """Per worker, the partitions of recorded pipelines it holds or is about to (the target
    of a move not yet handed off), in all and for each of `pipelines`: what its slots are
    spent on. Read from the recorded pipelines' partitions, not the workers' owned sets,
    which also hold every partition of `default` they own. Only the pipelines asked about
    are counted per worker: counting all would cost a key per worker and pipeline."""
    total: Counter[WorkerId] = Counter()
    each: Counter[tuple[WorkerId, PipelineName]] = Counter()
    wanted = set(workers)
    if not wanted:
        return total, each
    held = [(x.owner, x.pipeline) for x in _recorded(state) if x.owner in wanted]
    coming = [
        (m.target, state.partitions[m.partition].pipeline)
        for m in state.in_flight_migrations()
        if m.target in wanted and m.partition >= SLOT_BASE and m.phase is not HANDED_OFF
    ]
    for pairs in (held, coming):
        total.update(w for w, _ in pairs)
        if pipelines:
            each.update(pair for pair in pairs if pair[1] in pipelines)
    return total, each


def place(
    state: ClusterState, eligible: Sequence[WorkerId], parts: Sequence[Partition]
) -> dict[PartitionId, WorkerId]:
    """An owner for each of `parts` (recorded pipelines' partitions, in the order given) that
    its pool has room for; a partition no worker may take is left out."""
    if not parts:
        return {}
    # Members by pool, not by pipeline: a dead worker's partitions may belong to as many
    # pipelines as it held, mostly of a few pools, and each pool's scan of every candidate
    # is made once (a pool is stored sorted, so equal selectors are equal keys).
    pool_of: dict[tuple[Label, ...], list[WorkerId]] = {}
    out: dict[PartitionId, WorkerId] = {}
    candidates = _profiled(state, eligible)
    total, each = _used(state, candidates, {part.pipeline for part in parts})
    slots = {w: _slots(state, w) for w in candidates}
    placed: Counter[PipelineName] = Counter()
    for part in parts:
        name = part.pipeline
        p = state.pipelines.get(name)
        if p is None or p.state not in PLACED_STATES:
            continue  # `default`'s, or a pipeline being set up or torn down
        if placed[name] >= PIPELINE_ASSIGNMENTS_PER_PASS_MAX:
            continue
        pool = pool_of.get(p.pool)
        if pool is None:
            pool = pool_of[p.pool] = members(state, p, candidates)
        best: tuple[int, int, str] | None = None
        for w in pool:
            free = slots[w] - total[w]
            if free <= 0:
                continue
            key = (each[(w, name)], -free, w)
            if best is None or key < best:
                best = key
        if best is None:
            continue
        w = WorkerId(best[2])
        out[part.partition] = w
        total[w] += 1
        each[(w, name)] += 1
        placed[name] += 1
    return out


def waiting(state: ClusterState) -> list[Partition]:
    """The UNASSIGNED partitions of the pipelines the planner places, by pipeline name, then
    number. One pass over the recorded partitions: a settled cluster finds none, whatever
    the number of pipelines they are split into."""
    placed = {name for name, p in state.pipelines.items() if p.state in PLACED_STATES}
    if not placed:
        return []
    out = [x for x in _recorded(state) if x.owner is None and x.pipeline in placed]
    out.sort(key=lambda x: (x.pipeline, x.partition))
    return out


def unplaceable(state: ClusterState, p: Pipeline, eligible: Sequence[WorkerId]) -> str:
    """Why `p`'s unassigned partitions have nowhere to go now, or "" (they have, or there
    are none)."""
    if p.state not in PLACED_STATES or all(
        x.owner is not None for x in state.partitions.of(p.name)
    ):
        return ""
    profiled = _profiled(state, eligible)
    if not profiled:
        return "no eligible worker runs recorded pipelines (none declared labels and slots)"
    pool = members(state, p, profiled)
    if not pool:
        wanted = ", ".join(f"{x.key}={x.value}" for x in p.pool)
        return f"no eligible worker carries the pool's labels {wanted}"
    total, _ = _used(state, pool)
    if all(_slots(state, w) <= total[w] for w in pool):
        return f"every slot of the pool's {len(pool)} workers is taken"
    return ""


def outside(state: ClusterState, moves: Sequence[Move]) -> tuple[int, str] | None:
    """The first of an operator's moves that would take a recorded pipeline's partition out
    of its pool or past its target's slots (index, why), or None."""
    total, _ = _used(state, {mv.target for mv in moves})
    for i, mv in enumerate(moves):
        part = state.partitions[mv.partition]
        p = state.pipelines.get(part.pipeline)
        if p is None:
            continue  # `default`'s
        rec = state.workers.get(mv.target)
        if rec is None or rec.profile is None or not rec.profile.carries(p.pool):
            return i, f"{mv.target} is not in pipeline {p.name}'s pool"
        total[mv.target] += 1
        if total[mv.target] > rec.profile.slots:
            return i, f"{mv.target} has no free slot ({rec.profile.slots})"
    return None
