"""The pipelines a cluster runs, as a reader sees them: the records, and `default`.

Owns how the implicit pipeline appears. A cluster made by a release before pipeline records
(or one that never created a pipeline) has one pipeline, the one its partition table and
routing generations are: it is shown as `default`, synthesized from the state on every read
and never stored, so an upgraded cluster's state and snapshots keep their bytes and its
partitions, epochs and routing stay exactly as they were. CreatePipeline refuses the name.
Invariant: `pipelines_view` lists `default` first once the cluster is bootstrapped, then
every record by name, and every name once. It also owns how a pipeline's own partition
numbers (0 .. partitions - 1, what operators and routes speak) map to the numbers the table
carries them under (`partition_numbers`), so every surface maps them alike, and every
number a record was ever given (`numbers_ever`), which its producers, its batch job and a
purge read.
"""

from __future__ import annotations

from coordinator.core.cluster import ClusterState
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    DEFAULT_PIPELINE_SETTINGS,
    SLOT_BASE,
    Pipeline,
    PipelineName,
    PipelineState,
    RescalePhase,
)

__all__ = [
    "default_pipeline",
    "numbers_ever",
    "partition_numbers",
    "pipeline_named",
    "pipelines_view",
]


def default_pipeline(state: ClusterState) -> Pipeline | None:
    """The cluster's own pipeline, or None before Bootstrap. It has no spec (its workers run
    the built-in aggregation: spec version 0, no text), selects every worker, keeps the
    worker's default settings, and is ACTIVE: pausing or dropping it needs a record."""
    if state.total_partitions == 0:
        return None
    return Pipeline(
        name=DEFAULT_PIPELINE,
        incarnation=0,
        spec_text="",
        spec_sha256="",
        spec_version=0,
        partitions=state.total_partitions,
        routing_generation=state.routing_generation,
        pool=(),
        settings=DEFAULT_PIPELINE_SETTINGS,
        state=PipelineState.ACTIVE,
        purge=False,
        # Unknown: the state keeps no time of the Bootstrap (histories are bounded).
        created_at_ms=0,
        updated_at_ms=0,
        by="",
    )


def pipelines_view(state: ClusterState) -> tuple[Pipeline, ...]:
    """Every pipeline the cluster runs: `default` (once bootstrapped), then the records by
    name."""
    own = default_pipeline(state)
    records = tuple(state.pipelines[name] for name in sorted(state.pipelines))
    return records if own is None else (own, *records)


def pipeline_named(state: ClusterState, name: str) -> Pipeline | None:
    """The pipeline called `name` (`default` included), or None."""
    if name == DEFAULT_PIPELINE:
        return default_pipeline(state)
    return state.pipelines.get(PipelineName(name))


def partition_numbers(state: ClusterState, name: str) -> range | None:
    """The numbers pipeline `name`'s partitions are carried under, indexed by its own: its
    partition p is ``numbers[p]`` and table number n is its ``numbers.index(n)`` when
    ``n in numbers``. None: no such pipeline.

    `default`'s are every number below SLOT_BASE: its numbers are its own, reused by every
    routing generation, so a migration of an earlier generation still reads as `default`'s
    (whether p is a partition now is the table's to say). A record's are its first_slot and
    up, one per partition, never reused; empty until it is set up (CREATING), its partitions
    not in the table yet.
    """
    if name == DEFAULT_PIPELINE:
        return range(SLOT_BASE)
    p = state.pipelines.get(PipelineName(name))
    if p is None:
        return None
    if p.first_slot == 0:
        return range(0)
    return range(p.first_slot, p.first_slot + p.partitions)


def numbers_ever(p: Pipeline) -> tuple[range, ...]:
    """Every number record `p` was given, one range per generation, oldest first: each
    earlier generation's (its source logs and checkpoints may still be in the store), the
    current one's once set up, and those an unfinished rescale reserved (its build may have
    written under them before it was dropped)."""
    out = [range(g.first_slot, g.first_slot + g.partitions) for g in p.past]
    if p.first_slot:
        out.append(range(p.first_slot, p.first_slot + p.partitions))
    r = p.rescale
    if r is not None and r.phase in (RescalePhase.CUTTING, RescalePhase.MOVING):
        out.append(range(r.first_slot, r.first_slot + r.partitions))
    return tuple(out)
