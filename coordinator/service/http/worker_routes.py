"""The workers' routes: register, heartbeat, checkpoint acks, restarting and drain.

All are served by the leader only, and all but the heartbeat and the restart notice propose
a command (those two feed the planner's memory: liveness and load, and the hold of a worker
that said it is restarting). Each handler
reads top-down: the caller is admitted from its headers before the body is read (so
307/401/403 come first), the body is parsed, the principal checked against the state, the
command proposed and its committed result answered. The front door
(`coordinator/service/front.py`) calls `register`, `checkpoints` and `heartbeat_now` with
its own `PlainRequest`, so these handlers use only what that shim has.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    CheckpointReport,
    CheckpointVerdict,
    DrainWorker,
    ProfileWorker,
    RecordCheckpoints,
    RegisterWorker,
)
from coordinator.core.model import Label, WorkerId, WorkerState
from coordinator.core.versions import INTRODUCED_IN
from coordinator.service import models as m
from coordinator.service.address import check_address
from coordinator.service.auth import Admission, WorkerClaims
from coordinator.service.failing import FailingPartition
from coordinator.service.http.answers import json_bytes, json_reply, migration_refs, raise_rejected
from coordinator.service.http.context import ADMISSION_KEY, ASSIGNMENT_TEXTS_KEY, DUTIES_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import (
    ApiRequest,
    PlainRequest,
    idempotency_key,
    parse,
    parse_body,
    path_worker,
    read_body,
)
from coordinator.service.metrics import PartitionProgress
from coordinator.service.node_parts import ApiNode
from coordinator.service.replies import heartbeat_body
from coordinator.service.stamps import now_ms
from shared.checkpoint_ref import reference_problem, store_mismatch
from shared.errors import RequestError, UnavailableError

__all__ = ["ROUTES", "checkpoints", "heartbeat_now", "register"]

log = logging.getLogger(__name__)

PROFILE_VERSION = INTRODUCED_IN[ProfileWorker.TAG]


async def register(request: ApiRequest) -> web.Response:
    node = require_leader(request)
    admission = request.app[ADMISSION_KEY]
    registrant = admission.admit_registration(request.headers)  # before the body is read
    body = await parse(request, m.RegisterRequest)
    check_address(body.address, node.worker_networks)
    check_store(node.config.store, body.store)
    wid = WorkerId(body.worker_id)
    profiled = body.labels is not None or body.slots is not None
    with node.read() as state:
        admission.admit_id(registrant, state, wid, now_ms())
        if profiled and state.finalized_version < PROFILE_VERSION:
            # Refused before the registration commits: a 503 leaves no state changed, and
            # the worker's retry registers once the profile can follow it.
            raise UnavailableError(
                f"a worker with labels or slots needs command-set version {PROFILE_VERSION} "
                f"(the cluster is at {state.finalized_version}); retry once it is finalized",
                code="version_not_finalized",
                field="command_set_version",
            )
    registered = await node.submit(
        RegisterWorker(worker_id=wid, address=body.address, now_ms=now_ms()),
        idempotency_key(request, registrant.scope, "register"),
    )
    incarnation = registered.incarnation
    if profiled:
        # Its own commit after the registration's: a profile is of one incarnation, and a
        # registration retried after this failed is answered as a repeat, then profiled.
        await node.submit(
            ProfileWorker(
                worker_id=wid,
                incarnation=incarnation,
                labels=tuple(sorted(Label(key=k, value=v) for k, v in (body.labels or {}).items())),
                slots=body.slots if body.slots is not None else m.WORKER_SLOTS_DEFAULT,
                now_ms=now_ms(),
            ),
            idempotency_key(request, registrant.scope, f"profile.{incarnation}"),
        )
    request.app[DUTIES_KEY].registered(wid)
    cfg = node.config
    token, expires_at_ms = admission.worker_token(wid, incarnation, now_ms())
    return json_reply(
        m.RegisterResponse(
            worker_id=wid,
            incarnation=incarnation,
            token=token,
            token_expires_at_ms=expires_at_ms,
            call_token=admission.leader_call_token(wid, incarnation),
            heartbeat_interval_s=cfg.heartbeat_interval_s,
            lease_s=cfg.lease_s,
        )
    )


def check_store(cluster_store: str, worker_store: str | None) -> None:
    """A worker whose store is not the cluster's is refused: every checkpoint it wrote would
    be fenced, and nobody would see why."""
    if worker_store is None:
        return
    try:
        problem = store_mismatch(cluster_store, worker_store)
    except ValueError:
        raise RequestError(
            "store must be file:///dir or s3://bucket/prefix", field="store"
        ) from None
    if problem is not None:
        log.warning("registration refused: %s", problem)
        raise RequestError(problem, code="store_mismatch", field="store")


async def heartbeat(request: ApiRequest) -> web.Response:
    caller = heartbeat_caller(request)  # before the body is read: 401/403/307 first
    return heartbeat_reply(request, caller, await read_body(request))


def heartbeat_now(request: PlainRequest) -> web.Response:
    """The heartbeat of a request whose body has arrived whole, without an await (the front
    door answers it in the call that read it, with no task)."""
    return heartbeat_reply(request, heartbeat_caller(request), request.content.read_nowait())


@dataclass(frozen=True, slots=True)
class HeartbeatCaller:
    """Who sent a heartbeat, admitted before its body is read."""

    worker_id: WorkerId
    node: ApiNode
    admission: Admission
    now_ms: int
    claims: WorkerClaims


def heartbeat_caller(request: ApiRequest) -> HeartbeatCaller:
    wid = path_worker(request)
    node = require_leader(request)
    admission = request.app[ADMISSION_KEY]
    now = now_ms()
    claims = admission.admit_worker(request.headers, now, wid)
    return HeartbeatCaller(wid, node, admission, now, claims)


def sent_incarnation(
    admission: Admission, state: ClusterState, claims: WorkerClaims, sent: int
) -> int:
    """The token's incarnation, current (`Admission.current_incarnation`) and the one the
    body names too; 409 `stale_incarnation` otherwise."""
    incarnation = admission.current_incarnation(state, claims)
    if sent != incarnation:
        raise RequestError(
            "body incarnation does not match the token",
            field="incarnation",
            code="stale_incarnation",
        )
    return incarnation


def heartbeat_reply(request: ApiRequest, caller: HeartbeatCaller, raw: bytes) -> web.Response:
    wid, node, claims = caller.worker_id, caller.node, caller.claims
    body = parse_body(raw, m.HeartbeatRequest)
    if len(body.partitions) > node.config.heartbeat_partitions_max:
        raise RequestError("too many partitions in one heartbeat", field="partitions")
    duties = request.app[DUTIES_KEY]
    with node.read() as state:
        incarnation = sent_incarnation(caller.admission, state, claims, body.incarnation)
        generation = state.generation
        assignment = request.app[ASSIGNMENT_TEXTS_KEY].text(state, wid)
        rates = [
            (
                int(k),
                v.epoch,
                v.rate,
                None if v.source_end is None else max(0, v.source_end - v.offset),
            )
            for k, v in body.partitions.items()
            if v.rate is not None
        ]
        if rates:
            duties.partition_loads(state, wid, rates)
    # The partitions' positions go to the progress and failing reports below; the planner
    # decides on liveness and load only.
    due = duties.heartbeat(wid, body.load)
    token, expires_at_ms = caller.admission.heartbeat_token(claims, incarnation, caller.now_ms)
    node.metrics.progress.record(
        wid,
        {
            int(k): PartitionProgress(epoch=v.epoch, offset=v.offset, source_end=v.source_end)
            for k, v in body.partitions.items()
        },
    )
    duties.failing.record(
        wid,
        {
            int(k): FailingPartition(epoch=v.epoch, failures=v.failures, error=v.error)
            for k, v in body.partitions.items()
            if v.failures > 0
        },
    )
    # The hottest reply on the leader: m.HeartbeatResponse's JSON from a format string and
    # the worker's assignment text kept for this generation (replies.py), not the model.
    return json_bytes(heartbeat_body(generation, assignment, due, token, expires_at_ms))


async def checkpoints(request: ApiRequest) -> web.Response:
    node = require_leader(request)
    admission = request.app[ADMISSION_KEY]
    claims = admission.admit_worker(request.headers, now_ms())  # before the body is read
    body = await parse(request, m.CheckpointsRequest)
    wid = WorkerId(body.worker_id)
    if wid != claims.worker_id:
        raise RequestError("the token is another worker's", code="forbidden")
    with node.read() as state:
        admission.current_incarnation(state, claims)
    # A reference that is not the canonical object of its (partition, epoch, offset) in the
    # cluster's store is fenced here and never proposed (another file, bucket or partition's
    # checkpoint would otherwise be loaded by the next owner as this partition's state).
    refused = {
        i: reason
        for i, c in enumerate(body.checkpoints)
        if (reason := reference_problem(node.config.store, c.partition, c.epoch, c.offset, c.uri))
    }
    kept = [c for i, c in enumerate(body.checkpoints) if i not in refused]
    recorded: tuple[CheckpointVerdict, ...] = ()
    if kept:
        verdicts = await node.submit(
            RecordCheckpoints(
                worker_id=wid,
                incarnation=body.incarnation,
                entries=tuple(
                    CheckpointReport(
                        partition=c.partition, epoch=c.epoch, offset=c.offset, uri=c.uri
                    )
                    for c in kept
                ),
                now_ms=now_ms(),
            ),
            idempotency_key(request, claims.scope, "checkpoints"),
        )
        recorded = verdicts.results
    answers = iter(recorded)
    results = []
    for i, c in enumerate(body.checkpoints):
        if i in refused:
            results.append(
                m.CheckpointResult(partition=c.partition, status="fenced", reason=refused[i])
            )
            continue
        answer = next(answers)
        results.append(
            m.CheckpointResult(
                partition=answer.partition, status=answer.status, reason=answer.reason or ""
            )
        )
    fenced = sum(1 for r in results if r.status == "fenced")
    node.metrics.checkpoints_reported(len(results) - fenced, fenced)
    return json_reply(m.CheckpointsResponse(results=results))


async def restarting(request: web.Request) -> web.Response:
    """The worker is stopping to start again under the same id: the leader holds what it
    owns for `rejoin_grace_s` (no death verdict, no reassignment, no balance move of it)."""
    wid = path_worker(request)
    node = require_leader(request)
    admission = request.app[ADMISSION_KEY]
    claims = admission.admit_worker(request.headers, now_ms(), wid)  # before the body
    body = await parse(request, m.RestartingRequest)
    duties = request.app[DUTIES_KEY]
    with node.read() as state:
        incarnation = sent_incarnation(admission, state, claims, body.incarnation)
        worker = state.workers[wid]
        if worker.state is not WorkerState.ACTIVE:
            # A DRAINING worker is leaving: holding its partitions would stall the drain.
            raise RequestError(
                f"worker {wid} is {worker.state.value}: a leaving worker is not held",
                code="conflict",
                field="worker_id",
            )
        owned = len(state.owned_by(wid))
        hold_ms = duties.restarting(wid)
    return json_reply(
        m.RestartingResponse(
            worker_id=wid, incarnation=incarnation, partitions=owned, rejoin_grace_s=hold_ms / 1000
        ),
        status=202,
    )


async def drain(request: web.Request) -> web.Response:
    wid = path_worker(request)
    node = require_leader(request)
    admission = request.app[ADMISSION_KEY]
    # Admitted before anything about the worker is looked up: an unauthenticated caller
    # learns nothing about which ids exist.
    caller = admission.admit_worker_or_admin(request.headers, now_ms(), wid)
    with node.read() as state:
        if wid not in state.workers:
            raise RequestError(f"unknown worker {wid}", code="not_found", field="worker_id")
        if isinstance(caller, WorkerClaims):
            admission.current_incarnation(state, caller)
        planner, now = request.app[DUTIES_KEY].query()
        moves = raise_rejected(planner.plan_drain(state, wid, now))
    rid = idempotency_key(request, caller.scope, f"drain:{wid}")
    drained = await node.submit(DrainWorker(worker_id=wid, moves=moves, now_ms=now_ms()), rid)
    request.app[DUTIES_KEY].left(wid)  # a leave, even of a worker held for its restart
    return json_reply(
        m.DrainResponse(
            worker_id=wid,
            state=drained.state.value,
            migrations=migration_refs(drained.migrations),
        ),
        status=202,
    )


ROUTES: tuple[Route, ...] = (
    Route(
        method="POST",
        path="/v1/workers",
        handler=register,
        summary="Register a worker (new incarnation, signed token)",
        request=m.RegisterRequest,
        response=m.RegisterResponse,
        leader_only=True,
        auth="join",  # only when join_token is set
    ),
    Route(
        method="POST",
        path="/v1/workers/{worker_id}/heartbeat",
        handler=heartbeat,
        summary="Liveness + load; returns the worker's assignment",
        request=m.HeartbeatRequest,
        response=m.HeartbeatResponse,
        leader_only=True,
        auth="worker",
    ),
    Route(
        method="POST",
        path="/v1/checkpoints",
        handler=checkpoints,
        summary="Checkpoint acks; each accepted or fenced",
        request=m.CheckpointsRequest,
        response=m.CheckpointsResponse,
        leader_only=True,
        auth="worker",
    ),
    Route(
        method="POST",
        path="/v1/workers/{worker_id}/restarting",
        handler=restarting,
        summary="The worker restarts: hold its partitions for rejoin_grace_s",
        request=m.RestartingRequest,
        response=m.RestartingResponse,
        status=202,
        leader_only=True,
        auth="worker",
    ),
    Route(
        method="POST",
        path="/v1/workers/{worker_id}/drain",
        handler=drain,
        summary="Graceful leave: move the worker's partitions away, then LEFT",
        response=m.DrainResponse,
        status=202,
        leader_only=True,
        auth="worker-or-admin",
    ),
)
