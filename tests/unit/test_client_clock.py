"""`CoordinatorClient` and `KeyRouter` (coordinator/client.py) keep their time bounds on the
clock they are given: the retry deadline, the voters' refresh every NODES_REFRESH_S and the
key router's table check every TABLE_CHECK_S, each driven here by a `FakeClock` against a
fake coordinator (an aiohttp test server on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from coordinator.client import NODES_REFRESH_S, TABLE_CHECK_S, CoordinatorClient, KeyRouter
from shared.clock import FakeClock
from shared.errors import ClientError, ErrorKind


class TickingClock(FakeClock):
    """A FakeClock that moves on by `step_ms` after every monotonic reading."""

    def __init__(self, step_ms: int) -> None:
        super().__init__()
        self.step_ms = step_ms

    def monotonic_ms(self) -> int:
        now = super().monotonic_ms()
        self.advance(self.step_ms)
        return now


class Coordinator:
    """Answers 503 (Retry-After 0) to /v1/busy, and counts what it is asked."""

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}

    async def answer(self, request: web.Request) -> web.Response:
        self.asked[request.path] = self.asked.get(request.path, 0) + 1
        if request.path == "/v1/busy":
            body = {"error": "unavailable", "message": "no leader"}
            return web.json_response(body, status=503, headers={"Retry-After": "0"})
        cluster: dict[str, Any] = {"generation": 1, "routing": [1]}
        return web.json_response(
            {
                "cluster": cluster,
                "nodes": [],
                "generation": 1,
                "partitions": [{"partition": 0, "owner": None}],
                "workers": [],
            }
        )

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.answer)
        return app


@pytest.fixture
async def coordinator() -> AsyncIterator[tuple[Coordinator, str]]:
    fake = Coordinator()
    async with TestServer(fake.app(), host="127.0.0.1") as server:
        yield fake, str(server.make_url("")).rstrip("/")


async def test_retries_end_at_the_deadline_on_the_given_clock(
    coordinator: tuple[Coordinator, str],
) -> None:
    fake, url = coordinator
    # 250 ms pass at every reading: the call reads its deadline (1 s) at 250 ms, rounds
    # start at 500, 750 and 1,000 ms, and the reading of 1,250 ms ends them (the real clock
    # would allow about ten rounds of 0.1 s within the second, the 503 limit twenty-one).
    clock = TickingClock(step_ms=250)
    async with CoordinatorClient([url], deadline_s=1.0, timeout_s=2.0, clock=clock) as client:
        with pytest.raises(ClientError) as raised:
            await client.get("/v1/busy")
    assert raised.value.kind is ErrorKind.UNAVAILABLE
    assert fake.asked["/v1/busy"] == 3


async def test_a_still_clock_leaves_only_the_unavailable_limit(
    coordinator: tuple[Coordinator, str],
) -> None:
    fake, url = coordinator
    async with CoordinatorClient([url], deadline_s=0.001, clock=FakeClock()) as client:
        with pytest.raises(ClientError):
            await client.get("/v1/busy")
    assert fake.asked["/v1/busy"] == 21  # UNAVAILABLE_RETRIES_MAX + 1: time never ran out


async def test_the_voters_are_asked_for_once_refresh_time_has_passed(
    coordinator: tuple[Coordinator, str],
) -> None:
    fake, url = coordinator
    clock = FakeClock()
    async with CoordinatorClient([url], clock=clock) as client:
        await client.get("/v1/workers")
        clock.advance(int(NODES_REFRESH_S * 1000) - 1)
        await client.get("/v1/workers")
        assert "/v1/health" not in fake.asked
        clock.advance(1)
        await client.get("/v1/workers")
        assert fake.asked["/v1/health"] == 1
        await client.get("/v1/workers")
        assert fake.asked["/v1/health"] == 1


async def test_the_router_checks_the_generation_after_table_check_time(
    coordinator: tuple[Coordinator, str],
) -> None:
    fake, url = coordinator
    clock = FakeClock()
    async with CoordinatorClient([url], clock=clock) as client:
        router = KeyRouter(client)
        await router.refresh()
        asked = fake.asked["/v1/health"]
        clock.advance(int(TABLE_CHECK_S * 1000))
        await router._fresh()
        assert fake.asked["/v1/health"] == asked  # not past the bound yet
        clock.advance(1)
        await router._fresh()
        assert fake.asked["/v1/health"] == asked + 1
