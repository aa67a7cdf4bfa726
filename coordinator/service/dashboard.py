"""The operator's dashboard: static files under `/ui`, and the cross-origin rules it needs.

Every node serves the same page (`coordinator/service/ui/`, package data, ES modules, no
build step) and `/ui/enums.json`, the core's state names the page uses
(`dashboard_enums.py`). Besides those the page reads only the public `/v1` API: the node
that served it, and also the other nodes' `/v1/health` and the leader's answers (liveness
and load live on the leader only), which are other origins (another port or host): so `/v1`
answers carry CORS headers for exactly the cluster's own node URLs (the cluster file's, and
the nodes the log names now), never `*`, and a preflight for the admin writes
(`Authorization`) is answered for those origins only. Invariant: the page can never run a
script, style or connection that is not from this node or a sibling node (the
Content-Security-Policy below), and it writes nothing unless an admin token is entered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from coordinator.service.dashboard_enums import ENUMS_FILE, enums_json
from shared.errors import RequestError

if TYPE_CHECKING:
    from coordinator.service.node_parts import Members

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

UI_PATH = "/ui"
# name under coordinator/service/ui/ -> content type. Every file there, and nothing else: a
# module the page imports but this table lacks would answer 404 (a unit test compares both).
UI_FILES = {
    "index.html": "text/html",
    "style.css": "text/css",
    "favicon.svg": "image/svg+xml",
    "app.js": "text/javascript",
    "actions.js": "text/javascript",
    "api.js": "text/javascript",
    "dom.js": "text/javascript",
    "enums.js": "text/javascript",
    "format.js": "text/javascript",
    "panel_cluster.js": "text/javascript",
    "panel_detail.js": "text/javascript",
    "panel_grid.js": "text/javascript",
    "panel_lag.js": "text/javascript",
    "panel_migrations.js": "text/javascript",
    "panel_pipelines.js": "text/javascript",
    "panel_plan.js": "text/javascript",
    "panel_rescale.js": "text/javascript",
    "panel_workers.js": "text/javascript",
    "refresh.js": "text/javascript",
    "store.js": "text/javascript",
    "widgets.js": "text/javascript",
}
PREFLIGHT_MAX_AGE_S = 600
CORS_METHODS = frozenset({"GET", "POST"})
CORS_REQUEST_HEADERS = "Authorization, Content-Type, Idempotency-Key"
# What the page may read from a cross-origin answer besides the safelisted headers.
CORS_EXPOSED_HEADERS = "Location, Ripple-Leader, Retry-After"


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str


def load_assets() -> dict[str, Asset]:
    """Read the static files and build `enums.json` once, at app creation: a missing file (a
    broken install) fails the node's start, not the first page load."""
    root = resources.files("coordinator.service") / "ui"
    assets = {
        name: Asset((root / name).read_bytes(), content_type)
        for name, content_type in UI_FILES.items()
    }
    assets[ENUMS_FILE] = Asset(enums_json(), "application/json")
    return assets


class NodeOrigins:
    """The cluster's own origins, as they are now: the nodes of the cluster file and every
    voter and learner this node's log names (a node added online is a sibling at once)."""

    def __init__(self, node: Members) -> None:
        self._node = node
        self._configured = frozenset(_origin(n.url) for n in node.config.nodes)

    def current(self) -> frozenset[str]:
        membership = self._node.log.membership()
        live = membership.voters + membership.learners
        return self._configured | {_origin(self._node.spec_of(m).url) for m in live}

    def __contains__(self, origin: object) -> bool:
        return isinstance(origin, str) and origin.lower() in self.current()


def _origin(url: str) -> str:
    return url.rstrip("/").lower()


def content_security_policy(origins: frozenset[str]) -> str:
    connect = " ".join(["'self'", *sorted(origins)])
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


class _Requested(Protocol):
    """What `cors_headers` reads of a request: aiohttp's, or the front door's."""

    @property
    def path(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def cors_headers(
    request: _Requested, response: web.StreamResponse, origins: Container[str]
) -> None:
    """The CORS headers of a `/v1` answer: `Vary: Origin` always, the allow and expose
    headers for the cluster's own origins only. Called by the API's `finish` on every answer
    it returns: a plain call costs less than an `on_response_prepare` signal on the leader's
    hottest routes."""
    if not request.path.startswith("/v1/"):
        return
    response.headers.add("Vary", "Origin")
    origin = request.headers.get("Origin")
    if origin is not None and origin.lower() in origins:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSED_HEADERS


def install(app: web.Application, origins: NodeOrigins) -> None:
    """Add the dashboard's routes to the coordinator's app (its CORS headers are added by
    the API's middleware, `cors_headers`)."""
    assets = load_assets()
    page_headers = {
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        # The files are tiny and change with the installed version: always revalidate.
        "Cache-Control": "no-cache",
    }

    def serve(name: str) -> web.Response:
        asset = assets[name]
        csp = content_security_policy(origins.current())  # the nodes as they are now
        return web.Response(
            body=asset.body,
            content_type=asset.content_type,
            charset="utf-8",
            headers={"Content-Security-Policy": csp, **page_headers},
        )

    async def root(_request: web.Request) -> web.Response:
        # Returned, not raised: the error middleware turns raised HTTP exceptions into JSON.
        return web.Response(status=302, headers={"Location": UI_PATH})

    async def index(_request: web.Request) -> web.Response:
        return serve("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in assets or name == "index.html":
            raise RequestError(f"no such file {UI_PATH}/{name}", code="not_found")
        return serve(name)

    def options_handler(methods: frozenset[str]) -> Handler:
        """OPTIONS on one /v1 resource: a CORS preflight when the request is one (it has an
        Origin and Access-Control-Request-Method), else the plain answer (Allow)."""
        allow = ", ".join(sorted(methods | {"OPTIONS"}))
        cross = sorted(methods & CORS_METHODS)

        async def options(request: web.Request) -> web.Response:
            method = request.headers.get("Access-Control-Request-Method")
            if "Origin" not in request.headers or method is None:
                return web.Response(status=204, headers={"Allow": allow})
            if request.headers["Origin"].lower() not in origins:
                raise RequestError(
                    "cross-origin requests are allowed from the cluster's own nodes only",
                    code="forbidden",
                    field="Origin",
                )
            if method not in cross:
                raise RequestError(
                    f"{method} is not allowed cross-origin here (allowed: {', '.join(cross)})",
                    code="method_not_allowed",
                    field="Access-Control-Request-Method",
                )
            return web.Response(
                status=204,
                headers={
                    "Allow": allow,
                    "Access-Control-Allow-Methods": ", ".join(cross),
                    "Access-Control-Allow-Headers": CORS_REQUEST_HEADERS,
                    "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
                },
            )

        return options

    app.router.add_get("/", root)
    app.router.add_get(UI_PATH, index)
    app.router.add_get(UI_PATH + "/", index)
    app.router.add_get(UI_PATH + "/{name}", asset)
    # On each /v1 resource rather than one catch-all, so an unknown path stays a 404. Call
    # install() after the API's routes are added.
    for resource in list(app.router.resources()):
        if isinstance(resource, web.Resource) and resource.canonical.startswith("/v1/"):
            methods = frozenset(r.method for r in resource)
            resource.add_route("OPTIONS", options_handler(methods))
