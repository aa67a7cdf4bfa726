"""The node's disk as Prometheus sees it: its syncs, their time, and what a failing or slow
disk did to the node.

Owns the families read from the replicated log's disk figures at scrape time
(`ReplicatedLog.sync_stats`, `status`, `slow_disk_step_downs`, `dump_failures`), so the
alerts on a halted node and on slow-disk step-downs (docs/alerting.md) read one module.
Invariant: every family is present on every scrape, 0 when nothing happened, so an alert
never waits for a series to appear.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from replication.log import SYNC_SECONDS_BUCKETS, ReplicatedLog, SyncStats

__all__ = ["HALT_REASONS", "disk_metrics"]

# Why a node left Raft (`RaftStatus.halt_kind`): a command it cannot apply, a failed sync,
# a full disk.
HALT_REASONS = ("machine", "sync_failed", "disk_full")


def disk_metrics(log: ReplicatedLog) -> Iterator[Metric]:
    """Every disk family of the node behind `log`."""
    status = log.status()
    yield from _syncs(log.sync_stats())
    halted = GaugeMetricFamily(
        "ripple_node_halted",
        "1 when this node left Raft, by reason: machine (a command it cannot apply), "
        "sync_failed (a sync of a Raft file failed), disk_full (ENOSPC or EDQUOT); restart it",
        labels=["reason"],
    )
    for reason in HALT_REASONS:
        halted.add_metric([reason], 1 if status.halt_kind == reason else 0)
    yield halted
    yield GaugeMetricFamily(
        "ripple_apply_halted",
        "1 when this node stopped applying entries (a command set it does not speak) and left Raft",
        value=1 if status.halt_kind == "machine" else 0,
    )
    yield GaugeMetricFamily(
        "ripple_raft_disk_slow",
        "1 while the median of this node's last journal syncs is over leader_sync_slow_ms "
        "(it does not stand for leader)",
        value=1 if status.disk_slow else 0,
    )
    yield CounterMetricFamily(
        "ripple_raft_slow_disk_step_downs",
        "Leaderships this node handed to a follower because its journal syncs were slow",
        value=log.slow_disk_step_downs,
    )
    yield CounterMetricFamily(
        "ripple_raft_dump_failures",
        "Log compaction dumps that failed to be written (each tried again after a backoff)",
        value=log.dump_failures,
    )


def _syncs(stats: SyncStats) -> Iterator[Metric]:
    """The node's syncs (empty with `fsync = false`): the journal's on the write path, as a
    histogram like etcd's `etcd_disk_wal_fsync_duration_seconds`, and every synced write by
    file."""
    latency = HistogramMetricFamily(
        "ripple_raft_journal_sync_duration_seconds",
        "Time of each journal sync before an entry counts as acknowledged by this node",
    )
    bounds = [*map(floatToGoString, SYNC_SECONDS_BUCKETS), "+Inf"]
    cumulative, buckets = 0, []
    for bound, n in zip(bounds, stats.journal_sync_counts, strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    latency.add_metric([], buckets, stats.journal_sync_s_total)
    yield latency
    syncs = CounterMetricFamily(
        "ripple_raft_syncs",
        "Synced writes: journal syncs, term/vote records, dumps received, journals rewritten",
        labels=["file"],
    )
    syncs.add_metric(["journal"], stats.journal_syncs)
    syncs.add_metric(["meta"], stats.meta_syncs)
    syncs.add_metric(["dump"], stats.dump_syncs)
    syncs.add_metric(["journal_rewrite"], stats.journal_rewrites)
    yield syncs
