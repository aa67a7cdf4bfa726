"""Records produced through a worker: `POST /v1/pipelines/{name}/records` on its HTTP API.

Owns the call's declaration (route, body shape, bounds: the SDK posts by the same names)
and its two steps: admit the caller (a produce or operate token of that pipeline, or the
admin token, as the coordinator judges it: `pipeline/token_check.py`), then append the rows
through `SpecProducer` with the worker's own store credentials. Invariants: the caller is
admitted before the body is read; a body is at most `RECORDS_BODY_BYTES_MAX` bytes and
`RECORDS_PER_CALL_MAX` rows; every row is checked against the spec before any is appended
(a bad one is a 400 naming the row and column, nothing appended); rows go only to an ACTIVE
or PAUSED pipeline, by its description as the coordinator has it at the call. Every refusal
is a 4xx or a 503 (store or coordinator trouble), never a 500.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from aiohttp import web

from coordinator.client import CoordinatorClient
from pipeline.source import SourceInputError
from pipeline.spec.produce import RowError, SpecProducer
from pipeline.spec.run import PipelineInfo
from pipeline.store import ObjectStore, StoreError
from pipeline.token_check import TokenCheck, Verdict
from shared.errors import ClientError, ErrorKind, RequestError, RippleError, UnavailableError
from shared.messages.session import ID_REGEX

__all__ = [
    "RECORDS_BODY_BYTES_MAX",
    "RECORDS_PER_CALL_MAX",
    "RECORDS_ROUTE",
    "WRITABLE_STATES",
    "Ingest",
    "append_rows",
    "records_path",
    "writable_info",
]

RECORDS_ROUTE = "/v1/pipelines/{name}/records"
# One call's body, {"rows": [...]}, held in memory at once; a producer with more splits it.
RECORDS_BODY_BYTES_MAX = 8 * 1024 * 1024
RECORDS_PER_CALL_MAX = 10_000
PRODUCERS_KEPT_MAX = 64  # pipelines whose parsed spec a worker keeps for the next call
WRITABLE_STATES = ("active", "paused")
# How long an append waits for the description it reads again after meeting a seal.
DESCRIBE_TIMEOUT_S = 30.0

_ID = re.compile(ID_REGEX)


def records_path(name: str) -> str:
    return RECORDS_ROUTE.replace("{name}", quote(name, safe=""))


def writable_info(name: str, body: Mapping[str, Any]) -> PipelineInfo:
    """The description `body` (`GET /v1/pipelines/{name}`) of a pipeline rows may go to."""
    if body["state"] not in WRITABLE_STATES or not body["first_slot"]:
        raise RippleError(
            f"pipeline {name} is {body['state']}: rows go to ACTIVE or PAUSED ones",
            code="conflict",
        )
    return PipelineInfo.from_describe(body)


async def append_rows(
    producer: SpecProducer,
    rows: Sequence[Mapping[str, Any]],
    describe: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
) -> dict[int, int]:
    """Append `rows` through `producer` off the event loop, as one unit (all rows or none),
    following a rescale's seal by `describe` (the coordinator's description, read on this
    loop); returns, per partition of the pipeline's newest generation by its own number, the
    first offset its rows were given. A bad row is a RequestError naming its column."""
    loop = asyncio.get_running_loop()

    def describe_again() -> PipelineInfo:
        # From the producer's thread: the coordinator's client lives on this loop.
        body = asyncio.run_coroutine_threadsafe(describe(), loop)
        return PipelineInfo.newest(body.result(DESCRIBE_TIMEOUT_S))

    producer.describe = describe_again
    try:
        firsts = await asyncio.to_thread(producer.produce, rows)
    except RowError as exc:
        raise RequestError(str(exc), field=exc.column) from exc
    except SourceInputError as exc:
        raise RequestError(str(exc), field="rows") from exc
    # Those of an earlier generation the call also wrote to are other partitions.
    info = producer.info
    return {s - info.first_slot: first for s, first in firsts.items() if info.contains(s)}


def rows_of(body: object) -> list[dict[str, Any]]:
    """The rows of a body {"rows": [object, ...]}: 1 to RECORDS_PER_CALL_MAX of them."""
    if not isinstance(body, dict) or set(body) != {"rows"}:
        raise RequestError('the body must be {"rows": [...]}', field="body")
    rows = body["rows"]
    if not isinstance(rows, list) or not rows:
        raise RequestError("rows must be a non-empty list of objects", field="rows")
    if len(rows) > RECORDS_PER_CALL_MAX:
        raise RequestError(
            f"{len(rows)} rows exceed RECORDS_PER_CALL_MAX={RECORDS_PER_CALL_MAX}",
            field="rows",
            code="too_large",
        )
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise RequestError(f"row {i} is not an object", field="rows")
    return rows


def _bearer(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise RequestError(
            "a token of this pipeline or the admin token required (Authorization: Bearer ...)",
            code="unauthorized",
        )
    return token.strip()


class Ingest:
    def __init__(self, store: ObjectStore, client: CoordinatorClient, check: TokenCheck) -> None:
        self.store = store
        self.client = client
        self.check = check
        self._producers: dict[str, SpecProducer] = {}

    async def admit(self, request: web.Request) -> tuple[str, Verdict]:
        """The pipeline named in the path, and who may produce to it: 401 without a bearer,
        403 for one that may not produce to that pipeline."""
        name = request.match_info["name"]
        if not _ID.match(name):
            raise RequestError("pipeline name must match [A-Za-z0-9._-]{1,64}", field="name")
        return name, await self.check.verify(name, _bearer(request))

    async def append(self, name: str, body: object) -> dict[str, Any]:
        """Append the body's rows to pipeline `name`; the answer names, per partition of the
        pipeline, the first offset its rows were given."""
        rows = rows_of(body)
        producer = self._producer(name, await self._describe(name))
        try:
            firsts = await append_rows(producer, rows, lambda: self._describe(name))
        except StoreError as exc:
            raise UnavailableError(f"the store refused the append: {exc}") from exc
        return {
            "pipeline": name,
            "rows": len(rows),
            "firsts": {str(p): first for p, first in sorted(firsts.items())},
        }

    async def _describe(self, name: str) -> dict[str, Any]:
        try:
            return await self.client.get(f"/v1/pipelines/{quote(name, safe='')}")
        except ClientError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                raise RequestError(exc.message, code="not_found", field="name") from exc
            raise UnavailableError(f"the coordinator did not describe {name}: {exc}") from exc

    def _producer(self, name: str, body: Mapping[str, Any]) -> SpecProducer:
        info = writable_info(name, body)
        producer = self._producers.get(name)
        if producer is None or producer.info != info:
            producer = SpecProducer(self.store, info)
            self._producers.pop(name, None)
            while len(self._producers) >= PRODUCERS_KEPT_MAX:
                self._producers.pop(next(iter(self._producers)))
            self._producers[name] = producer
        return producer
