"""The workers' routes: register, heartbeat, checkpoint acks and drain.

All are leader-only writes but the heartbeat, which proposes nothing: it feeds the
planner's liveness and load and answers the worker's assignment. Each handler reads
top-down: the caller is checked before the body is read (401/403/307 first), the body is
parsed, the command proposed and its committed result answered. The front door
(`coordinator/service/front.py`) calls `register`, `checkpoints` and `heartbeat_now` with
its own `PlainRequest`, so these handlers use only what that shim has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from coordinator.core.commands import (
    CheckpointReport,
    DrainWorker,
    RecordCheckpoints,
    RegisterWorker,
)
from coordinator.core.model import WorkerId, WorkerState
from coordinator.core.state import ClusterState
from coordinator.service import models as m
from coordinator.service.address import check_address
from coordinator.service.auth import (
    WorkerClaims,
    call_token,
    issue_token,
    read_worker_token,
    token_matches,
    verify_token,
)
from coordinator.service.failing import FailingPartition
from coordinator.service.http.answers import json_bytes, json_reply, migration_refs, raise_rejected
from coordinator.service.http.context import ASSIGNMENT_TEXTS_KEY, DUTIES_KEY
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
from coordinator.service.node import CoordinatorNode, now_ms
from coordinator.service.replies import heartbeat_body
from shared.checkpoint_ref import reference_problem
from shared.errors import RequestError

__all__ = ["ROUTES", "checkpoints", "heartbeat_now", "register"]


async def register(request: ApiRequest) -> web.Response:
    node = require_leader(request)
    header = request.headers.get("Authorization")
    if token_matches(node.config.admin_token, header):
        principal = "admin"
    elif node.config.join_token or not node.config.open_registration:
        verify_token(node.config.join_token, header, "join")
        principal = "join"
    else:
        principal = "open"
    body = await parse(request, m.RegisterRequest)
    check_address(body.address, node.worker_networks)
    if principal != "admin":
        with node.read() as state:
            check_takeover(request, node, state, WorkerId(body.worker_id))
    rid = idempotency_key(request, principal, "register")
    value = await node.submit(
        RegisterWorker(worker_id=WorkerId(body.worker_id), address=body.address, now_ms=now_ms()),
        rid,
    )
    incarnation = int(value["incarnation"])
    request.app[DUTIES_KEY].registered(WorkerId(body.worker_id))
    cfg = node.config
    token, expires_at_ms = fresh_token(node, body.worker_id, incarnation)
    return json_reply(
        m.RegisterResponse(
            worker_id=body.worker_id,
            incarnation=incarnation,
            token=token,
            token_expires_at_ms=expires_at_ms,
            call_token=call_token(cfg.cluster_secret, body.worker_id, incarnation),
            heartbeat_interval_s=cfg.heartbeat_interval_s,
            lease_s=cfg.lease_s,
        )
    )


WORKER_TOKEN_HEADER = "Ripple-Worker-Token"


def check_takeover(
    request: ApiRequest, node: CoordinatorNode, state: ClusterState, wid: WorkerId
) -> None:
    """A live worker id (ACTIVE or DRAINING) is re-registered only by the holder of its
    current token (header Ripple-Worker-Token) or the admin: the join token alone, which
    every worker holds, must not let one worker take another's id, host calls and
    checkpoint references."""
    worker = state.workers.get(wid)
    if worker is None or worker.state in (WorkerState.DEAD, WorkerState.LEFT):
        return
    presented = request.headers.get(WORKER_TOKEN_HEADER)
    try:
        claims = read_worker_token(
            node.config.cluster_secret, f"Bearer {presented}" if presented else None, now_ms()
        )
    except RequestError:
        claims = None
    if claims is None or claims.worker_id != wid or claims.incarnation != worker.incarnation:
        raise RequestError(
            f"worker {wid} is {worker.state.value}: re-registering it needs its current token "
            f"({WORKER_TOKEN_HEADER}) or the admin token",
            code="worker_active",
            status=409,
            field="worker_id",
        )


def fresh_token(node: CoordinatorNode, worker_id: str, incarnation: int) -> tuple[str, int]:
    expires_at_ms = now_ms() + int(node.config.worker_token_lifetime_s * 1000)
    return issue_token(node.config.cluster_secret, worker_id, incarnation, expires_at_ms), (
        expires_at_ms
    )


def heartbeat_token(
    node: CoordinatorNode, claims: WorkerClaims, incarnation: int, now: int
) -> tuple[str, int]:
    """The token a heartbeat hands back: the one it presented (just verified, for this
    worker's current incarnation) while more than half its lifetime is left, else a renewed
    one. So a heartbeat costs no HMAC and a worker's reply changes only with the generation
    and about once per half lifetime, and a heartbeating worker's token never lapses."""
    half_life_ms = int(node.config.worker_token_lifetime_s * 500)
    if claims.expires_at_ms - now > half_life_ms:
        return claims.token, claims.expires_at_ms
    return fresh_token(node, claims.worker_id, incarnation)


def worker_claims(
    request: ApiRequest, node: CoordinatorNode, now: int, wid: WorkerId | None = None
) -> WorkerClaims:
    """A genuine worker token unexpired at wall time `now` (ms) (for `wid` when given),
    checked before the body is read. Needs no state: whether the incarnation is current is
    `current_incarnation`."""
    claims = read_worker_token(
        node.config.cluster_secret, request.headers.get("Authorization"), now
    )
    if wid is not None and claims.worker_id != wid:
        raise RequestError("the token is another worker's", code="forbidden", status=403)
    return claims


def current_incarnation(state: ClusterState, claims: WorkerClaims) -> int:
    """404 when the token's worker is unknown, DEAD or LEFT; 409 when its incarnation is
    not the current one (the worker must re-register)."""
    worker = state.workers.get(WorkerId(claims.worker_id))
    if worker is None or worker.state in (WorkerState.DEAD, WorkerState.LEFT):
        what = "unknown worker" if worker is None else f"worker is {worker.state.value}"
        raise RequestError(
            f"{what}; register again", code="unknown_worker", status=404, field="worker_id"
        )
    if claims.incarnation != worker.incarnation:
        raise RequestError(
            f"token is for incarnation {claims.incarnation}, current is "
            f"{worker.incarnation}; re-register",
            code="stale_incarnation",
            status=409,
        )
    return claims.incarnation


async def heartbeat(request: ApiRequest) -> web.Response:
    caller = heartbeat_caller(request)  # before the body is read: 401/403/307 first
    return heartbeat_reply(request, caller, await read_body(request))


def heartbeat_now(request: PlainRequest) -> web.Response:
    """The heartbeat of a request whose body has arrived whole, without an await (the front
    door answers it in the call that read it, with no task)."""
    return heartbeat_reply(request, heartbeat_caller(request), request.content.read_nowait())


@dataclass(frozen=True, slots=True)
class HeartbeatCaller:
    """Who sent a heartbeat, checked before its body is read."""

    worker_id: WorkerId
    node: CoordinatorNode
    now_ms: int
    claims: WorkerClaims


def heartbeat_caller(request: ApiRequest) -> HeartbeatCaller:
    wid = path_worker(request)
    node = require_leader(request)
    now = now_ms()
    return HeartbeatCaller(wid, node, now, worker_claims(request, node, now, wid))


def heartbeat_reply(request: ApiRequest, caller: HeartbeatCaller, raw: bytes) -> web.Response:
    wid, node, now, claims = caller.worker_id, caller.node, caller.now_ms, caller.claims
    body = parse_body(raw, m.HeartbeatRequest)
    if len(body.partitions) > node.config.heartbeat_partitions_max:
        raise RequestError("too many partitions in one heartbeat", field="partitions")
    duties = request.app[DUTIES_KEY]
    with node.read() as state:
        incarnation = current_incarnation(state, claims)
        if body.incarnation != incarnation:
            raise RequestError(
                "body incarnation does not match the token",
                field="incarnation",
                code="stale_incarnation",
                status=409,
            )
        generation = state.generation
        assignment = request.app[ASSIGNMENT_TEXTS_KEY].text(state, wid)
    # The partitions' positions go to the progress and failing reports below; the planner
    # decides on liveness and load only.
    due = duties.heartbeat(wid, body.load)
    token, expires_at_ms = heartbeat_token(node, claims, incarnation, now)
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
    claims = worker_claims(request, node, now_ms())
    body = await parse(request, m.CheckpointsRequest)
    wid = WorkerId(body.worker_id)
    if wid != claims.worker_id:
        raise RequestError("the token is another worker's", code="forbidden", status=403)
    with node.read() as state:
        current_incarnation(state, claims)
    # A reference that is not the canonical object of its (partition, epoch, offset) in the
    # cluster's store is fenced here and never proposed (another file, bucket or partition's
    # checkpoint would otherwise be loaded by the next owner as this partition's state).
    refused = {
        i: reason
        for i, c in enumerate(body.checkpoints)
        if (reason := reference_problem(node.config.store, c.partition, c.epoch, c.offset, c.uri))
    }
    kept = [c for i, c in enumerate(body.checkpoints) if i not in refused]
    recorded: list[dict[str, Any]] = []
    if kept:
        value = await node.submit(
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
            idempotency_key(request, f"worker:{wid}", "checkpoints"),
        )
        recorded = list(value["results"])
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
                partition=answer["partition"],
                status=answer["status"],
                reason=answer.get("reason") or "",
            )
        )
    fenced = sum(1 for r in results if r.status == "fenced")
    node.metrics.checkpoints_reported(len(results) - fenced, fenced)
    return json_reply(m.CheckpointsResponse(results=results))


