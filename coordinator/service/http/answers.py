"""How an answer leaves: a JSON body, and the JSON error shape every failure takes.

Every error is `{"error": code, "message": text}` (plus `field` or `leader_id` where one
applies), docs/design.md §6; an unexpected exception answers 500 with no trace, and is
logged here. The status is the error's kind's, from the one table (`shared.http_statuses`);
an UnavailableError carries Retry-After; a LeaderRedirect carries Location and Ripple-Leader.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from aiohttp import hdrs, web
from pydantic import BaseModel

from coordinator.core.commands import Move, NewMigration, Rejected
from coordinator.service import models as m
from coordinator.service.http.leader import LeaderRedirect
from coordinator.service.http.request import ApiRequest, Scope
from shared.errors import ErrorKind, RequestError, RippleError, UnavailableError
from shared.http_statuses import ERROR_CODE_OF_STATUS, STATUS_OF_KIND, status_of

__all__ = [
    "JSON_CONTENT_TYPE",
    "error_response",
    "json_bytes",
    "json_reply",
    "migration_refs",
    "raise_rejected",
]

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json; charset=utf-8"


def json_bytes(
    payload: bytes, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """A JSON response whose body is already encoded: aiohttp keeps a bytes body as it is,
    where a str body would go through its payload registry on every answer."""
    all_headers: dict[str, str] = {hdrs.CONTENT_TYPE: JSON_CONTENT_TYPE}
    if headers:
        all_headers.update(headers)
    return web.Response(body=payload, status=status, headers=all_headers)


def json_reply(
    body: BaseModel | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    if isinstance(body, BaseModel):
        # pydantic writes the JSON itself: no dict built only to be dumped again.
        return json_bytes(body.model_dump_json(by_alias=True).encode(), status, headers)
    return web.json_response(body, status=status, headers=headers)


def _ripple_error(exc: RippleError) -> web.Response:
    headers: dict[str, str] = {}
    if isinstance(exc, UnavailableError):
        headers["Retry-After"] = str(exc.retry_after_s)
    body = exc.to_json()
    if isinstance(exc, LeaderRedirect):
        headers["Location"] = exc.location
        headers["Ripple-Leader"] = exc.leader_id
        body["leader_id"] = exc.leader_id
    return web.json_response(body, status=status_of(exc), headers=headers)


def error_response(request: ApiRequest, exc: Exception) -> web.Response:
    """What an exception out of a handler answers (the JSON error shape; never a trace)."""
    if isinstance(exc, RippleError):
        return _ripple_error(exc)
    if isinstance(exc, web.HTTPException):
        code = ERROR_CODE_OF_STATUS.get(exc.status, "http_error")
        response = web.json_response({"error": code, "message": exc.reason}, status=exc.status)
        if "Allow" in exc.headers:  # a 405 names the methods the path has (RFC 9110)
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    body = {"error": "internal", "message": "internal error"}
    return web.json_response(body, status=STATUS_OF_KIND[ErrorKind.INTERNAL])


def raise_rejected(planned: tuple[Move, ...] | Rejected) -> tuple[Move, ...]:
    """A planning query's rejection as the request's error (nothing was proposed)."""
    if isinstance(planned, Rejected):
        raise RequestError(planned.message, code=planned.code, field=planned.field)
    return planned


def migration_refs(
    created: Sequence[NewMigration | Move], scope: Scope | None = None
) -> list[m.MigrationRef]:
    """The migrations a command created (or a dry run's moves, id null), as a reply lists
    them: numbered by `scope`'s pipeline when the request named one, else by table number."""
    return [
        m.MigrationRef(
            id=x.id if isinstance(x, NewMigration) else None,
            partition=x.partition if scope is None else scope.local(x.partition),
            from_=x.source,
            to=x.target,
        )
        for x in created
    ]
