"""What a handler reads of a request: its body, path parameters, query flags and
Idempotency-Key, from aiohttp's request or the front door's `PlainRequest`.

Every parse failure is a `RequestError` naming the field at fault, raised before anything
is proposed, so a rejected request never changes state. A body is held to
`body_bytes_max` on either path (413).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar, cast

from aiohttp import web
from multidict import CIMultiDictProxy
from pydantic import BaseModel, ValidationError

from coordinator.core.model import DEFAULT_PIPELINE, Partition, WorkerId, valid_id
from coordinator.core.pipelines import partition_numbers
from coordinator.core.state import ClusterState
from coordinator.service.http.context import NODE_KEY
from coordinator.service.stamps import new_request_id
from shared.errors import ErrorCode, RequestError

__all__ = [
    "ApiRequest",
    "PlainRequest",
    "Scope",
    "WholeBody",
    "idempotency_key",
    "parse",
    "parse_body",
    "path_partition",
    "path_worker",
    "query_bool",
    "query_pipeline",
    "read_body",
]

M = TypeVar("M", bound=BaseModel)

# A partition number in a path has at most this many digits (TOTAL_PARTITIONS_MAX fits).
PARTITION_DIGITS_MAX = 7
# How the state machine and the planner name a partition in a refusal.
_PARTITION_NAMED = re.compile(r"\bpartition (\d+)")


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
    """A request the front door (`coordinator/service/front.py`) read itself, whole: the
    few things the hot handlers and their helpers use of an aiohttp request, and nothing
    else. It has no query string (the front door hands a request with one to aiohttp)."""

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


async def read_body(request: ApiRequest) -> bytes:
    """The whole request body. One that has arrived whole (a heartbeat's, nearly always: it
    comes in the same segment as its headers) is taken from the buffer in one call, held to
    the same limit, which saves the read loop's two awaits on the hottest route; otherwise
    aiohttp's read loop, which enforces `client_max_size`. Both answer 413 above
    `body_bytes_max`."""
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


def query_bool(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise RequestError(f"{name} must be true or false", field=name)
    return raw in ("true", "1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """The pipeline a partition route is about (`?pipeline=`, `default` when absent) and the
    numbers its partitions are carried under (`partition_numbers`), indexed by its own."""

    pipeline: str
    numbers: range

    def local(self, number: int) -> int:
        """The pipeline's own number of table number `number` (one of ``numbers``)."""
        return self.numbers.index(number)

    def owns(self, number: int) -> bool:
        return number in self.numbers

    @contextmanager
    def speaking(self) -> Iterator[None]:
        """Refusals raised inside say the pipeline's own numbers: the state machine and the
        planner name a partition by its table number, which the caller never wrote."""
        try:
            yield
        except RequestError as exc:
            said = _PARTITION_NAMED.sub(self._said, exc.message)
            if said == exc.message:
                raise
            # The code is the refusal's own, one of ErrorCode: only its words change.
            raise RequestError(said, field=exc.field, code=cast(ErrorCode, exc.code)) from exc

    def _said(self, match: re.Match[str]) -> str:
        number = int(match.group(1))
        return f"partition {self.local(number)}" if self.owns(number) else match.group(0)


def query_pipeline(request: web.Request, state: ClusterState) -> Scope:
    """The pipeline named by `?pipeline=` (absent: `default`); 404 when there is none."""
    name = request.query.get("pipeline", DEFAULT_PIPELINE)
    if not valid_id(name):
        raise RequestError("pipeline must match [A-Za-z0-9._-]{1,64}", field="pipeline")
    numbers = partition_numbers(state, name)
    if numbers is None:
        raise RequestError(f"no pipeline {name}", code="not_found", field="pipeline")
    return Scope(pipeline=name, numbers=numbers)


def path_partition(request: web.Request, state: ClusterState, scope: Scope) -> Partition:
    """The partition the path names by `scope`'s own number (0 .. partitions - 1)."""
    text = request.match_info["p"]
    # isascii first: '²'.isdigit() is True (int() then raises) and int('\u0661') is 1.
    if not (text.isascii() and text.isdigit()) or len(text) > PARTITION_DIGITS_MAX:
        raise RequestError("partition must be a non-negative integer", field="partition")
    local = int(text)
    part = state.partitions.get(scope.numbers[local]) if local < len(scope.numbers) else None
    # `default`'s numbers reach up to SLOT_BASE; the table says which are partitions now.
    if part is None or part.pipeline != scope.pipeline:
        why = "" if scope.numbers else f" (pipeline {scope.pipeline} is not set up yet)"
        raise RequestError(
            f"partition {text} does not exist{why}", code="not_found", field="partition"
        )
    return part


def path_worker(request: ApiRequest) -> WorkerId:
    wid = request.match_info["worker_id"]
    if not valid_id(wid):
        raise RequestError("worker id must match [A-Za-z0-9._-]{1,64}", field="worker_id")
    return WorkerId(wid)


def idempotency_key(request: ApiRequest, scope: str, command: str) -> str:
    """The request id a command is deduplicated under: the client's Idempotency-Key scoped
    to who sent it (`scope`, the admitted caller's) and which command, so a key one caller
    used never answers, or silently swallows, another caller's request."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return new_request_id()
    if not valid_id(key):
        raise RequestError(
            "Idempotency-Key must match [A-Za-z0-9._-]{1,64}", field="Idempotency-Key"
        )
    return hashlib.sha256(f"{scope}\x00{command}\x00{key}".encode()).hexdigest()
