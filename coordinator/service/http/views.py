"""The read routes: health, status, partitions, workers, assignments and migrations.

Any node answers from its own applied state. Every view but health carries one envelope
(`ReadView.envelope`): the state's `generation`, the node's `applied_index` and `stale`,
true when the answer may lag the leader. `?consistent=true` is served by the leader only,
after a replicated barrier, and is never stale. Liveness, load, progress and failing
batches are the leader's memory (no follower hears heartbeats): a follower leaves them out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import TypedDict

from aiohttp import web

from coordinator.config import ClusterConfig
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    MigrationPhase,
    Partition,
    PartitionStatus,
    WorkerState,
)
from coordinator.core.snapshot import encode_state
from coordinator.core.state import ClusterState
from coordinator.service import models as m
from coordinator.service.failing import FailingReports
from coordinator.service.http.answers import json_reply
from coordinator.service.http.context import DUTIES_KEY, NODE_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import (
    Scope,
    path_partition,
    path_worker,
    query_bool,
    query_pipeline,
)
from coordinator.service.http.rescale_routes import rescale_view
from coordinator.service.metrics import PartitionProgress, ProgressReports
from coordinator.service.node_parts import ApiNode, Reads
from replication.log import RaftRole
from shared.errors import RequestError
from shared.version import PACKAGE_VERSION

__all__ = ["ROUTES", "lag_of", "partition_view"]


class Envelope(TypedDict):
    generation: int
    applied_index: int
    stale: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadView:
    """The node a read is served by, and what every answer says of how fresh it is."""

    node: ApiNode
    stale: bool
    # Taken before the state is read: the state is at least this far along.
    applied_index: int

    def envelope(self, state: ClusterState) -> Envelope:
        return {
            "generation": state.generation,
            "applied_index": self.applied_index,
            "stale": self.stale,
        }


async def read_view(request: web.Request) -> ReadView:
    """This node's view, or with `consistent=true` the leader's, fenced by a barrier."""
    if query_bool(request, "consistent"):
        node = require_leader(request)
        await node.barrier()
        stale = False
    else:
        node = request.app[NODE_KEY]
        stale = not node.is_ready_leader
    return ReadView(node=node, stale=stale, applied_index=node.log.status().applied_index)


def partition_view(
    p: Partition,
    scope: Scope,
    failing: FailingReports | None = None,
    progress: ProgressReports | None = None,
    rate_per_s: float | None = None,
) -> m.PartitionView:
    """`p` as `scope`'s pipeline numbers it; the leader's reports are by table number."""
    ck = p.checkpoint
    report = None if failing is None else failing.of(p.partition, p.owner, p.epoch)
    seen = None if progress is None else progress.of(p.partition, p.owner, p.epoch)
    return m.PartitionView(
        partition=scope.local(p.partition),
        pipeline=scope.pipeline,
        owner=p.owner,
        epoch=p.epoch,
        status=p.status.value,
        checkpoint=None
        if ck is None
        else m.CheckpointView(offset=ck.offset, uri=ck.uri, epoch=ck.epoch, at_ms=ck.at_ms),
        migration=p.migration,
        failing=None
        if report is None
        else m.FailingView(failures=report.failures, error=report.error),
        offset=None if seen is None else seen.offset,
        lag_records=None if seen is None else lag_of(seen),
        rate_per_s=rate_per_s,
        stuck=p.stuck or None,
    )


def lag_of(seen: PartitionProgress) -> int | None:
    return None if seen.source_end is None else max(0, seen.source_end - seen.offset)


def _progress(node: ApiNode) -> ProgressReports | None:
    """The leader's heartbeat progress reports; None on a follower (it hears none)."""
    return node.metrics.progress if node.is_ready_leader else None


def _rate(request: web.Request, node: Reads, partition: int) -> float | None:
    """The partition's fresh input rate; None on a follower (it hears no heartbeats)."""
    return request.app[DUTIES_KEY].rate_of(partition) if node.is_ready_leader else None


def _failing(request: web.Request, node: Reads) -> FailingReports | None:
    """The leader's failing-batch reports; None on a follower (it hears no heartbeats)."""
    return request.app[DUTIES_KEY].failing if node.is_ready_leader else None


def summary(state: ClusterState) -> m.ClusterSummary:
    return m.ClusterSummary(
        **state.summary(),
        routing=list(state.routing),
        # 0 before Bootstrap too, when there is no generation yet (routing is empty).
        routing_generation=state.routing_generation,
    )


NO_STORE_WARNING = (
    "the cluster file sets no store: every checkpoint is fenced, so a partition that changes "
    "owner or restarts is rebuilt by replaying its whole source log; set store to the "
    "workers' --store"
)


def warnings(config: ClusterConfig) -> list[str]:
    """What an operator should fix about the cluster's settings (empty: nothing)."""
    return [] if config.store else [NO_STORE_WARNING]


