"""The admission classes (coordinator/service/admission_load.py): bounds per class, liveness
never shed for reads or lag, and the 503 overloaded refusal with its Retry-After."""

from __future__ import annotations

import asyncio

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from coordinator.service.admission_load import (
    LAG_SAMPLES_SUSTAINED,
    LagSampler,
    LoadGate,
    RequestClass,
    classify,
)
from coordinator.service.http.answers import error_response
from coordinator.service.http.request import PlainRequest
from shared.clock import FakeClock
from testkit.wait import wait_until_async

L, W, R = RequestClass.LIVENESS, RequestClass.WRITES, RequestClass.READS


def gate(reads: int = 2, writes: int = 3, liveness: int = 4) -> LoadGate:
    return LoadGate(
        in_flight_max={L: liveness, W: writes, R: reads},
        shed_lag_ms={R: 100, W: 1000},
        retry_after_s=2,
    )


def test_classify_by_request_line() -> None:
    assert classify("POST", "/v1/workers") is L
    assert classify("POST", "/v1/workers/w-1/heartbeat") is L
    assert classify("POST", "/v1/workers/w-1/restarting") is L
    assert classify("GET", "/v1/health") is L  # probes decide who is alive by it
    assert classify("POST", "/v1/checkpoints") is W
    assert classify("POST", "/v1/workers/w-1/drain") is W
    assert classify("GET", "/v1/workers") is R
    assert classify("GET", "/metrics") is L  # an overload must stay visible to scrapes
    assert classify("GET", "/v1/workers/w-1/heartbeat") is R


def test_each_class_full_at_its_own_bound() -> None:
    g = gate()
    assert [g.enter(R) for _ in range(3)] == [True, True, False]
    assert g.shed[R] == 1 and g.in_flight[R] == 2
    # Reads full takes nothing from liveness nor writes.
    assert all(g.enter(L) for _ in range(4)) and not g.enter(L)
    assert all(g.enter(W) for _ in range(3)) and not g.enter(W)
    g.leave(R)
    assert g.enter(R)
    assert g.shed == {L: 1, W: 1, R: 1}


def lag_for_a_while(g: LoadGate, lag_ms: int) -> None:
    for _ in range(LAG_SAMPLES_SUSTAINED):
        g.lagged(lag_ms)


def test_lag_sheds_reads_then_writes_never_liveness() -> None:
    g = gate()
    lag_for_a_while(g, 101)
    assert not g.enter(R) and g.enter(W) and g.enter(L)
    lag_for_a_while(g, 1001)
    assert not g.enter(R) and not g.enter(W) and g.enter(L)
    g.lagged(100)  # exactly at the bound is still in time, but one sample is not the median
    assert not g.enter(R)
    g.lagged(100)
    assert g.enter(R)


def test_one_late_wake_sheds_nothing() -> None:
    g = gate()
    g.lagged(5000)  # a collection or a descheduled process: not an overload
    assert g.enter(R) and g.enter(W)
    g.lagged(0)
    g.lagged(0)
    assert g.enter(R)  # still one late sample of three
    g.lagged(5000)
    g.lagged(5000)
    assert not g.enter(R)  # most samples late: the loop is held


def test_refusal_answer_shape() -> None:
    request = PlainRequest(
        web.Application(), "GET", "/v1/workers", {}, CIMultiDictProxy(CIMultiDict()), b""
    )
    response = error_response(request, gate().refusal(R))
    assert response.status == 503
    assert response.headers["Retry-After"] == "2"
    assert isinstance(response.body, bytes) and b'"overloaded"' in response.body


def test_metrics_count_shed_per_class() -> None:
    g = gate(reads=0)
    g.enter(R)
    samples = {(s.name, s.labels.get("class")): s.value for m in g.collect() for s in m.samples}
    assert samples[("ripple_http_shed_requests_total", "reads")] == 1
    assert samples[("ripple_http_shed_requests_total", "liveness")] == 0


def test_sampler_reports_how_late_the_loop_woke() -> None:
    clock = FakeClock()
    g = gate()

    async def run() -> None:
        sampler = asyncio.create_task(LagSampler(g, clock, 10).run())
        await asyncio.sleep(0)  # the sampler reads the clock and sleeps
        clock.advance(260)  # the loop was held up: it wakes 250 ms late
        # The sampler's first wake, 10 ms of real time on.
        await wait_until_async(lambda: g.lag_ms, "the sampler's first reading", 2.0)
        sampler.cancel()

    asyncio.run(run())
    assert g.lag_ms == 250
    assert g.enter(R)  # one late wake alone sheds nothing
    lag_for_a_while(g, 250)
    assert not g.enter(R)
