"""Prometheus metrics of one coordinator node, in a registry of its own (tests run several
nodes in one process).

Two kinds, kept apart on purpose:
- Events (proposals, redirects, HTTP requests, host calls, leader changes, duty-loop errors)
  are counters bumped where they happen (the hot ones in
  coordinator/service/event_metrics.py).
- Everything that describes the cluster (Raft position, partitions by status, workers by
  state and liveness, migrations by phase, checkpoint age, pipeline lag) is computed from
  the node's state when /metrics is scraped, by `ClusterCollector`: no per-request
  bookkeeping that could drift from the state it describes.

Leader-only figures (liveness, lag) come from what the leader hears in heartbeats; a
follower does not export them at all rather than export stale or empty values.
Per-partition series exist only while the partition table (every pipeline's partitions)
holds at most `metrics_partition_series_max` (a setting): past that, only the aggregates are
exported. The partition-state families carry a `pipeline` label (`default` for the
cluster's own) and per-partition series number each partition as its pipeline does
(`partition_numbers`), so `pipeline` x `status` is bounded by the pipelines a state may hold
(PIPELINES_MAX records, plus `default`) and `pipeline` x `partition` by that setting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from coordinator.config import ClusterConfig
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    MigrationPhase,
    Partition,
    PartitionStatus,
    WorkerState,
)
from coordinator.core.pipelines import partition_numbers
from coordinator.core.state import ClusterState
from coordinator.core.versions import VersionRange
from coordinator.service.disk_metrics import disk_metrics
from coordinator.service.event_metrics import FrontDoorCounts, ProposalStats, RequestCounts
from coordinator.service.maintenance_metrics import maintenance_metrics
from coordinator.service.rescale_metrics import rescale_metrics
from replication.log import MachineRead, ReplicatedLog
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["ClusterCollector", "Metrics", "PartitionProgress", "ProgressReports", "ScrapedNode"]

ROLES = ("leader", "follower", "candidate")
LIVENESS = ("alive", "suspected", "restarting", "dead", "unknown")
IN_FLIGHT_PHASES = tuple(
    p for p in MigrationPhase if p not in (MigrationPhase.DONE, MigrationPhase.ABORTED)
)


class ScrapedNode(Protocol):
    """What a scrape reads of the node (`CoordinatorNode` fits): its log's Raft figures, its
    applied state, the versions it speaks and the settings that bound the series. Declared
    here, not imported from coordinator/service/node.py, which holds a `Metrics`."""

    @property
    def log(self) -> ReplicatedLog: ...

    @property
    def config(self) -> ClusterConfig: ...

    @property
    def speaks(self) -> VersionRange: ...

    @property
    def is_ready_leader(self) -> bool: ...

    def read(self) -> MachineRead[ClusterState]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProgress:
    """What a worker's heartbeat says about one partition it processes."""

    epoch: int
    offset: int  # the next source offset the worker will process
    source_end: int | None  # the source log's end as the worker last saw it


