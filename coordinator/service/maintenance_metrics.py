"""Maintenance mode as metrics: whether it is on, and how long it has left by its record.

Computed from the replicated state when /metrics is scraped, like every cluster figure
(coordinator/service/metrics.py); the remaining time is shown to operators, never decided on.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from coordinator.core.state import ClusterState

__all__ = ["maintenance_metrics"]


def maintenance_metrics(state: ClusterState, wall_ms: int) -> Iterator[Metric]:
    record = state.maintenance
    yield GaugeMetricFamily(
        "ripple_maintenance_mode",
        "1 while maintenance mode is on (no automatic balance moves; recovery goes on)",
        value=0 if record is None else 1,
    )
    # Shown to operators, not a decision: the leader times the end on its monotonic clock.
    left_s = 0.0
    if record is not None and record.until_ms is not None:
        left_s = max(0.0, (record.until_ms - wall_ms) / 1000)
    yield GaugeMetricFamily(
        "ripple_maintenance_remaining_seconds",
        "Seconds until maintenance mode ends by itself, by the recorded end (0: off, or on "
        "until turned off)",
        value=left_s,
    )
