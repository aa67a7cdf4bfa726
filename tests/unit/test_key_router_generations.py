"""`KeyRouter` (coordinator/client.py, the SDK `ripple get` uses) routes by the newest
routing generation the cluster summary names, says which one in the key read, and after a
409 stale_generation re-reads the summary and tries again: against a fake coordinator and a
fake worker (aiohttp test servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from coordinator.client import CoordinatorClient, KeyRouter
from shared.routing import Routing

KEY = "SYM0007"


class Cluster:
    """One worker hosting every partition of the current routing; `rescale` moves it on."""

    def __init__(self, routing: list[int] | None) -> None:
        self.routing = routing  # None: a coordinator that does not say
        self.count = 2
        self.worker_generation = 0 if routing is None else len(routing) - 1
        self.worker_url = ""
        self.reads: list[tuple[int, str | None]] = []

    def rescale(self, count: int) -> None:
        assert self.routing is not None
        self.routing = [*self.routing, count]
        self.count = count
        self.worker_generation = len(self.routing) - 1

    async def health(self, _: web.Request) -> web.Response:
        cluster: dict[str, Any] = {
            "generation": len(self.routing or []),
            "total_partitions": self.count,
        }
        if self.routing is not None:
            cluster["routing"] = self.routing
        return web.json_response({"cluster": cluster})

    async def partitions(self, _: web.Request) -> web.Response:
        table = [{"partition": p, "owner": "w1"} for p in range(self.count)]
        return web.json_response({"generation": len(self.routing or []), "partitions": table})

    async def workers(self, _: web.Request) -> web.Response:
        return web.json_response({"workers": [{"worker_id": "w1", "address": self.worker_url}]})

    async def key(self, request: web.Request) -> web.Response:
        p, asked = int(request.match_info["p"]), request.query.get("generation")
        self.reads.append((p, asked))
        if asked is not None and int(asked) != self.worker_generation:
            return web.json_response(
                {"error": "stale_generation", "message": "stale", "field": "generation"},
                status=409,
            )
        return web.json_response({"key": request.match_info["key"], "partition": p})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/health", self.health)
        app.router.add_get("/v1/partitions", self.partitions)
        app.router.add_get("/v1/workers", self.workers)
        app.router.add_get("/v1/partitions/{p}/keys/{key}", self.key)
        return app


@pytest.fixture
async def served() -> AsyncIterator[tuple[Cluster, CoordinatorClient]]:
    cluster = Cluster([2])
    server = TestServer(cluster.app(), host="127.0.0.1")
    await server.start_server()
    cluster.worker_url = str(server.make_url("")).rstrip("/")
    client = CoordinatorClient([cluster.worker_url], deadline_s=2.0, timeout_s=2.0)
    try:
        yield cluster, client
    finally:
        await client.close()
        await server.close()


async def test_a_stale_generation_is_reread_and_the_key_routed_by_the_new_one(
    served: tuple[Cluster, CoordinatorClient],
) -> None:
    cluster, client = served
    router = KeyRouter(client)
    body = await router.get(KEY)
    old = Routing(generation=0, partitions=2).partition_for(KEY)
    assert body["partition"] == old and cluster.reads == [(old, "0")]
    cluster.rescale(5)
    cluster.reads.clear()
    body = await router.get(KEY)  # the cache still routes by generation 0
    new = Routing(generation=1, partitions=5).partition_for(KEY)
    assert body["partition"] == new
    assert cluster.reads == [(old, "0"), (new, "1")] and router.routing.generation == 1


async def test_without_a_routing_in_the_summary_one_generation_is_assumed(
    served: tuple[Cluster, CoordinatorClient],
) -> None:
    cluster, client = served
    cluster.routing, cluster.count = None, 3
    body = await KeyRouter(client).get(KEY)
    assert body["partition"] == Routing(generation=0, partitions=3).partition_for(KEY)
