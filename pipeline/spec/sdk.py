"""Async SDK for one named pipeline: produce rows to it, read a key's outputs back.

`PipelineClient` is what a program holds to feed and query a recorded pipeline. Writes go
straight to the pipeline's source log in the store (`SpecProducer`, as `ripple produce
--pipeline` does); reads go to the worker that owns the key (`KeyRouter` in pipeline mode, as
`ripple get --pipeline` does). Invariants: a produce call checks every row against the
spec's schema before it appends any (a bad one is a `RequestError` whose `field` is the
column at fault; a store failure part way can still leave some partitions' rows appended)
and takes at most `PRODUCE_ROWS_MAX` rows, read no further than one past it; it writes by
the pipeline's description as the coordinator has it at the call (a pipeline dropped and
created again is written as its new incarnation), and only to an ACTIVE or PAUSED pipeline;
a partition sealed by a rescale part way makes it read the description again and route the
rest by the newer generation.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from coordinator.client import CoordinatorClient, KeyRouter
from pipeline.source import SourceInputError
from pipeline.spec.produce import ROWS_PER_CALL_MAX, RowError, SpecProducer
from pipeline.spec.run import PipelineInfo
from pipeline.store import ObjectStore, open_store
from shared.errors import RequestError, RippleError

__all__ = ["PRODUCE_ROWS_MAX", "PipelineClient"]

# One produce call's rows, held in memory at once: the producer's own bound.
PRODUCE_ROWS_MAX = ROWS_PER_CALL_MAX
# How long a produce call waits for the description it reads again after meeting a seal.
DESCRIBE_TIMEOUT_S = 30.0
DEFAULT = "default"  # the pipeline of (key, value) records: read here, produced elsewhere
WRITABLE_STATES = ("active", "paused")


class PipelineClient:
    """One named pipeline of a cluster.

    `coordinators`: the coordinators' URLs (or a `CoordinatorClient`, which stays the
    caller's to close); `store`: the cluster's store (`file:///dir`, `s3://bucket/prefix`
    or an `ObjectStore`), needed only to produce. `get` also reads `default`'s keys.
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

    async def __aenter__(self) -> PipelineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
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
        if self._store is None:
            raise RequestError("producing needs the cluster's store", field="store")
        taken = list(itertools.islice(rows, PRODUCE_ROWS_MAX + 1))
        if len(taken) > PRODUCE_ROWS_MAX:
            raise RequestError(
                f"a produce call takes at most PRODUCE_ROWS_MAX={PRODUCE_ROWS_MAX} rows",
                field="rows",
            )
        producer = self._producer_for(await self.describe(), self._store)
        loop = asyncio.get_running_loop()

        def describe() -> PipelineInfo:
            # From the producer's thread: the coordinator's client lives on this loop.
            body = asyncio.run_coroutine_threadsafe(self.describe(), loop)
            return PipelineInfo.from_describe(body.result(DESCRIBE_TIMEOUT_S))

        producer.describe = describe
        try:
            # The store's calls block: off the event loop, as one unit (all rows or none).
            firsts = await asyncio.to_thread(producer.produce, taken)
        except RowError as exc:
            raise RequestError(str(exc), field=exc.column) from exc
        except SourceInputError as exc:
            raise RequestError(str(exc), field="rows") from exc
        # The newest generation's partitions, by the pipeline's own numbers (those of an
        # earlier generation the call also wrote to are other partitions).
        info = producer.info
        return {s - info.first_slot: first for s, first in firsts.items() if info.contains(s)}

    def _producer_for(self, body: Mapping[str, Any], store: ObjectStore) -> SpecProducer:
        """The producer of the pipeline `body` describes (the cached one while it is current)."""
        if body["state"] not in WRITABLE_STATES or not body["first_slot"]:
            raise RippleError(
                f"pipeline {self.name} is {body['state']}: rows go to ACTIVE or PAUSED ones",
                code="conflict",
            )
        info = PipelineInfo.from_describe(body)
        if self._producer is None or self._producer.info != info:
            self._producer = SpecProducer(store, info)
        return self._producer

    async def get(self, key: str) -> dict[str, Any]:
        """The key's outputs from the worker that owns it, named as the spec names them, with
        `partition` (the pipeline's own number), `epoch` and `offset`. A key with no rows yet
        is a `ClientError` of code `not_found`."""
        return await self._router.get(key)
