"""The app factory: one aiohttp application serving every route of the coordinator's API.

Owns the joined route table (`ROUTES`), the error middleware and `finish`, which every
answer passes through whichever path served it (aiohttp's or the front door's): each gets
the cluster's CORS headers and is counted once by route, method and status. A request that
fails leaves as the JSON error shape (`answers.error_response`), never as a trace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiohttp import web

from coordinator.service import dashboard
from coordinator.service.admission_load import LagSampler, LoadGate, RequestClass, classify
from coordinator.service.auth import Admission
from coordinator.service.http import (
    admin_routes,
    node_routes,
    pipeline_routes,
    rescale_routes,
    token_routes,
    views,
    worker_routes,
)
from coordinator.service.http.answers import error_response
from coordinator.service.http.context import (
    ADMISSION_KEY,
    ASSIGNMENT_TEXTS_KEY,
    DUTIES_KEY,
    MEMBERSHIP_KEY,
    NODE_KEY,
    ORIGINS_KEY,
    Duties,
)
from coordinator.service.http.openapi import Handler, Route
from coordinator.service.http.openapi import openapi_document as document_of
from coordinator.service.http.request import ApiRequest
from coordinator.service.membership import MembershipChanges
from coordinator.service.node_parts import ApiNode
from coordinator.service.replies import AssignmentTexts
from coordinator.service.spec_check import SpecChecker
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "LOAD_GATE_KEY",
    "ROUTES",
    "create_app",
    "error_middleware",
    "finish",
    "load_gate_of",
    "openapi_document",
    "shed_middleware",
]

R = TypeVar("R", bound=web.StreamResponse)

LOAD_GATE_KEY = web.AppKey("load_gate", LoadGate)
# How often the event loop's lag is measured (admission_load.LagSampler).
LAG_SAMPLE_PERIOD_MS = 50


async def metrics(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.Response(
        body=node.metrics.render(),
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


_META_ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/metrics", handler=metrics, summary="Prometheus metrics"),
    Route(method="GET", path="/v1/openapi.json", handler=openapi, summary="This document"),
)

# Every route, in the order the OpenAPI document lists them.
ROUTES: tuple[Route, ...] = (
    views.ROUTES
    + node_routes.ROUTES
    + worker_routes.ROUTES
    + admin_routes.ROUTES
    + rescale_routes.ROUTES
    + pipeline_routes.ROUTES
    + token_routes.ROUTES
    + _META_ROUTES
)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of every route this app serves."""
    return document_of(ROUTES)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    resource = request.match_info.route.resource
    route_name = resource.canonical if resource is not None else "unmatched"
    try:
        response = await handler(request)
    except Exception as exc:
        response = error_response(request, exc)
    return finish(request, response, route_name)


@web.middleware
async def shed_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admit by class (admission_load.py) before the handler reads the body; a refusal is
    the 503 `overloaded` answer `error_middleware` around it renders, with Retry-After."""
    gate = request.app[LOAD_GATE_KEY]
    cls = classify(request.method, request.path)
    gate.admit(cls)
    try:
        return await handler(request)
    finally:
        gate.leave(cls)


def load_gate_of(node: ApiNode) -> LoadGate:
    cfg = node.config
    return LoadGate(
        in_flight_max={
            RequestClass.LIVENESS: cfg.liveness_in_flight_max,
            RequestClass.WRITES: cfg.writes_in_flight_max,
            RequestClass.READS: cfg.reads_in_flight_max,
        },
        shed_lag_ms={
            RequestClass.WRITES: round(cfg.writes_shed_lag_s * 1000),
            RequestClass.READS: round(cfg.reads_shed_lag_s * 1000),
        },
        retry_after_s=cfg.overload_retry_after_s,
    )


async def _sample_lag(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(
        LagSampler(app[LOAD_GATE_KEY], SYSTEM_CLOCK, LAG_SAMPLE_PERIOD_MS).run()
    )
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def finish(request: ApiRequest, response: R, route_name: str) -> R:
    """Every answer's CORS headers and its count, whichever path served it."""
    dashboard.cors_headers(request, response, request.app[ORIGINS_KEY])
    request.app[NODE_KEY].metrics.requests.inc(route_name, request.method, response.status)
    return response


def create_app(node: ApiNode, duties: Duties, changes: MembershipChanges) -> web.Application:
    app = web.Application(
        middlewares=[error_middleware, shed_middleware], client_max_size=node.config.body_bytes_max
    )
    app[NODE_KEY] = node
    app[DUTIES_KEY] = duties
    app[MEMBERSHIP_KEY] = changes
    app[ADMISSION_KEY] = Admission.of(node.config)
    app[ASSIGNMENT_TEXTS_KEY] = AssignmentTexts()
    app[pipeline_routes.SPEC_CHECKER_KEY] = SpecChecker()
    gate = app[LOAD_GATE_KEY] = load_gate_of(node)
    node.metrics.registry.register(gate)
    app.cleanup_ctx.append(_sample_lag)
    origins = dashboard.NodeOrigins(node)
    app[ORIGINS_KEY] = origins
    node.metrics.attach(node, duties.liveness_of, lambda: changes.in_flight)
    # Grouped by path: aiohttp makes one resource of consecutive routes on one path, and the
    # OPTIONS answer (its Allow header) is per resource, so interleaved routes on one path
    # would name only some of its methods.
    for r in sorted(ROUTES, key=lambda route: route.path):
        app.router.add_route(r.method, r.path, r.handler)
    dashboard.install(app, origins)
    return app
