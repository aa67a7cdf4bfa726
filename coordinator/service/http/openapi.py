"""The route table's row (`Route`) and the OpenAPI 3.1 document generated from the table.

The document is derived, never written by hand: every operation, its request and response
schemas (the pydantic models), its path and query parameters, every error status it can
answer and its security come from the rows and the models. test_openapi_contract and the
schemathesis runs hold the live API to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from coordinator.core.model import TOKEN_ID_LEN_MAX
from coordinator.service import models as m
from coordinator.service.http.request import PARTITION_DIGITS_MAX

__all__ = ["Handler", "Route", "openapi_document"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Who may call a route: a worker's token, the admin token, either, or (registration) the
# join token when one is configured, or (a pipeline's operations) the admin token or a token
# scoped to that pipeline.
Auth = Literal["worker", "admin", "worker-or-admin", "join", "admin-or-pipeline"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One row of a route table: what aiohttp routes, and what the document says of it."""

    method: str
    path: str
    handler: Handler
    summary: str
    request: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    leader_only: bool = False
    auth: Auth | None = None
    # The answer is a file (application/octet-stream), bounded by a setting (413 past it).
    binary: bool = False
    # Other success answers, by status: (status, model, what it means) (a dry run's 200).
    also: tuple[tuple[int, type[BaseModel], str], ...] = ()
    # Boolean query parameters the handler reads (`query_bool`), beside `consistent`.
    flags: tuple[str, ...] = ()
    # It reads `?pipeline=NAME` (`request.query_pipeline`): its partitions are that
    # pipeline's, by their own numbers; absent is `default`, an unknown name is a 404.
    pipeline: bool = False


# Path parameters as the handlers parse them (request.path_partition, request.path_worker,
# valid_id).
_PATH_PARAMS: dict[str, dict[str, Any]] = {
    "{p}": {"type": "integer", "minimum": 0, "maximum": 10**PARTITION_DIGITS_MAX - 1},
    "{worker_id}": {"type": "string", "pattern": m.ID_REGEX},
    "{migration_id}": {"type": "string", "pattern": m.ID_REGEX},
    "{node_id}": {"type": "string", "pattern": m.ID_REGEX},
    "{name}": {"type": "string", "pattern": m.ID_REGEX},
    "{token_id}": {"type": "string", "pattern": m.ID_REGEX, "maxLength": TOKEN_ID_LEN_MAX},
}


def _error_responses(
    r: Route, has_path_params: bool, consistent: bool, err: dict[str, Any]
) -> dict[str, Any]:
    """Every error status the operation can answer, each with the JSON error shape."""
    statuses = {"400": "Bad input (the field named)"}
    if has_path_params:
        statuses["404"] = "No such partition, worker, migration, node or pipeline"
    if r.method in ("POST", "DELETE"):
        statuses["409"] = (
            "Conflict: fenced, stale epoch or incarnation, wrong state, a change in flight"
        )
    if r.request is not None:
        statuses["413"] = "Body larger than body_bytes_max"
    if r.binary:
        statuses["413"] = "Answer larger than its bound (backup_bytes_max)"
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


def openapi_document(routes: Sequence[Route]) -> dict[str, Any]:
    """The document of `routes`, operations in table order, schemas by model name."""
    models: set[type[BaseModel]] = {m.ErrorBody}
    for r in routes:
        for model in (r.request, r.response, *(x[1] for x in r.also)):
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
    for r in routes:
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
        elif r.binary:
            binary = {"type": "string", "contentMediaType": "application/octet-stream"}
            ok["content"] = {"application/octet-stream": {"schema": binary}}
        if (r.method, r.path) in _LINKS:
            ok["links"] = {
                name: {"operationId": target, "parameters": params}
                for name, (target, params) in _LINKS[(r.method, r.path)].items()
            }
        op["responses"][str(r.status)] = ok
        for status, model, text in r.also:
            content = {"application/json": {"schema": {"$ref": ref[model]}}}
            op["responses"][str(status)] = {"description": text, "content": content}
        query = None
        if r.path == "/v1/health":
            query = "digest"
        elif (
            r.method == "GET"
            and r.path.startswith("/v1/")
            and not r.path.startswith("/v1/admin/")  # always through the leader's barrier
            and r.path != "/v1/openapi.json"
        ):
            query = "consistent"
        params = [
            {"name": part[1:-1], "in": "path", "required": True, "schema": _PATH_PARAMS[part]}
            for part in r.path.split("/")
            if part.startswith("{")
        ]
        for flag in (*r.flags, *(() if query is None else (query,))):
            params.append(
                {"name": flag, "in": "query", "required": False, "schema": {"type": "boolean"}}
            )
        if r.pipeline:
            params.append(
                {
                    "name": "pipeline",
                    "in": "query",
                    "required": False,
                    "description": "The pipeline whose partitions (absent: default)",
                    "schema": {"type": "string", "pattern": m.ID_REGEX},
                }
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