class ProgressReports:
    """Per-partition progress from heartbeats, on the leader, in memory (not replicated).

    Each heartbeat replaces its worker's whole entry, so the size is bounded by workers x
    the partitions one heartbeat may report. A report counts only while it is about the
    partition's current owner at its current epoch (a worker that lost the partition, or
    died, stops counting without any clean-up)."""

    def __init__(self) -> None:
        self._by_worker: dict[str, dict[int, PartitionProgress]] = {}

    def record(self, worker_id: str, reports: dict[int, PartitionProgress]) -> None:
        self._by_worker[worker_id] = reports

    def of(self, partition: int, owner: str | None, epoch: int) -> PartitionProgress | None:
        if owner is None:
            return None
        report = self._by_worker.get(owner, {}).get(partition)
        return report if report is not None and report.epoch == epoch else None

    def clear(self) -> None:
        self._by_worker.clear()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.progress = ProgressReports()
        self.proposals = ProposalStats()
        r.register(self.proposals)
        self.redirects = Counter("ripple_redirects", "Writes redirected to the leader", registry=r)
        self.requests = RequestCounts()
        r.register(self.requests)
        self.front_door = FrontDoorCounts()
        r.register(self.front_door)
        self.workers_declared_dead = Counter(
            "ripple_workers_declared_dead",
            "Workers declared dead by this node as leader",
            registry=r,
        )
        self.host_calls = Counter(
            "ripple_host_calls", "Host-partition calls to workers", ["outcome"], registry=r
        )
        self.checkpoints = Counter(
            "ripple_checkpoint_reports", "Checkpoint reports by status", ["status"], registry=r
        )
        # Bound once: labels() takes a lock and builds a key, on every checkpoint ack
        # otherwise.
        self._checkpoints_accepted = self.checkpoints.labels(status="accepted")
        self._checkpoints_fenced = self.checkpoints.labels(status="fenced")
        # Each leader change is exactly one node becoming the ready leader: summed over the
        # nodes, this counts the cluster's leader changes.
        self.leader_changes = Counter(
            "ripple_leader_changes",
            "Times this node became the ready Raft leader (sum over nodes: leader changes)",
            registry=r,
        )
        # Incremented by the leader's duty loop for every step that raised (and was survived).
        self.duty_errors = Counter(
            "ripple_duty_errors",
            "Leader duty-loop steps that raised, by step",
            ["step"],
            registry=r,
        )
        # Committed by the leader when a host call keeps failing with checkpoint_unavailable:
        # to an older checkpoint, to a full replay, or to a `stuck` partition.
        self.fallbacks = Counter(
            "ripple_partition_fallbacks",
            "Fallbacks committed for partitions whose checkpoint could not be loaded, by target",
            ["to"],
            registry=r,
        )
        # Committed by the leader when a move's source is asked to release: after its target
        # warmed up (warm), gave up warming (refused, timed_out) or without a warm-up (cold).
        self.releases = Counter(
            "ripple_migration_releases",
            "Moves whose source was asked to release, by how the target's warm-up ended",
            ["warm_up"],
            registry=r,
        )
        self._led_term = -1
        self._collector: ClusterCollector | None = None

    def checkpoints_reported(self, accepted: int, fenced: int) -> None:
        """One checkpoint ack's entries by status, each status added once per ack."""
        if accepted:
            self._checkpoints_accepted.inc(accepted)
        if fenced:
            self._checkpoints_fenced.inc(fenced)

    def proposed(self, command: str, outcome: str, seconds: float) -> None:
        """Count one proposal of `command` (a command class name) with its outcome and time."""
        self.proposals.add(command, outcome, seconds)

    def attach(
        self,
        node: ScrapedNode,
        liveness_of: Callable[[str], str | None],
        membership_changing: Callable[[], bool] = lambda: False,
    ) -> None:
        """Export the node's state at scrape time (called when the app is built; a second
        call replaces the first collector instead of exporting every family twice)."""
        if self._collector is not None:
            self.registry.unregister(self._collector)
        self._collector = ClusterCollector(node, liveness_of, self.progress, membership_changing)
        self.registry.register(self._collector)

    def on_role(self, node: ScrapedNode) -> None:
        """Role-change listener: count each term in which this node became the ready leader."""
        if node.is_ready_leader:
            term = node.log.status().term
            if term != self._led_term:
                self._led_term = term
                self.leader_changes.inc()
        else:
            self.progress.clear()  # only a leader hears heartbeats; a later term starts empty

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))


