"""Async SDK for one named pipeline: produce rows to it, read a key's outputs back.

`PipelineClient` is what a program holds to feed and query a recorded pipeline. Writes go
straight to the pipeline's source log in the store when the client is given the store
(`SpecProducer`, as `ripple produce --pipeline` does), or, given only a pipeline token,
through a worker's `POST /v1/pipelines/{name}/records` (`pipeline/ingest.py`), which
appends with its own store credentials; reads go to the worker that owns the key
(`KeyRouter` in pipeline mode, as `ripple get --pipeline` does). Invariants: a produce call
checks every row against the spec's schema before it appends any (a bad one is a
`RequestError` whose `field` is the column at fault; a store failure part way can still
leave some partitions' rows appended) and takes at most `PRODUCE_ROWS_MAX` rows, read no
further than one past it; through a worker the rows go in calls of at most
`RECORDS_PER_CALL_MAX`, each checked whole, so a refused call leaves the calls before it
appended (the error says how many rows went in). It writes by the pipeline's description
as the coordinator has it at the call (a pipeline dropped and created again is written as
its new incarnation), and only to an ACTIVE or PAUSED pipeline; a partition sealed by a
rescale part way makes it read the description again and route the rest by the newer
generation. A worker that cannot be reached is left for another, at most
`WORKER_ATTEMPTS_MAX` in all per call.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp

from coordinator.client import CoordinatorClient, KeyRouter
from pipeline.ingest import RECORDS_PER_CALL_MAX, append_rows, records_path, writable_info
from pipeline.spec.produce import ROWS_PER_CALL_MAX, SpecProducer
from pipeline.store import ObjectStore, open_store
from shared.errors import ClientError, ErrorKind, RequestError, RippleError
from shared.http_statuses import kind_of_status
from shared.tls import client_context

__all__ = ["PRODUCE_ROWS_MAX", "WORKER_ATTEMPTS_MAX", "PipelineClient"]

# One produce call's rows, held in memory at once: the producer's own bound.
PRODUCE_ROWS_MAX = ROWS_PER_CALL_MAX
DEFAULT = "default"  # the pipeline of (key, value) records: read here, produced elsewhere
WORKER_ATTEMPTS_MAX = 3  # workers one call through a worker tries before it gives up
WORKER_CALL_TIMEOUT_S = 60.0  # one records call: the worker checks, then writes the store


class PipelineClient:
    """One named pipeline of a cluster.

    `coordinators`: the coordinators' URLs (or a `CoordinatorClient`, which stays the
    caller's to close); `store`: the cluster's store (`file:///dir`, `s3://bucket/prefix`
    or an `ObjectStore`), to produce straight to it; without one, `token` (a produce or
    operate token of this pipeline, or the admin token) produces through a worker. `get`
    also reads `default`'s keys.
    """

    def __init__(
        self,
        coordinators: Sequence[str] | CoordinatorClient,
        name: str,
        *,
        store: str | ObjectStore | None = None,
        s3_endpoint: str | None = None,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        if isinstance(coordinators, CoordinatorClient):
            self.client, self._owns_client = coordinators, False
        else:
            self.client = CoordinatorClient(coordinators, token=token, ca_file=ca_file)
            self._owns_client = True
        self.name = name
        self._store = open_store(store, s3_endpoint) if isinstance(store, str) else store
        self._router = KeyRouter(self.client, None if name == DEFAULT else name)
        self._producer: SpecProducer | None = None
        self._token = token
        self._ca_file = ca_file if ca_file is not None else self.client.ca_file
        self._http: aiohttp.ClientSession | None = None  # to workers, opened on first use

    async def __aenter__(self) -> PipelineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._owns_client:
            await self.client.close()

    async def describe(self) -> dict[str, Any]:
        """The pipeline as the coordinator describes it (`GET /v1/pipelines/{name}`)."""
        return await self.client.get(f"/v1/pipelines/{quote(self.name, safe='')}")

    async def produce(self, rows: Iterable[Mapping[str, Any]]) -> dict[int, int]:
        """Append `rows` (objects of the spec's columns) to the pipeline's source log; returns,
        per partition number of the pipeline, the first offset its rows were given."""
        if self.name == DEFAULT:
            raise RequestError(
                "pipeline default takes (key, value) records: pipeline.source.Producer",
                field="name",
            )
        if self._store is None and self._token is None:
            raise RequestError("producing needs the cluster's store or a token", field="store")
        taken = list(itertools.islice(rows, PRODUCE_ROWS_MAX + 1))
        if len(taken) > PRODUCE_ROWS_MAX:
            raise RequestError(
                f"a produce call takes at most PRODUCE_ROWS_MAX={PRODUCE_ROWS_MAX} rows",
                field="rows",
            )
        if self._store is None:
            return await self._produce_through_workers(taken)
        producer = self._producer_for(await self.describe(), self._store)
        return await append_rows(producer, taken, self.describe)

    def _producer_for(self, body: Mapping[str, Any], store: ObjectStore) -> SpecProducer:
        """The producer of the pipeline `body` describes (the cached one while it is current)."""
        info = writable_info(self.name, body)
        if self._producer is None or self._producer.info != info:
            self._producer = SpecProducer(store, info)
        return self._producer

    async def _produce_through_workers(self, rows: list[Mapping[str, Any]]) -> dict[int, int]:
        """`rows` through workers' records route, RECORDS_PER_CALL_MAX at a time."""
        firsts: dict[int, int] = {}
        for start in range(0, len(rows), RECORDS_PER_CALL_MAX):
            chunk = [dict(r) for r in rows[start : start + RECORDS_PER_CALL_MAX]]
            try:
                answer = await self._post_records(chunk)
            except RippleError as exc:
                if start:
                    exc.message = f"{exc.message} ({start} rows before it were appended)"
                raise
            for p, first in answer["firsts"].items():
                firsts.setdefault(int(p), int(first))
        return firsts

    async def _post_records(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """One records call to a worker the coordinator lists, another on a connection error."""
        listed = (await self.client.get("/v1/workers"))["workers"]
        addresses = [w["address"] for w in listed if w.get("state") == "active"]
        if not addresses:
            raise ClientError(
                "no active worker to produce through",
                code="unavailable",
                kind=ErrorKind.UNAVAILABLE,
            )
        # From a random one on: producers spread over the workers.
        start = random.randrange(len(addresses))
        order = (addresses[start:] + addresses[:start])[:WORKER_ATTEMPTS_MAX]
        headers = {"Authorization": f"Bearer {self._token}"}
        last = "no attempt"
        for address in order:
            url = f"{address.rstrip('/')}{records_path(self.name)}"
            try:
                async with self._worker_http().post(url, json={"rows": rows}, headers=headers) as r:
                    body = await _json_body(r)
                    if r.status == 200:
                        return body
                    raise ClientError(
                        str(body.get("message", f"HTTP {r.status}")),
                        code=str(body.get("error", "http_error")),
                        kind=kind_of_status(r.status),
                        field=body.get("field"),
                    )
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                last = f"{address} unreachable: {exc}"
        raise ClientError(
            f"no worker took the rows after {len(order)} tries: {last}",
            code="unavailable",
            kind=ErrorKind.UNAVAILABLE,
        )

    def _worker_http(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=WORKER_CALL_TIMEOUT_S),
                connector=aiohttp.TCPConnector(ssl=client_context(self._ca_file)),
            )
        return self._http

    async def get(self, key: str) -> dict[str, Any]:
        """The key's outputs from the worker that owns it, named as the spec names them, with
        `partition` (the pipeline's own number), `epoch` and `offset`. A key with no rows yet
        is a `ClientError` of code `not_found`."""
        return await self._router.get(key)


async def _json_body(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = await resp.json(content_type=None)
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {"message": f"HTTP {resp.status}"}
