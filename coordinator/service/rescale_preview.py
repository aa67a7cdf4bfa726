"""A rescale's dry run: what changing the partition count would cost, from the routing
generations alone (docs/pipeline.md "Rescaling").

`preview` is pure: it reads the partition counts of the generations so far and the count
asked for, and proposes nothing, so `POST /v1/admin/rescale` with `dry_run` changes no
state. It refuses exactly what `StartRescale` refuses of the count (the same codes and
field, hence the same statuses), so a dry run that passes names a rescale the cluster would
start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.core.model import ROUTING_GENERATIONS_MAX
from shared.errors import RequestError, UnavailableError
from shared.partition_map import feeders_max, moved_fraction
from shared.routing import KEY_GROUPS, Routing

__all__ = ["RescalePreview", "preview"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RescalePreview:
    """The numbers a dry run shows: the counts, the new generation, the share of keys whose
    partition number changes, the most old partitions any new one is built from, how many
    cut checkpoints the state move reads (every old partition's) and builds (every new
    partition's)."""

    previous: int
    partitions: int
    generation: int
    moved_fraction: float
    feeders_max: int
    checkpoints_read: int
    partitions_built: int


def preview(routing: Sequence[int], partitions: int) -> RescalePreview:
    """The dry run of rescaling a cluster whose generations have the counts `routing` (index
    = generation, the current one last) to `partitions`; refused as StartRescale refuses
    (RequestError, or UnavailableError while the cluster is not bootstrapped)."""
    if not routing:
        raise UnavailableError("the cluster is not bootstrapped yet", code="not_bootstrapped")
    if not 1 <= partitions <= KEY_GROUPS:
        raise RequestError(f"partitions must be 1..{KEY_GROUPS}", field="partitions")
    current = routing[-1]
    if partitions == current:
        raise RequestError(
            f"the cluster already has {current} partitions",
            code="same_partition_count",
            field="partitions",
        )
    if len(routing) >= ROUTING_GENERATIONS_MAX:
        raise RequestError(
            f"the cluster has {ROUTING_GENERATIONS_MAX} routing generations, the most",
            code="conflict",
        )
    old = Routing(generation=len(routing) - 1, partitions=current)
    new = Routing(generation=len(routing), partitions=partitions)
    return RescalePreview(
        previous=current,
        partitions=partitions,
        generation=new.generation,
        moved_fraction=float(moved_fraction(old, new)),
        feeders_max=feeders_max(old, new),
        checkpoints_read=current,
        partitions_built=partitions,
    )
