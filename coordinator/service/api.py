"""The coordinator's HTTP API (aiohttp): app factory, routes, error mapping, OpenAPI.

Handlers parse -> propose -> await the commit -> serialize. Reads are served by any node
from its local state (`stale` says whether that may lag); `?consistent=true` reads go to
the leader and pass a replicated barrier first. Writes are leader-only: a follower answers
307 with the leader's URL, or 503 + Retry-After when no leader is known or the leader is
still applying its log. Every error leaves as the JSON shape of DESIGN §6; a rejected
request never changes state (validation happens before any proposal). Workers' plain
heartbeats, registrations and checkpoint acks reach the same handlers from the front door
(`front.py`) as a `PlainRequest`, and leave through the same `error_response` and `finish`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import hdrs, web
from multidict import CIMultiDictProxy
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from coordinator.core.codec import encode_state
from coordinator.core.commands import (
    AbortMigration,
    Barrier,
    DrainWorker,
    Move,
    PlanMigrations,
    RecordCheckpoints,
    RegisterWorker,
    Rejected,
    ResetPartition,
)
from coordinator.core.commands import CheckpointReport as CheckpointReportCmd
from coordinator.core.model import (
    MigrationId,
    MigrationPhase,
    MigrationReason,
    Partition,
    PartitionStatus,
    WorkerId,
    WorkerState,
    valid_id,
)
from coordinator.core.state import ClusterState
from coordinator.service import dashboard
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
from coordinator.service.failing import FailingPartition, FailingReports
from coordinator.service.metrics import PartitionProgress, ProgressReports
from coordinator.service.node import CoordinatorNode, new_request_id, now_ms
from coordinator.service.replies import AssignmentTexts, heartbeat_body
from replication.log import RaftRole
from shared.checkpoint_ref import reference_problem
from shared.errors import RequestError, RippleError, UnavailableError

log = logging.getLogger(__name__)

NODE_KEY = web.AppKey("node", CoordinatorNode)
DUTIES_KEY: web.AppKey[Any] = web.AppKey("duties", object)
ASSIGNMENT_TEXTS_KEY = web.AppKey("assignment_texts", AssignmentTexts)
ORIGINS_KEY: web.AppKey[frozenset[str]] = web.AppKey("origins", frozenset)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)
R = TypeVar("R", bound=web.StreamResponse)
H = TypeVar("H", bound=Handler)


class WholeBody:
    """The body of a `PlainRequest`: all of it has arrived (what `read_body` asks of a
    stream before taking it in one call)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def is_eof(self) -> bool:
        return True

    def read_nowait(self) -> bytes:
        return self._data


class PlainRequest:
    """A request the front door (`front.py`) read itself, whole: the few things the hot
    handlers and their helpers use of an aiohttp request, and nothing else. It has no query
    string (the front door hands a request with one to aiohttp)."""

    __slots__ = ("app", "content", "headers", "match_info", "method", "path")

    def __init__(
        self,
        app: web.Application,
        method: str,
        path: str,
        match_info: dict[str, str],
        headers: CIMultiDictProxy[str],
        body: bytes,
    ) -> None:
        self.app = app
        self.method = method
        self.path = path
        self.match_info = match_info
        self.headers = headers
        self.content = WholeBody(body)

    @property
    def path_qs(self) -> str:
        return self.path

    async def read(self) -> bytes:
        return self.content.read_nowait()


# What the hot routes' handlers take: aiohttp's request, or the front door's.
ApiRequest = web.Request | PlainRequest


@dataclass(frozen=True, slots=True)
class RouteDoc:
    method: str
    path: str
    summary: str
    handler: Handler
    request: type[BaseModel] | None
    response: type[BaseModel] | None
    status: int
    leader_only: bool
    auth: str | None  # None | "worker" | "admin" | "worker-or-admin" | "join"


ROUTES: list[RouteDoc] = []