async def health(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    want_digest = query_bool(request, "digest")
    with node.read() as state:
        cluster = summary(state)
        finalized = state.finalized_version
        record = state.maintenance
        # The copy and this applied_index belong together (both taken under the apply lock,
        # except in the instant between an entry's apply and pysyncobj's counter bump); the
        # encoding happens after the lock is released.
        copy = state.detached() if want_digest else None
        info = node.leader_info()
    digest = None
    if copy is not None:
        digest = await asyncio.to_thread(lambda: hashlib.sha256(encode_state(copy)).hexdigest())
    st = info.status
    return json_reply(
        m.HealthResponse(
            node_id=node.node_id,
            role=info.role.value,
            ready=info.ready,
            leader_id=None if info.leader is None else info.leader.id,
            leader_url=None if info.leader is None else info.leader.url,
            term=st.term,
            commit_index=st.commit_index,
            applied_index=st.applied_index,
            cluster=cluster,
            duties_running=request.app[DUTIES_KEY].running
            if info.role is RaftRole.LEADER
            else None,
            state_digest=digest,
            nodes=[m.NodeRef(id=n.id, url=n.url) for n in node.voter_nodes()],
            package_version=PACKAGE_VERSION,
            cluster_id=node.cluster_id,
            command_set=m.VersionRangeView(
                min_version=node.speaks.min_version, max_version=node.speaks.max_version
            ),
            finalized_command_set_version=finalized,
            halted=st.halted,
            disk_slow=st.disk_slow,
            store_set=bool(node.config.store),
            warnings=warnings(node.config),
            voter=node.is_voter,
            maintenance=None if record is None else m.MaintenanceView(**dataclasses.asdict(record)),
        )
    )


async def status(request: web.Request) -> web.Response:
    view = await read_view(request)
    info = view.node.leader_info()
    voters = view.node.voters()
    with view.node.read() as state:
        by_status = {s.value: 0 for s in PartitionStatus}
        for p in state.partitions.of(DEFAULT_PIPELINE):
            by_status[p.status.value] += 1
        by_state = {s.value: 0 for s in WorkerState}
        for w in state.workers.values():
            by_state[w.state.value] += 1
        body = m.StatusResponse(
            **view.envelope(state),
            node_id=view.node.node_id,
            role=info.role.value,
            leader_id=None if info.leader is None else info.leader.id,
            term=info.status.term,
            cluster=summary(state),
            partitions_by_status=by_status,
            workers_by_state=by_state,
            migrations_in_flight=len(state.in_flight_migrations()),
            finalized_command_set_version=state.finalized_version,
            voters=list(voters),
            coordinators=[
                m.CoordinatorVersions(
                    node_id=r.node_id,
                    package_version=r.package_version,
                    min_version=r.min_version,
                    max_version=r.max_version,
                    reported_at_ms=r.reported_at_ms,
                    voter=r.node_id in voters,
                )
                for r in sorted(state.node_versions.values(), key=lambda r: r.node_id)
            ],
            last_backup=None
            if state.last_backup is None
            else m.BackupView(**dataclasses.asdict(state.last_backup)),
            maintenance=None
            if state.maintenance is None
            else m.MaintenanceView(**dataclasses.asdict(state.maintenance)),
            warnings=warnings(view.node.config),
            rescale=rescale_view(state),
        )
    return json_reply(body)


async def partitions(request: web.Request) -> web.Response:
    view = await read_view(request)
    node = view.node
    with node.read() as state:
        scope = query_pipeline(request, state)
        failing, progress = _failing(request, node), _progress(node)
        body = m.PartitionsResponse(
            **view.envelope(state),
            partitions=[
                partition_view(p, scope, failing, progress, _rate(request, node, p.partition))
                for p in state.partitions.of(scope.pipeline)
            ],
        )
    return json_reply(body)


async def partition(request: web.Request) -> web.Response:
    view = await read_view(request)
    node = view.node
    with node.read() as state:
        scope = query_pipeline(request, state)
        p = path_partition(request, state, scope)
        one = partition_view(
            p, scope, _failing(request, node), _progress(node), _rate(request, node, p.partition)
        )
        body = m.PartitionResponse(**view.envelope(state), **one.model_dump())
    return json_reply(body)


async def partition_history(request: web.Request) -> web.Response:
    view = await read_view(request)
    with view.node.read() as state:
        scope = query_pipeline(request, state)
        p = path_partition(request, state, scope)
        body = m.HistoryResponse(
            **view.envelope(state),
            partition=scope.local(p.partition),
            pipeline=scope.pipeline,
            history=[
                m.HistoryEntry(
                    epoch=h.epoch,
                    owner=h.owner,
                    reason=h.reason.value,
                    at_ms=h.at_ms,
                    note=h.note or None,
                )
                for h in p.history
            ],
        )
    return json_reply(body)


async def workers(request: web.Request) -> web.Response:
    view = await read_view(request)
    node = view.node
    duties = request.app[DUTIES_KEY]
    with node.read() as state:
        counts: dict[str, int] = {}
        owned: dict[str, dict[int, int]] = {}
        for p in state.partitions:
            if p.owner is not None:
                counts[p.owner] = counts.get(p.owner, 0) + 1
                owned.setdefault(p.owner, {})[p.partition] = p.epoch
        failing = _failing(request, node)
        progress = _progress(node)
        lags: dict[str, int] = {}
        if progress is not None:
            for p in state.partitions:
                seen = progress.of(p.partition, p.owner, p.epoch)
                lag = None if seen is None else lag_of(seen)
                if p.owner is not None and lag is not None:
                    lags[p.owner] = lags.get(p.owner, 0) + lag
        # A worker's rate is the sum of its partitions' only when every one is fresh: a
        # partial sum would understate it (the reader then sees its count instead, as for a
        # worker that owns nothing).
        rates: dict[str, float | None] = {}
        if node.is_ready_leader:
            for p in state.partitions:
                if p.owner is not None:
                    rate, sofar = duties.rate_of(p.partition), rates.get(p.owner, 0.0)
                    rates[p.owner] = None if rate is None or sofar is None else sofar + rate
        views = [
            m.WorkerView(
                worker_id=w.worker_id,
                address=w.address,
                incarnation=w.incarnation,
                state=w.state.value,
                registered_at_ms=w.registered_at_ms,
                partitions=counts.get(w.worker_id, 0),
                liveness=duties.liveness_of(w.worker_id),
                load=duties.load_of(w.worker_id),
                failing_partitions=None
                if failing is None
                else failing.count(w.worker_id, owned.get(w.worker_id, {})),
                lag_records=lags.get(w.worker_id),
                rate_per_s=rates.get(w.worker_id),
                labels=None
                if w.profile is None
                else {label.key: label.value for label in w.profile.labels},
                slots=None if w.profile is None else w.profile.slots,
            )
            for w in sorted(state.workers.values(), key=lambda w: w.worker_id)
        ]
        body = m.WorkersResponse(**view.envelope(state), workers=views)
    return json_reply(body)


async def assignment(request: web.Request) -> web.Response:
    wid = path_worker(request)
    view = await read_view(request)
    with view.node.read() as state:
        if wid not in state.workers:
            raise RequestError(f"unknown worker {wid}", code="not_found", field="worker_id")
        body = m.AssignmentResponse(
            **view.envelope(state),
            worker_id=wid,
            assignment=[
                m.AssignmentEntry(partition=p, epoch=e) for p, e in state.assignment_of(wid)
            ],
        )
    return json_reply(body)


async def migrations(request: web.Request) -> web.Response:
    view = await read_view(request)
    with view.node.read() as state:
        scope = query_pipeline(request, state)
        ms = [x for x in state.migrations.values() if scope.owns(x.partition)]
        in_flight = [x for x in ms if x.phase not in (MigrationPhase.DONE, MigrationPhase.ABORTED)]
        done = [x for x in ms if x.phase in (MigrationPhase.DONE, MigrationPhase.ABORTED)]
        body = m.MigrationsResponse(
            **view.envelope(state),
            in_flight=len(in_flight),
            migrations=[
                m.MigrationView(
                    id=x.migration_id,
                    partition=scope.local(x.partition),
                    pipeline=scope.pipeline,
                    source=x.source,
                    target=x.target,
                    phase=x.phase.value,
                    reason=x.reason.value,
                    created_at_ms=x.created_at_ms,
                    updated_at_ms=x.updated_at_ms,
                    note=x.note,
                )
                for x in in_flight + done[::-1]
            ],
        )
    return json_reply(body)


ROUTES: tuple[Route, ...] = (
    Route(
        method="GET",
        path="/v1/health",
        handler=health,
        summary="Node role, Raft indexes and the cluster summary",
        response=m.HealthResponse,
    ),
    Route(
        method="GET",
        path="/v1/status",
        handler=status,
        summary="Cluster status from this node's state",
        response=m.StatusResponse,
    ),
    Route(
        method="GET",
        path="/v1/partitions",
        handler=partitions,
        summary="One pipeline's partitions (`default`'s unless ?pipeline=), numbered its own",
        response=m.PartitionsResponse,
        pipeline=True,
    ),
    Route(
        method="GET",
        path="/v1/partitions/{p}",
        handler=partition,
        summary="One partition, by its pipeline's own number",
        response=m.PartitionResponse,
        pipeline=True,
    ),
    Route(
        method="GET",
        path="/v1/partitions/{p}/history",
        handler=partition_history,
        summary="The partition's last ownership changes",
        response=m.HistoryResponse,
        pipeline=True,
    ),
    Route(
        method="GET",
        path="/v1/workers",
        handler=workers,
        summary="Registered workers",
        response=m.WorkersResponse,
    ),
    Route(
        method="GET",
        path="/v1/workers/{worker_id}/assignment",
        handler=assignment,
        summary="Partitions a worker owns",
        response=m.AssignmentResponse,
    ),
    Route(
        method="GET",
        path="/v1/migrations",
        handler=migrations,
        summary="One pipeline's migrations, in flight first",
        response=m.MigrationsResponse,
        pipeline=True,
    ),
)