async def drain(request: web.Request) -> web.Response:
    wid = path_worker(request)
    node = require_leader(request)
    is_admin = token_matches(node.config.admin_token, request.headers.get("Authorization"))
    # Checked before anything about the worker is looked up: an unauthenticated caller
    # learns nothing about which ids exist.
    claims = None if is_admin else worker_claims(request, node, now_ms(), wid)
    with node.read() as state:
        if wid not in state.workers:
            raise RequestError(
                f"unknown worker {wid}", code="not_found", status=404, field="worker_id"
            )
        if claims is not None:
            current_incarnation(state, claims)
        planner, now = request.app[DUTIES_KEY].query()
        moves = raise_rejected(planner.plan_drain(state, wid, now))
    rid = idempotency_key(request, "admin" if is_admin else f"worker:{wid}", f"drain:{wid}")
    value = await node.submit(DrainWorker(worker_id=wid, moves=moves, now_ms=now_ms()), rid)
    return json_reply(
        m.DrainResponse(worker_id=wid, state=value["state"], migrations=migration_refs(value)),
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
        path="/v1/workers/{worker_id}/drain",
        handler=drain,
        summary="Graceful leave: move the worker's partitions away, then LEFT",
        response=m.DrainResponse,
        status=202,
        leader_only=True,
        auth="worker-or-admin",
    ),
)