def route(
    method: str,
    path: str,
    summary: str,
    *,
    request: type[BaseModel] | None = None,
    response: type[BaseModel] | None = None,
    status: int = 200,
    leader_only: bool = False,
    auth: str | None = None,
) -> Callable[[H], H]:
    def register(fn: H) -> H:
        ROUTES.append(
            RouteDoc(method, path, summary, fn, request, response, status, leader_only, auth)
        )
        return fn

    return register


class LeaderRedirect(RippleError):
    status = 307
    code = "not_leader"

    def __init__(self, location: str, leader_id: str) -> None:
        super().__init__(f"this node is not the leader; the leader is {leader_id}")
        self.location = location
        self.leader_id = leader_id


# -- helpers --------------------------------------------------------------------------------


JSON_CONTENT_TYPE = "application/json; charset=utf-8"


def json_bytes(
    payload: bytes, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON response whose body is already encoded. aiohttp keeps a bytes body as it is; a
    str body goes through its payload registry (with the header arguments, 5% of the
    leader's event loop under registrations, py-spy)."""
    all_headers: dict[str, str] = {hdrs.CONTENT_TYPE: JSON_CONTENT_TYPE}
    if headers:
        all_headers.update(headers)
    return web.Response(body=payload, status=status, headers=all_headers)


def _json(
    body: BaseModel | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    if isinstance(body, BaseModel):
        # pydantic writes the JSON itself (dumping to dicts and then json.dumps was 2-3% of
        # the leader's event loop under registrations).
        return json_bytes(body.model_dump_json(by_alias=True).encode(), status, headers)
    return web.json_response(body, status=status, headers=headers)


def _error(exc: RippleError) -> web.Response:
    headers: dict[str, str] = {}
    if isinstance(exc, UnavailableError):
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, LeaderRedirect):
        headers["Location"] = exc.location
        headers["Ripple-Leader"] = exc.leader_id
    body = exc.to_json()
    if isinstance(exc, LeaderRedirect):
        body["leader_id"] = exc.leader_id
    return web.json_response(body, status=exc.status, headers=headers)


async def read_body(request: ApiRequest) -> bytes:
    """The whole request body. One that has arrived whole (a heartbeat's, nearly always: it
    comes in the same segment as its headers) is taken from the buffer in one call, held to
    the same limit; otherwise aiohttp's read loop, which enforces `client_max_size`. Both
    answer 413 above `body_bytes_max`. (The read loop's two awaits per request were 3% of
    the leader's event loop under heartbeats.)"""
    content = request.content
    if not content.is_eof():
        return await request.read()
    raw = content.read_nowait()
    limit = request.app[NODE_KEY].config.body_bytes_max
    if len(raw) > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(raw))
    return raw


async def parse(request: ApiRequest, model: type[M]) -> M:
    return parse_body(await read_body(request), model)


def parse_body(raw: bytes, model: type[M]) -> M:
    """A request body as `model`, or the RequestError naming the field that is wrong."""
    if not raw:
        raise RequestError("request body is required (JSON)", field="body")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or "body"
        if err.get("type") == "json_invalid":
            raise RequestError(f"body is not valid JSON: {err.get('msg')}", field="body") from None
        raise RequestError(f"{field}: {err.get('msg')}", field=field) from None


def node_of(request: ApiRequest) -> CoordinatorNode:
    return request.app[NODE_KEY]


def require_leader(request: ApiRequest) -> CoordinatorNode:
    node = node_of(request)
    if node.is_ready_leader:  # the common case, without building a status
        return node
    info = node.leader_info()
    if info.role is RaftRole.LEADER:
        if info.ready:
            return node
        raise UnavailableError("leader is still applying its committed log", retry_after_s=1)
    if info.leader is not None and info.leader.id != node.node_id:
        node.metrics.redirects.inc()
        raise LeaderRedirect(info.leader.url + request.path_qs, info.leader.id)
    raise UnavailableError("no leader known (election in progress)", retry_after_s=1)


def query_bool(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise RequestError(f"{name} must be true or false", field=name)
    return raw in ("true", "1")


async def read_view(request: web.Request) -> tuple[CoordinatorNode, bool]:
    """Returns (node, stale). `consistent=true` is leader-only and fenced by a barrier."""
    if query_bool(request, "consistent"):
        node = require_leader(request)
        await node.barrier()
        return node, False
    node = node_of(request)
    return node, not node.is_ready_leader


def path_partition(request: web.Request, state: ClusterState) -> Partition:
    text = request.match_info["p"]
    # isascii first: '²'.isdigit() is True (int() then raises) and int('\u0661') is 1.
    if not (text.isascii() and text.isdigit()) or len(text) > 7:
        raise RequestError("partition must be a non-negative integer", field="partition")
    p = int(text)
    if p >= len(state.partitions):
        raise RequestError(
            f"partition {p} does not exist", code="not_found", status=404, field="partition"
        )
    return state.partitions[p]


def path_worker(request: ApiRequest) -> WorkerId:
    wid = request.match_info["worker_id"]
    if not valid_id(wid):
        raise RequestError("worker id must match [A-Za-z0-9._-]{1,64}", field="worker_id")
    return WorkerId(wid)


def idempotency_key(request: ApiRequest, principal: str, command: str) -> str:
    """The request id a command is deduplicated under: the client's Idempotency-Key scoped
    to who sent it and which command, so a key one principal used never answers another's
    request (a worker's key made a later admin call with that key silently not apply)."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return new_request_id()
    if not valid_id(key):
        raise RequestError(
            "Idempotency-Key must match [A-Za-z0-9._-]{1,64}", field="Idempotency-Key"
        )
    return hashlib.sha256(f"{principal}\x00{command}\x00{key}".encode()).hexdigest()


def partition_view(
    p: Partition, failing: FailingReports | None = None, progress: ProgressReports | None = None
) -> m.PartitionView:
    ck = p.checkpoint
    report = None if failing is None else failing.of(p.partition, p.owner, p.epoch)
    seen = None if progress is None else progress.of(p.partition, p.owner, p.epoch)
    return m.PartitionView(
        partition=p.partition,
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
        stuck=p.stuck or None,
    )


def lag_of(seen: PartitionProgress) -> int | None:
    return None if seen.source_end is None else max(0, seen.source_end - seen.offset)


def _progress(node: CoordinatorNode) -> ProgressReports | None:
    """The leader's heartbeat progress reports; None on a follower (it hears none)."""
    return node.metrics.progress if node.is_ready_leader else None


def _failing(request: web.Request, node: CoordinatorNode) -> FailingReports | None:
    """The leader's failing-batch reports; None on a follower (it hears no heartbeats)."""
    return request.app[DUTIES_KEY].failing if node.is_ready_leader else None


def summary(state: ClusterState) -> m.ClusterSummary:
    return m.ClusterSummary(**state.summary())


def raise_rejected(planned: tuple[Move, ...] | Rejected) -> tuple[Move, ...]:
    """A planning query's rejection as the request's error (nothing was proposed)."""
    if isinstance(planned, Rejected):
        raise RequestError(
            planned.message, code=planned.code, status=planned.status, field=planned.field
        )
    return planned


def migration_refs(value: dict[str, Any]) -> list[m.MigrationRef]:
    return [
        m.MigrationRef(id=x.get("id"), partition=x["partition"], from_=x["from"], to=x["to"])
        for x in value.get("migrations", [])
    ]


# -- cluster ----------------------------------------------------------------------------------


@route(
    "GET",
    "/v1/health",
    "Node role, Raft indexes and the cluster summary",
    response=m.HealthResponse,
)
async def health(request: web.Request) -> web.Response:
    node = node_of(request)
    want_digest = query_bool(request, "digest")
    with node.read() as state:
        cluster = summary(state)
        # The copy and this applied_index belong together (both taken under the apply lock,
        # except in the instant between an entry's apply and pysyncobj's counter bump); the
        # encoding happens after the lock is released.
        copy = state.detached() if want_digest else None
        info = node.leader_info()
    digest = None
    if copy is not None:
        digest = await asyncio.to_thread(lambda: hashlib.sha256(encode_state(copy)).hexdigest())
    st = info.status
    return _json(
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
            nodes=[m.NodeRef(id=n.id, url=n.url) for n in node.config.nodes],
        )
    )


@route("GET", "/v1/status", "Cluster status from this node's state", response=m.StatusResponse)
async def status(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    info = node.leader_info()
    with node.read() as state:
        by_status = {s.value: 0 for s in PartitionStatus}
        for p in state.partitions:
            by_status[p.status.value] += 1
        by_state = {s.value: 0 for s in WorkerState}
        for w in state.workers.values():
            by_state[w.state.value] += 1
        body = m.StatusResponse(
            generation=state.generation,
            applied_index=info.status.applied_index,
            stale=stale,
            node_id=node.node_id,
            role=info.role.value,
            leader_id=None if info.leader is None else info.leader.id,
            term=info.status.term,
            cluster=summary(state),
            partitions_by_status=by_status,
            workers_by_state=by_state,
            migrations_in_flight=len(state.in_flight_migrations()),
        )
    return _json(body)


@route("GET", "/v1/partitions", "The partition table", response=m.PartitionsResponse)
async def partitions(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
    with node.read() as state:
        body = m.PartitionsResponse(
            generation=state.generation,
            applied_index=applied,
            stale=stale,
            partitions=[
                partition_view(p, _failing(request, node), _progress(node))
                for p in state.partitions
            ],
        )
    return _json(body)


@route("GET", "/v1/partitions/{p}", "One partition", response=m.PartitionResponse)
async def partition(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
    with node.read() as state:
        view = partition_view(
            path_partition(request, state), _failing(request, node), _progress(node)
        )
        body = m.PartitionResponse(
            generation=state.generation, applied_index=applied, stale=stale, **view.model_dump()
        )
    return _json(body)


@route(
    "GET",
    "/v1/partitions/{p}/history",
    "The partition's last ownership changes",
    response=m.HistoryResponse,
)
async def partition_history(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
    with node.read() as state:
        p = path_partition(request, state)
        body = m.HistoryResponse(
            generation=state.generation,
            applied_index=applied,
            stale=stale,
            partition=p.partition,
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
    return _json(body)


@route("GET", "/v1/workers", "Registered workers", response=m.WorkersResponse)
async def workers(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
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
            )
            for w in sorted(state.workers.values(), key=lambda w: w.worker_id)
        ]
        body = m.WorkersResponse(
            generation=state.generation, applied_index=applied, stale=stale, workers=views
        )
    return _json(body)


@route(
    "GET",
    "/v1/workers/{worker_id}/assignment",
    "Partitions a worker owns",
    response=m.AssignmentResponse,
)
async def assignment(request: web.Request) -> web.Response:
    wid = path_worker(request)
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
    with node.read() as state:
        if wid not in state.workers:
            raise RequestError(
                f"unknown worker {wid}", code="not_found", status=404, field="worker_id"
            )
        body = m.AssignmentResponse(
            generation=state.generation,
            applied_index=applied,
            stale=stale,
            worker_id=wid,
            assignment=[
                m.AssignmentEntry(partition=p, epoch=e) for p, e in state.assignment_of(wid)
            ],
        )
    return _json(body)


@route("GET", "/v1/migrations", "Migrations, in flight first", response=m.MigrationsResponse)
async def migrations(request: web.Request) -> web.Response:
    node, stale = await read_view(request)
    applied = node.log.status().applied_index
    with node.read() as state:
        ms = list(state.migrations.values())
        in_flight = [x for x in ms if x.phase not in (MigrationPhase.DONE, MigrationPhase.ABORTED)]
        done = [x for x in ms if x.phase in (MigrationPhase.DONE, MigrationPhase.ABORTED)]
        body = m.MigrationsResponse(
            generation=state.generation,
            applied_index=applied,
            stale=stale,
            in_flight=len(in_flight),
            migrations=[
                m.MigrationView(
                    id=x.migration_id,
                    partition=x.partition,
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
    return _json(body)


# -- workers ----------------------------------------------------------------------------------


@route(
    "POST",
    "/v1/workers",
    "Register a worker (new incarnation, signed token)",
    request=m.RegisterRequest,
    response=m.RegisterResponse,
    leader_only=True,
    auth="join",  # only when join_token is set
)
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
    request.app[DUTIES_KEY].registered(body.worker_id)
    cfg = node.config
    token, expires_at_ms = fresh_token(node, body.worker_id, incarnation)
    return _json(
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
    one. Renewing on every heartbeat cost an HMAC each (an eighth of the handler, profiled)
    and made every reply differ; now a worker's reply changes with the generation and about
    once per half lifetime, and a heartbeating worker's token still never lapses."""
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


@route(
    "POST",
    "/v1/workers/{worker_id}/heartbeat",
    "Liveness + load; returns the worker's assignment",
    request=m.HeartbeatRequest,
    response=m.HeartbeatResponse,
    leader_only=True,
    auth="worker",
)
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


@route(
    "POST",
    "/v1/checkpoints",
    "Checkpoint acks; each accepted or fenced",
    request=m.CheckpointsRequest,
    response=m.CheckpointsResponse,
    leader_only=True,
    auth="worker",
)
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
                    CheckpointReportCmd(
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
    return _json(m.CheckpointsResponse(results=results))


@route(
    "POST",
    "/v1/workers/{worker_id}/drain",
    "Graceful leave: move the worker's partitions away, then LEFT",
    response=m.DrainResponse,
    status=202,
    leader_only=True,
    auth="worker-or-admin",
)
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
    return _json(
        m.DrainResponse(worker_id=wid, state=value["state"], migrations=migration_refs(value)),
        status=202,
    )


# -- admin ----------------------------------------------------------------------------------


def require_admin(request: web.Request, node: CoordinatorNode) -> None:
    verify_token(node.config.admin_token, request.headers.get("Authorization"), "admin")


@route(
    "POST",
    "/v1/admin/reassign",
    "Plan and start migrations (balance or explicit moves)",
    request=m.ReassignRequest,
    response=m.ReassignResponse,
    status=202,
    leader_only=True,
    auth="admin",
)
async def reassign(request: web.Request) -> web.Response:
    node = require_leader(request)
    require_admin(request, node)
    body = await parse(request, m.ReassignRequest)
    if (body.strategy is None) == (body.moves is None):
        raise RequestError("give exactly one of strategy or moves", field="strategy")
    planner, now = request.app[DUTIES_KEY].query()
    with node.read() as state:
        moves = raise_rejected(
            planner.plan_reassign(
                state,
                now,
                balance=body.strategy == "balance",
                moves=[(mv.partition, mv.to) for mv in body.moves or []],
            )
        )
    if body.dry_run or not moves:
        refs = [
            m.MigrationRef(id=None, partition=x.partition, from_=x.source, to=x.target)
            for x in moves
        ]
        return _json(m.ReassignResponse(dry_run=body.dry_run, migrations=refs), status=202)
    value = await node.submit(
        PlanMigrations(moves=moves, reason=MigrationReason.ADMIN, now_ms=now_ms()),
        idempotency_key(request, "admin", "reassign"),
    )
    return _json(m.ReassignResponse(dry_run=False, migrations=migration_refs(value)), status=202)


@route(
    "POST",
    "/v1/admin/migrations/{migration_id}/abort",
    "Abort a migration that has not handed off",
    response=m.AbortResponse,
    leader_only=True,
    auth="admin",
)
async def abort_migration(request: web.Request) -> web.Response:
    node = require_leader(request)
    require_admin(request, node)
    mid = request.match_info["migration_id"]
    if not valid_id(mid):
        raise RequestError("migration id must match [A-Za-z0-9._-]{1,64}", field="migration_id")
    await node.submit(
        AbortMigration(migration_id=MigrationId(mid), note="aborted by operator", now_ms=now_ms()),
        idempotency_key(request, "admin", f"abort:{mid}"),
    )
    with node.read() as state:
        mig = state.migrations.get(MigrationId(mid))
        phase = "aborted" if mig is None else mig.phase.value
    return _json(m.AbortResponse(id=mid, phase=phase))


@route(
    "POST",
    "/v1/admin/partitions/{p}/reset",
    "Forget an ASSIGNING partition's checkpoints; its owner replays it from offset 0",
    response=m.ResetResponse,
    leader_only=True,
    auth="admin",
)
async def reset_partition(request: web.Request) -> web.Response:
    node = require_leader(request)
    require_admin(request, node)
    with node.read() as state:
        p = path_partition(request, state).partition
    value = await node.submit(
        ResetPartition(partition=p, note="reset by operator", now_ms=now_ms()),
        idempotency_key(request, "admin", f"reset:{p}"),
    )
    return _json(m.ResetResponse(partition=value["partition"], epoch=value["epoch"]))


@route(
    "POST",
    "/v1/admin/barrier",
    "Commit a no-op command (tests, drills)",
    leader_only=True,
    auth="admin",
)
async def admin_barrier(request: web.Request) -> web.Response:
    node = require_leader(request)
    require_admin(request, node)
    value = await node.submit(Barrier(nonce=new_request_id()))
    return _json({"ok": True, **value})


# -- meta -----------------------------------------------------------------------------------


@route("GET", "/metrics", "Prometheus metrics")
async def metrics(request: web.Request) -> web.Response:
    node = node_of(request)
    return web.Response(
        body=node.metrics.render(),
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


@route("GET", "/v1/openapi.json", "This document")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


# Path parameters as the handlers parse them (path_partition, path_worker, valid_id).
_PATH_PARAMS: dict[str, dict[str, Any]] = {
    "{p}": {"type": "integer", "minimum": 0, "maximum": 9_999_999},
    "{worker_id}": {"type": "string", "pattern": m.ID_REGEX},
    "{migration_id}": {"type": "string", "pattern": m.ID_REGEX},
}


def _error_responses(
    r: RouteDoc, has_path_params: bool, consistent: bool, err: dict[str, Any]
) -> dict[str, Any]:
    """Every error status the operation can answer, each with the JSON error shape."""
    statuses = {"400": "Bad input (the field named)"}
    if has_path_params:
        statuses["404"] = "No such partition, worker or migration"
    if r.method == "POST":
        statuses["409"] = "Conflict: fenced, stale epoch or incarnation, wrong state"
    if r.request is not None:
        statuses["413"] = "Body larger than body_bytes_max"
    if r.auth:
        statuses["401"] = "Missing or invalid token"
        statuses["403"] = "A valid token that may not do this"
    if r.leader_only or consistent:
        statuses["503"] = "No leader / not ready / outcome unknown (Retry-After)"
    out: dict[str, Any] = {
        code: {"description": text, "content": err} for code, text in statuses.items()
    }
    if r.leader_only or consistent:
        out["307"] = {
            "description": "Sent to the leader (Location, Ripple-Leader)",
            "headers": {"Location": {"schema": {"type": "string"}}},
        }
    return out


# OpenAPI links: where one answer's values feed the next call (clients and schemathesis's
# stateful runs follow them). (method, path) -> {link name: (target operationId, params)}.
_LINKS: dict[tuple[str, str], dict[str, tuple[str, dict[str, str]]]] = {
    ("POST", "/v1/workers"): {
        "Assignment": ("assignment", {"worker_id": "$response.body#/worker_id"}),
        "Heartbeat": ("heartbeat", {"worker_id": "$response.body#/worker_id"}),
        "Drain": ("drain", {"worker_id": "$response.body#/worker_id"}),
    },
    ("GET", "/v1/partitions"): {
        "Partition": ("partition", {"p": "$response.body#/partitions/0/partition"}),
        "History": ("partition_history", {"p": "$response.body#/partitions/0/partition"}),
        "Reset": ("reset_partition", {"p": "$response.body#/partitions/0/partition"}),
    },
    ("POST", "/v1/admin/reassign"): {
        "Abort": ("abort_migration", {"migration_id": "$response.body#/migrations/0/id"}),
    },
    ("GET", "/v1/migrations"): {
        "Abort": ("abort_migration", {"migration_id": "$response.body#/migrations/0/id"}),
    },
}


def openapi_document() -> dict[str, Any]:
    models: set[type[BaseModel]] = {m.ErrorBody}
    for r in ROUTES:
        for model in (r.request, r.response):
            if model is not None:
                models.add(model)
    ordered = sorted(models, key=lambda x: x.__name__)
    keys, schema = models_json_schema(
        [(x, "validation" if x.__name__.endswith("Request") else "serialization") for x in ordered],
        ref_template="#/components/schemas/{model}",
    )
    ref = {model: keys[(model, mode)]["$ref"] for (model, mode) in keys}
    err = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    paths: dict[str, dict[str, Any]] = {}
    for r in ROUTES:
        op: dict[str, Any] = {
            "operationId": r.handler.__name__,
            "summary": r.summary,
            "responses": {},
        }
        if r.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": ref[r.request]}}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        if r.response is not None:
            ok["content"] = {"application/json": {"schema": {"$ref": ref[r.response]}}}
        if (r.method, r.path) in _LINKS:
            ok["links"] = {
                name: {"operationId": target, "parameters": params}
                for name, (target, params) in _LINKS[(r.method, r.path)].items()
            }
        op["responses"][str(r.status)] = ok
        query = None
        if r.path == "/v1/health":
            query = "digest"
        elif r.method == "GET" and r.path.startswith("/v1/") and r.path != "/v1/openapi.json":
            query = "consistent"
        params = [
            {"name": part[1:-1], "in": "path", "required": True, "schema": _PATH_PARAMS[part]}
            for part in r.path.split("/")
            if part.startswith("{")
        ]
        if query is not None:
            params.append(
                {"name": query, "in": "query", "required": False, "schema": {"type": "boolean"}}
            )
        op["responses"].update(_error_responses(r, bool(params), query == "consistent", err))
        if r.auth:
            # Registration needs the join token only when one is configured: optional.
            op["security"] = [{"bearer": []}, {}] if r.auth == "join" else [{"bearer": []}]
        if params:
            op["parameters"] = params
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Ripple coordinator", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": schema.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


# -- app ----------------------------------------------------------------------------------------


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    resource = request.match_info.route.resource
    route_name = resource.canonical if resource is not None else "unmatched"
    try:
        response = await handler(request)
    except Exception as exc:
        response = error_response(request, exc)
    return finish(request, response, route_name)


def error_response(request: ApiRequest, exc: Exception) -> web.Response:
    """What an exception out of a handler answers (the JSON error shape; never a trace)."""
    if isinstance(exc, RippleError):
        return _error(exc)
    if isinstance(exc, web.HTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(
            exc.status, "http_error"
        )
        response = web.json_response({"error": code, "message": exc.reason}, status=exc.status)
        if "Allow" in exc.headers:  # a 405 names the methods the path has (RFC 9110)
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return web.json_response({"error": "internal", "message": "internal error"}, status=500)


def finish(request: ApiRequest, response: R, route_name: str) -> R:
    """Every answer's CORS headers and its count, whichever path served it."""
    dashboard.cors_headers(request, response, request.app[ORIGINS_KEY])
    request.app[NODE_KEY].metrics.requests.inc(route_name, request.method, response.status)
    return response


def create_app(node: CoordinatorNode, duties: Any) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware], client_max_size=node.config.body_bytes_max
    )
    app[NODE_KEY] = node
    app[DUTIES_KEY] = duties
    app[ASSIGNMENT_TEXTS_KEY] = AssignmentTexts()
    app[ORIGINS_KEY] = dashboard.node_origins(node.config)
    node.metrics.attach(node, duties.liveness_of)
    # Grouped by path: aiohttp makes one resource of consecutive routes on one path, and the
    # OPTIONS answer (its Allow header) is per resource; interleaved, GET and POST
    # /v1/workers were two resources and OPTIONS named GET only (found by schemathesis).
    for r in sorted(ROUTES, key=lambda route: route.path):
        app.router.add_route(r.method, r.path, r.handler)
    dashboard.install(app, node.config)
    return app
