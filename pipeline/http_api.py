"""The worker's HTTP API: routes, request parsing, the JSON error shape, the listener.

Each handler reads top-down: check who is asking, parse, act through hosting, the
checkpoint schedule or the holdings, serialize; none of them holds partition logic.
Invariant: every failed request answers the JSON error shape (`{"error", "message",
"field"?}`) with its status and never a stack trace; bad input is a 400 naming the field;
the leader's calls (host, release, checkpoint, warm, unwarm, cut, build) need its call token,
compared in constant time, or get a 401; records produced through the worker need a token
the coordinator says may produce to that pipeline (`pipeline/ingest.py`).
the leader's calls (host, release, checkpoint, warm, unwarm, cut, both builds) need its call
token, compared in constant time, or get a 401.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pipeline.cutting import Cutting
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.hosting import Hosting
from pipeline.ingest import RECORDS_BODY_BYTES_MAX, RECORDS_ROUTE, Ingest
from pipeline.rebuild import Rebuild
from pipeline.session import Session
from pipeline.settings import WorkerSettings
from pipeline.source import KEY_CHARS_MAX, generation_of
from pipeline.spec.aggregations import SketchOps
from pipeline.spec.run import PipelineRun
from pipeline.state import KeyState
from shared.errors import RequestError, RippleError, UnavailableError
from shared.http_statuses import status_of
from shared.messages.checkpoint import CHECKPOINT_ROUTE, CheckpointReply
from shared.messages.common import STATUS_SCHEDULED, ErrorReply, authorized
from shared.messages.host import HOST_ROUTE, HostRequest
from shared.messages.pipeline_rescale import PIPELINE_BUILD_ROUTE, PipelineBuildRequest
from shared.messages.release import RELEASE_ROUTE, ReleaseRequest
from shared.messages.rescale import BUILD_ROUTE, CUT_ROUTE, BuildRequest, CutRequest
from shared.messages.warm import UNWARM_ROUTE, WARM_ROUTE, UnwarmReply, UnwarmRequest, WarmRequest
from shared.routing import SLOT_BASE
from shared.spec.ddl import TypeKind
from shared.tls import server_context

__all__ = ["BODY_BYTES_MAX", "WorkerApi", "key_json"]

log = logging.getLogger(__name__)

BODY_BYTES_MAX = 64 * 1024
# A build names one cut per old partition (up to CUTS_MAX, about 150 bytes each); every
# other body keeps BODY_BYTES_MAX.
BUILD_BODY_BYTES_MAX = 160 * 1024 * 1024
# A recorded pipeline's partition numbers come from a counter that only grows: up to int64.
PARTITION_DIGITS_MAX = 19
SLOT_NUMBER_MAX = 2**63 - 1
# A recorded pipeline's /state lists at most this many state rows (a windowed spec's rows are
# (key, window) ones), in the store's order, with "truncated" when there are more: a key is
# read by its own call, at any state size.
STATE_ROWS_MAX = 1000
GENERATION_DIGITS_MAX = 7  # a key read's ?generation= (ROUTING_GENERATIONS_MAX is far below)
CONFLICT = 409
INTERNAL = 500
UNAVAILABLE = 503

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def key_json(ks: KeyState) -> dict[str, int | float]:
    return {"count": ks.count, "sum": ks.sum, "min": ks.min, "max": ks.max, "last": ks.last}


def _invalid(message: str, field: str) -> RequestError:
    return RequestError(message, field=field)


class WorkerApi:
    def __init__(
        self,
        settings: WorkerSettings,
        session: Session,
        holdings: Holdings,
        hosting: Hosting,
        schedule_checkpoint: Callable[[], None],
        health: Callable[[], dict[str, object]],
        not_ready: Callable[[], str | None],
        metrics: Callable[[], bytes],
        cutting: Cutting,
        rebuild: Rebuild,
        sketches: Callable[[], SketchOps] | None = None,
        ingest: Ingest | None = None,
    ) -> None:
        self.settings = settings
        self.session = session
        self.holdings = holdings
        self.hosting = hosting
        self.schedule_checkpoint = schedule_checkpoint
        self.health = health
        self.not_ready = not_ready
        self.metrics = metrics
        self.cutting = cutting
        self.rebuild = rebuild
        # Reads a recorded pipeline's sketches (approximate distinct counts) on Spark.
        self.sketches = sketches
        # Appends rows producers send with a pipeline's token (None: this worker takes none).
        self.ingest = ingest

    def app(self) -> web.Application:
        app = web.Application(client_max_size=BUILD_BODY_BYTES_MAX, middlewares=[_error_middleware])
        app.router.add_post(HOST_ROUTE, self.handle_host)
        app.router.add_post(RELEASE_ROUTE, self.handle_release)
        app.router.add_post(CHECKPOINT_ROUTE, self.handle_checkpoint)
        app.router.add_post(WARM_ROUTE, self.handle_warm)
        app.router.add_post(UNWARM_ROUTE, self.handle_unwarm)
        app.router.add_post(CUT_ROUTE, self.handle_cut)
        app.router.add_post(BUILD_ROUTE, self.handle_build)
        app.router.add_post(RECORDS_ROUTE, self.handle_records)
        app.router.add_post(PIPELINE_BUILD_ROUTE, self.handle_pipeline_build)
        app.router.add_get("/v1/partitions/{p}/keys/{key}", self.handle_key)
        app.router.add_get("/v1/partitions/{p}/state", self.handle_state)
        app.router.add_get("/v1/health", self.handle_health)
        app.router.add_get("/v1/ready", self.handle_ready)
        app.router.add_get("/metrics", self.handle_metrics)
        return app

    def site(self, runner: web.AppRunner) -> web.TCPSite:
        """Where the worker API listens: `listen`, over TLS when a certificate is given."""
        host, port = self.settings.listen.rsplit(":", 1)
        ssl_context = None
        if self.settings.tls_cert:
            ssl_context = server_context(self.settings.tls_cert, self.settings.tls_key or "")
        return web.TCPSite(runner, host, int(port), ssl_context=ssl_context)

    # -- parsing -------------------------------------------------------------------------------

    def _authorize(self, request: web.Request) -> None:
        if not authorized(request.headers.get("Authorization", ""), self.session.call_token):
            raise RequestError("not this worker's cluster token", code="unauthorized")

    def _numbered(self, p: int) -> bool:
        """Whether `p` can be a partition's number: one of `default`'s, or a recorded
        pipeline's (SLOT_BASE and up; its run says whether it is one)."""
        if p >= SLOT_BASE:
            return p <= SLOT_NUMBER_MAX
        return p < max(self.session.total_partitions, self.session.generations.partitions_max, 1)

    def _partition(self, request: web.Request) -> int:
        text = request.match_info["p"]
        # isascii first: '²'.isdigit() is True (int() then raises) and int('\u0661') is 1.
        if (
            not (text.isascii() and text.isdigit())
            or len(text) > PARTITION_DIGITS_MAX
            or not self._numbered(int(text))
        ):
            raise _invalid("partition out of range", "partition")
        return int(text)

    async def _json(self, request: web.Request, bytes_max: int = BODY_BYTES_MAX) -> object:
        raw = bytearray()
        while len(raw) <= bytes_max:  # read() may return less than asked: loop to the bound
            chunk = await request.content.read(bytes_max + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
        if len(raw) > bytes_max:
            raise RequestError(
                f"body over {bytes_max} bytes",
                field="body",
                code="too_large",
            )
        try:
            body: object = json.loads(raw)
        except ValueError:
            raise _invalid("body is not valid JSON", "body") from None
        return body

    # -- the leader's calls --------------------------------------------------------------------

    async def handle_host(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = HostRequest.from_json(self._partition(request), await self._json(request))
        reply = await self.hosting.host(call)
        return web.json_response(reply.to_json())

    async def handle_release(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = ReleaseRequest.from_json(self._partition(request), await self._json(request))
        reply = await self.hosting.release(call)
        return web.json_response(reply.to_json())

    async def handle_warm(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = WarmRequest.from_json(self._partition(request), await self._json(request))
        if self.hosting.warming is None or call.partition >= SLOT_BASE:
            # A recorded pipeline's partitions move cold (pipeline/spec/run.py).
            raise UnavailableError(
                "this worker does not warm this partition up", code="warm_refused"
            )
        await self.hosting.learn_routing(call.partition, call.routing, call.checkpoint)
        return web.json_response((await self.hosting.warming.answer(call)).to_json())

    async def handle_unwarm(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = UnwarmRequest.from_json(self._partition(request), await self._json(request))
        warming = self.hosting.warming
        reply = UnwarmReply(partition=call.partition, dropped=False)
        return web.json_response((reply if warming is None else warming.unwarm(call)).to_json())

    async def handle_cut(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = CutRequest.from_json(self._partition(request), await self._json(request))
        return web.json_response((await self.cutting.cut(call)).to_json())

    async def handle_build(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = BuildRequest.from_json(await self._json(request, BUILD_BODY_BYTES_MAX))
        return web.json_response(self.rebuild.build(call).to_json())

    async def handle_pipeline_build(self, request: web.Request) -> web.Response:
        self._authorize(request)
        call = PipelineBuildRequest.from_json(await self._json(request, BUILD_BODY_BYTES_MAX))
        return web.json_response(self.rebuild.build_pipeline(call).to_json())

    async def handle_checkpoint(self, request: web.Request) -> web.Response:
        self._authorize(request)
        self.schedule_checkpoint()
        return web.json_response(CheckpointReply().to_json(), status=STATUS_SCHEDULED)

    # -- producers ---------------------------------------------------------------------------

    async def handle_records(self, request: web.Request) -> web.Response:
        if self.ingest is None:
            raise UnavailableError("this worker takes no records", code="unavailable")
        name, _ = await self.ingest.admit(request)  # before the body is read
        body = await self._json(request, RECORDS_BODY_BYTES_MAX)
        return web.json_response(await self.ingest.append(name, body))

    # -- lookups and health --------------------------------------------------------------------

    def _served(self, p: int) -> PartitionRuntime | None:
        """The runtime of `p` when this worker serves it as the owner: open, loaded, and
        the lease valid (no lease: another worker may own it by now)."""
        return self.holdings.held(p) if self.session.lease_valid() else None

    async def _not_owner(self, p: int) -> web.Response:
        owner = await self.session.owner_of(p)
        return web.json_response(
            {"error": "not_owner", "owner": owner, "message": f"partition {p} is not served here"},
            status=CONFLICT,
        )

    def _generation(self, request: web.Request) -> int | None:
        text = request.query.get("generation")
        if text is None:
            return None
        if not (text.isascii() and text.isdigit()) or len(text) > GENERATION_DIGITS_MAX:
            raise _invalid("generation must be a non-negative integer", "generation")
        return int(text)

    async def handle_key(self, request: web.Request) -> web.Response:
        p = self._partition(request)
        key = request.match_info["key"]
        if len(key) > KEY_CHARS_MAX:
            raise _invalid("key too long", "key")
        generation = self._generation(request)
        rt = self._served(p)
        if rt is None:
            return await self._not_owner(p)
        hosted = generation_of(rt.offset)
        if generation is not None and generation != hosted:
            # The client routed by another generation: its partition p holds other keys.
            raise RequestError(
                f"partition {p} here is of routing generation {hosted}; the client routed by "
                f"generation {generation}; current generation is "
                f"{max(hosted, self.session.generations.current)}",
                field="generation",
                code="stale_generation",
            )
        if rt.run is not None:
            rows, _ = await self._spec_rows(rt, [_typed_key(rt.run, key)])
            if not rows:
                raise RequestError(f"no records for key {key!r} yet", field="key", code="not_found")
            return web.json_response(
                {**rows[0], "partition": p, "epoch": rt.epoch, "offset": rt.offset}
            )
        ks = rt.state.get(key)
        if ks is None:
            raise RequestError(f"no records for key {key!r} yet", field="key", code="not_found")
        return web.json_response(
            {"key": key, **key_json(ks), "partition": p, "epoch": rt.epoch, "offset": rt.offset}
        )

    async def handle_state(self, request: web.Request) -> web.Response:
        p = self._partition(request)
        rt = self._served(p)
        if rt is None:
            return await self._not_owner(p)
        if rt.run is not None:
            rows, truncated = await self._spec_rows(rt, None)
            return web.json_response(
                {
                    "partition": p,
                    "epoch": rt.epoch,
                    "offset": rt.offset,
                    "pipeline": rt.run.name,
                    "spec_version": rt.run.version,
                    "rows": rows,
                    "truncated": truncated,
                }
            )
        return web.json_response(
            {
                "partition": p,
                "epoch": rt.epoch,
                "offset": rt.offset,
                "keys": {k: key_json(v) for k, v in sorted(rt.state.items())},
            }
        )

    async def _spec_rows(
        self, rt: PartitionRuntime, keys: list[Any] | None
    ) -> tuple[list[JsonRow], bool]:
        """A recorded pipeline's outputs of `keys` (None: the first STATE_ROWS_MAX rows), one
        JSON row per key; and whether rows were left out."""
        run, live = rt.run, rt.spec_state
        if run is None or live is None or self.sketches is None:
            raise UnavailableError(
                "this partition's results cannot be read here", code="unavailable"
            )
        sketches = self.sketches()
        # Read here, on the loop (one multi-get, or a bounded head): a dropped runtime's store
        # is destroyed only after its runtime lets go of it, never during a read.
        truncated = False
        if keys is None:
            state, truncated = live.head(STATE_ROWS_MAX)
        else:
            state = live.values_of(keys)
        results = await asyncio.to_thread(run.results, state, sketches, keys)
        return [
            {"key": k, **{name: _json_value(v) for name, v in outputs.items()}}
            for k, outputs in sorted(results.items(), key=lambda kv: (kv[0] is None, str(kv[0])))
        ], truncated

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.json_response(self.health())

    async def handle_ready(self, request: web.Request) -> web.Response:
        """200 once the worker is back at work (a readiness probe, a rolling restart's
        wait); 503 with the reason until then."""
        reason = self.not_ready()
        if reason is None:
            return web.json_response({"ready": True})
        return web.json_response({"ready": False, "reason": reason}, status=UNAVAILABLE)

    async def handle_metrics(self, request: web.Request) -> web.Response:
        """Prometheus text, computed from the worker's state at scrape time."""
        return web.Response(body=self.metrics(), content_type="text/plain", charset="utf-8")


@web.middleware
async def _error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RippleError as exc:
        error = ErrorReply(error=exc.code, message=exc.message, field=exc.field or None)
        return web.json_response(error.to_json(), status=status_of(exc))
    except web.HTTPException as exc:
        error = ErrorReply(error="http_error", message=exc.reason)
        return web.json_response(error.to_json(), status=exc.status)
    except Exception:  # the boundary: log, never leak a trace
        log.exception("worker handler failed on %s", request.path)
        error = ErrorReply(error="internal", message="internal error")
        return web.json_response(error.to_json(), status=INTERNAL)


JsonRow = dict[str, Any]


def _typed_key(run: PipelineRun, key: str) -> Any:
    """A key from a URL as the spec's key column types it (INT and BIGINT keys are numbers)."""
    column = run.spec.schema.column(run.spec.key)
    if column is not None and column.type.kind in (TypeKind.INT, TypeKind.BIGINT):
        try:
            return int(key)
        except ValueError:
            raise _invalid(f"key {key!r} is not an integer", "key") from None
    return key


def _json_value(value: Any) -> Any:
    """An output as JSON: decimals as their exact text, times in ISO 8601 (a windowed spec's
    open windows: a list of rows, each so)."""
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value