def _membership(node: ScrapedNode, changing: bool) -> Iterator[Metric]:
    """The voter set as this node's log says, and whether a change is under way."""
    membership = node.log.membership()
    yield GaugeMetricFamily(
        "ripple_raft_voters", "Voters in this node's view of the log", value=len(membership.voters)
    )
    yield GaugeMetricFamily(
        "ripple_raft_voter",
        "1 when this node votes (0 while it joins, and once removed)",
        value=1 if membership.voter else 0,
    )
    yield GaugeMetricFamily(
        "ripple_raft_membership_change_in_flight",
        "1 while a membership change runs on this leader or a membership entry is uncommitted",
        value=1 if changing or membership.pending_index is not None else 0,
    )
    links = _gauge("ripple_raft_links", "Open Raft links by transport version", ["version"])
    versions = list(node.log.link_versions().values())
    for version in sorted(set(versions)):
        links.add_metric([str(version)], versions.count(version))
    yield links


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class ClusterCollector(Collector):
    """Reads the node's Raft status and replicated state on every scrape."""

    def __init__(
        self,
        node: ScrapedNode,
        liveness_of: Callable[[str], str | None],
        progress: ProgressReports,
        membership_changing: Callable[[], bool],
    ) -> None:
        self.node = node
        self.liveness_of = liveness_of
        self.progress = progress
        self.membership_changing = membership_changing

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: the families depend on the role and the state

    def collect(self) -> Iterator[Metric]:
        node = self.node
        status = node.log.status()
        role = _gauge("ripple_raft_role", "1 for this node's current Raft role", ["role"])
        for name in ROLES:
            role.add_metric([name], 1 if name == status.role.value else 0)
        yield role
        yield GaugeMetricFamily("ripple_raft_term", "Current Raft term", value=status.term)
        yield GaugeMetricFamily(
            "ripple_raft_commit_index", "Raft commit index", value=status.commit_index
        )
        yield GaugeMetricFamily(
            "ripple_raft_applied_index", "Last applied index", value=status.applied_index
        )
        yield GaugeMetricFamily(
            "ripple_raft_leader_known",
            "1 when this node knows a leader (0: no leader from here)",
            value=1 if status.leader_addr is not None else 0,
        )
        yield from _membership(node, self.membership_changing())
        refused = CounterMetricFamily(
            "ripple_raft_refused_connections",
            "Raft-port connections refused or closed by the transport, by reason",
            labels=["reason"],
        )
        for reason, total in node.log.refused_connections().items():
            refused.add_metric([reason], total)
        yield refused
        yield CounterMetricFamily(
            "ripple_raft_guard_ticks",
            "Raft ticks the stall guard ran because the event loop was busy for 50 ms or more",
            value=node.log.guard_ticks,
        )
        group = node.log.group_commit_stats()
        yield CounterMetricFamily(
            "ripple_raft_entries_proposed",
            "Log entries this node proposed for writes (one per batch under group commit)",
            value=group.entries,
        )
        yield CounterMetricFamily(
            "ripple_raft_commands_proposed",
            "Commands carried by those entries (divided by entries: commands per entry)",
            value=group.proposals,
        )
        yield CounterMetricFamily(
            "ripple_proposals_queue_full",
            "Writes refused with 503 because the proposal queue was at its bound",
            value=group.queue_full,
        )
        yield from disk_metrics(node.log)
        leader = node.is_ready_leader
        # An age shown to operators, not a decision: checkpoint times are wall-clock stamps.
        wall_ms = SYSTEM_CLOCK.wall_ms()
        with node.read() as state:
            yield from self._versions(state)
            yield from maintenance_metrics(state, wall_ms)
            yield from rescale_metrics(state)
            yield from self._state(state, wall_ms)
            if leader:
                yield from self._leader_view(state)

    def _versions(self, state: ClusterState) -> Iterator[Metric]:
        versions = _gauge(
            "ripple_command_set_version",
            "The cluster's finalized command-set version (this node's state) and the range "
            "this node speaks",
            ["kind"],
        )
        versions.add_metric(["finalized"], state.finalized_version)
        versions.add_metric(["speaks_min"], self.node.speaks.min_version)
        versions.add_metric(["speaks_max"], self.node.speaks.max_version)
        yield versions
        backup = state.last_backup
        yield GaugeMetricFamily(
            "ripple_last_backup_timestamp_seconds",
            "When the newest recorded backup was taken (seconds since the epoch; 0: none)",
            value=0 if backup is None else backup.created_at_ms / 1000,
        )

    def _state(self, state: ClusterState, wall_ms: int) -> Iterator[Metric]:
        parts = _gauge(
            "ripple_partitions",
            "Partitions by pipeline and status (this node's state)",
            ["pipeline", "status"],
        )
        stuck = _gauge(
            "ripple_partitions_stuck",
            "Partitions with no lossless fallback left, by pipeline "
            "(docs/runbooks/stuck-partition.md)",
            ["pipeline"],
        )
        for pipeline in _pipelines(state):
            by_status = {s.value: 0 for s in PartitionStatus}
            stuck_count = 0
            for p in state.partitions.of(pipeline):
                by_status[p.status.value] += 1
                stuck_count += bool(p.stuck)
            for name, count in sorted(by_status.items()):
                parts.add_metric([pipeline, name], count)
            stuck.add_metric([pipeline], stuck_count)
        yield parts
        yield stuck

        by_state = {s.value: 0 for s in WorkerState}
        for w in state.workers.values():
            by_state[w.state.value] += 1
        workers = _gauge("ripple_workers", "Registered workers by state", ["state"])
        for name, count in sorted(by_state.items()):
            workers.add_metric([name], count)
        yield workers

        by_phase = {p.value: 0 for p in IN_FLIGHT_PHASES}
        for mig in state.migrations.values():
            if mig.phase.value in by_phase:
                by_phase[mig.phase.value] += 1
        migs = _gauge(
            "ripple_migrations_in_flight", "Migrations not yet DONE or ABORTED", ["phase"]
        )
        for name, count in sorted(by_phase.items()):
            migs.add_metric([name], count)
        yield migs

        cfg = self.node.config
        bounds = _gauge(
            "ripple_warmups_max",
            "Warm-ups in flight allowed, in the cluster and into one worker (0: moves are cold)",
            ["scope"],
        )
        bounds.add_metric(["cluster"], cfg.warmups_max if cfg.warm_moves else 0)
        bounds.add_metric(["per_worker"], cfg.warmups_per_worker_max if cfg.warm_moves else 0)
        yield bounds

        ages = {
            p.partition: max(0.0, (wall_ms - p.checkpoint.at_ms) / 1000)
            for p in state.partitions.of(DEFAULT_PIPELINE)
            if p.checkpoint is not None
        }
        yield GaugeMetricFamily(
            "ripple_checkpoint_age_max_seconds",
            "Age of the oldest accepted checkpoint over `default`'s partitions that have one",
            value=max(ages.values(), default=0.0),
        )
        yield GaugeMetricFamily(
            "ripple_partitions_without_checkpoint",
            "`default`'s partitions with no accepted checkpoint yet (a new owner replays from "
            "offset 0)",
            value=state.partitions.count_of(DEFAULT_PIPELINE) - len(ages),
        )
        if self._per_partition(state):
            per = _gauge(
                "ripple_partition_checkpoint_age_seconds",
                "Age of the partition's last accepted checkpoint",
                ["pipeline", "partition"],
            )
            for pipeline, local, p in _numbered(state):
                if p.checkpoint is not None:
                    age = max(0.0, (wall_ms - p.checkpoint.at_ms) / 1000)
                    per.add_metric([pipeline, str(local)], age)
            yield per

    def _leader_view(self, state: ClusterState) -> Iterator[Metric]:
        by_liveness = dict.fromkeys(LIVENESS, 0)
        for wid, w in state.workers.items():
            if w.state in (WorkerState.ACTIVE, WorkerState.DRAINING):
                by_liveness[self.liveness_of(wid) or "unknown"] += 1
        live = _gauge(
            "ripple_workers_by_liveness",
            "ACTIVE and DRAINING workers by heartbeat liveness (leader only)",
            ["liveness"],
        )
        for name, count in by_liveness.items():
            live.add_metric([name], count)
        yield live

        lags: dict[int, int] = {}
        for p in state.partitions.of(DEFAULT_PIPELINE):
            report = self.progress.of(p.partition, p.owner, p.epoch)
            if report is not None and report.source_end is not None:
                lags[p.partition] = max(0, report.source_end - report.offset)
        yield GaugeMetricFamily(
            "ripple_pipeline_lag_records",
            "Records in the source log not yet processed, summed over `default`'s reporting "
            "partitions (leader only, from heartbeats)",
            value=sum(lags.values()),
        )
        yield GaugeMetricFamily(
            "ripple_pipeline_lag_max_records",
            "The largest processing lag of one of `default`'s partitions (leader only, from "
            "heartbeats)",
            value=max(lags.values(), default=0),
        )
        yield GaugeMetricFamily(
            "ripple_pipeline_lag_reporting_partitions",
            "`default`'s partitions whose owner reported its position in the source log "
            "(leader only)",
            value=len(lags),
        )
        if self._per_partition(state):
            per = _gauge(
                "ripple_partition_lag_records",
                "Records behind the source log's end, as the owner last reported",
                ["pipeline", "partition"],
            )
            for pipeline, local, p in _numbered(state):
                report = self.progress.of(p.partition, p.owner, p.epoch)
                if report is not None and report.source_end is not None:
                    lag = max(0, report.source_end - report.offset)
                    per.add_metric([pipeline, str(local)], lag)
            yield per

    def _per_partition(self, state: ClusterState) -> bool:
        # Every pipeline's partitions count: the bound is on the series, whoever's they are.
        return len(state.partitions) <= self.node.config.metrics_partition_series_max


def _pipelines(state: ClusterState) -> list[str]:
    """`default` (before Bootstrap too, with nothing in it), then every record by name: at
    most PIPELINES_MAX + 1 label values."""
    return [DEFAULT_PIPELINE, *sorted(state.pipelines)]


def _numbered(state: ClusterState) -> Iterator[tuple[str, int, Partition]]:
    """Every partition with its pipeline and the number its pipeline gives it."""
    for pipeline in _pipelines(state):
        numbers = partition_numbers(state, pipeline)
        if numbers is None:
            continue
        for p in state.partitions.of(pipeline):
            yield pipeline, numbers.index(p.partition), p
