"""`PipelineClient` (pipeline/spec/sdk.py) against a fake coordinator and worker (one aiohttp
test server on 127.0.0.1) and a local-directory store: rows checked against the spec before
anything is appended, a bad one named by row and column; the call's bound; the pipeline's
description read at each call (state, incarnation); a key read from its owner by the
pipeline's own partition number."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from pipeline.spec.sdk import PRODUCE_ROWS_MAX, PipelineClient
from pipeline.store import LocalStore
from shared.errors import ClientError, ErrorKind, RequestError, RippleError
from tests.integration.test_pipeline_spec_spark import orders, spec_text

FIRST_SLOT = 1 << 20
PARTITIONS = 2


class Cluster:
    """The coordinator's describe, partitions and workers of `orders`, and the worker that
    owns its partitions (answering for the keys in `outputs`)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.state = "active"
        self.incarnation = 1
        self.first_slot = FIRST_SLOT
        self.address = ""
        self.outputs: dict[tuple[int, str], dict[str, Any]] = {}
        self.partitions = PARTITIONS
        self.generation = 0
        # Applied after the next describe: what a rescale recorded meanwhile.
        self.then: dict[str, int] = {}

    async def answer(self, request: web.Request) -> web.Response:
        self.asked.append(request.path)
        if request.path == "/v1/pipelines/orders":
            body = {
                "name": "orders",
                "state": self.state,
                "incarnation": self.incarnation,
                "first_slot": self.first_slot,
                "partitions": self.partitions,
                "routing_generation": self.generation,
                "spec_text": spec_text(),
                "settings": {"max_keys_per_partition": 100},
            }
            for name, value in self.then.items():
                setattr(self, name, value)
            self.then = {}
            return web.json_response(body)
        if request.path == "/v1/partitions":
            assert request.query["pipeline"] == "orders"
            owned = [{"partition": p, "owner": "w1"} for p in range(PARTITIONS)]
            return web.json_response({"generation": 3, "partitions": owned})
        if request.path == "/v1/workers":
            return web.json_response({"workers": [{"worker_id": "w1", "address": self.address}]})
        parts = request.path.split("/")  # /v1/partitions/{slot}/keys/{key}
        found = self.outputs.get((int(parts[3]), parts[5]))
        if found is None:
            return web.json_response({"error": "not_found", "message": "no such key"}, status=404)
        return web.json_response(found)


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    fake = Cluster()
    app = web.Application()
    app.router.add_get("/{tail:.*}", fake.answer)
    async with TestServer(app, host="127.0.0.1") as server:
        fake.address = str(server.make_url("")).rstrip("/")
        yield fake


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(str(tmp_path))


def rows(seed: int) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k != "offset"}
        for r in orders(random.Random(seed)).to_pylist()
    ]


def appended(store: LocalStore, first_slot: int) -> int:
    from pipeline.source import SourceLog

    log = SourceLog(store, first_slot + PARTITIONS)
    return sum(log.end_offset(first_slot + p) for p in range(PARTITIONS))


async def test_rows_are_checked_whole_and_a_bad_one_names_its_column(
    cluster: Cluster, store: LocalStore
) -> None:
    good = rows(seed=5)[:4]
    async with PipelineClient([cluster.address], "orders", store=store) as pipeline:
        for bad, column in (
            ({**good[2], "amount": "lots"}, "amount"),
            ({**good[2], "ts": "not a time"}, "ts"),
            ({**good[2], "customer": 7}, "customer"),
            ({k: v for k, v in good[2].items() if k != "customer"}, "customer"),
            ({**good[2], "colour": "red"}, "colour"),
        ):
            with pytest.raises(RequestError) as raised:
                await pipeline.produce([good[0], good[1], bad, good[3]])
            assert raised.value.field == column
            assert raised.value.kind is ErrorKind.INVALID
            assert raised.value.message.startswith(f"row 2, column {column!r}: ")
        assert appended(store, FIRST_SLOT) == 0
        firsts = await pipeline.produce(good)
    assert set(firsts) <= set(range(PARTITIONS))  # the pipeline's own numbers, not slots
    assert appended(store, FIRST_SLOT) == len(good)


