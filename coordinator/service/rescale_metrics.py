"""The rescale's series on /metrics, read from the node's replicated state at scrape time
(docs/pipeline.md "Rescaling"): the routing generation, the newest rescale's phase (one
series per phase, 1 for the current one, all 0 when the cluster never rescaled) and how many
cuts it has recorded. Every node exports them: they are state, not the leader's memory.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from coordinator.core.model import RescalePhase
from coordinator.core.state import ClusterState

__all__ = ["rescale_metrics"]


def rescale_metrics(state: ClusterState) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "ripple_routing_generation",
        "The current routing generation (0 until the first rescale's new partitions exist)",
        value=state.routing_generation,
    )
    r = state.rescale
    phase = GaugeMetricFamily(
        "ripple_rescale_phase",
        "1 for the newest rescale's phase (all 0: the cluster never rescaled)",
        labels=["phase"],
    )
    for p in RescalePhase:
        phase.add_metric([p.value], 1 if r is not None and r.phase is p else 0)
    yield phase
    yield GaugeMetricFamily(
        "ripple_rescale_cuts_done",
        "Old partitions whose cut checkpoint the newest rescale has recorded",
        value=0 if r is None else sum(1 for c in r.cuts if c is not None),
    )