async def test_a_call_takes_at_most_the_bound_and_reads_no_further(
    cluster: Cluster, store: LocalStore
) -> None:
    row = rows(seed=1)[0]
    counter = itertools.count()

    def endless() -> Iterator[dict[str, Any]]:
        for _ in counter:
            yield row

    async with PipelineClient([cluster.address], "orders", store=store) as pipeline:
        with pytest.raises(RequestError, match=f"PRODUCE_ROWS_MAX={PRODUCE_ROWS_MAX}") as raised:
            await pipeline.produce(endless())
    assert raised.value.field == "rows"
    assert next(counter) == PRODUCE_ROWS_MAX + 1  # one past the bound read, no more
    assert cluster.asked == []  # refused before the coordinator was asked


async def test_the_description_is_read_at_each_call(cluster: Cluster, store: LocalStore) -> None:
    fake = cluster
    batch = rows(seed=2)[:5]
    async with PipelineClient([fake.address], "orders", store=store) as pipeline:
        fake.state = "paused"  # a paused pipeline takes rows; it processes them once resumed
        await pipeline.produce(batch)
        for state in ("creating", "dropping"):
            fake.state = state
            with pytest.raises(RippleError) as raised:
                await pipeline.produce(batch)
            assert raised.value.kind is ErrorKind.CONFLICT
        # Dropped and created again: the rows go to the new incarnation's partitions.
        fake.state, fake.incarnation, fake.first_slot = "active", 2, FIRST_SLOT + 64
        await pipeline.produce(batch)
    assert appended(store, FIRST_SLOT) == len(batch)
    assert appended(store, FIRST_SLOT + 64) == len(batch)


async def test_default_is_not_produced_here_and_a_store_is_needed() -> None:
    async with PipelineClient(["http://127.0.0.1:9"], "default") as pipeline:
        with pytest.raises(RequestError, match="key, value"):
            await pipeline.produce([{"key": "a", "value": 1.0}])
    async with PipelineClient(["http://127.0.0.1:9"], "orders") as pipeline:
        with pytest.raises(RequestError) as raised:
            await pipeline.produce(rows(seed=1)[:1])
        assert raised.value.field == "store"


async def test_a_key_is_read_from_its_owner_by_the_pipelines_number(cluster: Cluster) -> None:
    from shared.routing import partition_for_key

    fake, url = cluster, cluster.address
    p = partition_for_key("c1", PARTITIONS)
    fake.outputs[(FIRST_SLOT + p, "c1")] = {"orders": 3, "partition": FIRST_SLOT + p, "epoch": 4}
    async with PipelineClient([url], "orders") as pipeline:
        got = await pipeline.get("c1")
        assert got == {"orders": 3, "partition": p, "epoch": 4}
        with pytest.raises(ClientError) as raised:
            await pipeline.get("c-none")
        assert raised.value.code == "not_found"


async def test_a_seal_met_part_way_is_followed_by_reading_the_description_again(
    cluster: Cluster, store: LocalStore
) -> None:
    from pipeline.source import generation_base
    from pipeline.spec.run import arrow_schema, generation_log
    from shared.routing import Routing
    from shared.spec.parse import parse_spec

    schema = arrow_schema(parse_spec(spec_text()).schema)
    old = generation_log(store, 0, FIRST_SLOT, PARTITIONS, schema)
    sealing = old.followed_by(Routing(generation=1, partitions=3))
    new_first = FIRST_SLOT + 64
    batch = rows(seed=3)[:40]
    async with PipelineClient([cluster.address], "orders", store=store) as pipeline:
        await pipeline.produce(batch)
        cuts = [sealing.seal(FIRST_SLOT + p, 0) for p in range(PARTITIONS)]
        # The call starts under generation 0 and meets the seals; the rescale is recorded.
        cluster.then = {"generation": 1, "first_slot": new_first, "partitions": 3}
        firsts = await pipeline.produce(batch)
    # Once per call, and once more from the producer's thread when it met a seal.
    assert cluster.asked.count("/v1/pipelines/orders") == 3
    assert firsts and set(firsts) <= {0, 1, 2}  # the new generation's own numbers
    assert all(first >= generation_base(1) for first in firsts.values())
    new = generation_log(store, 1, new_first, 3, schema)
    assert sum(new.read(new_first + q, generation_base(1)).num_rows for q in range(3)) == 40
    assert [old.end_offset(FIRST_SLOT + p) for p in range(PARTITIONS)] == cuts
