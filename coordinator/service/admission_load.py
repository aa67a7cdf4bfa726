"""Load shedding at the leader's door: three admission classes, each with its own bound.

Owns the rule that decides, from a request's method and path alone (before its body is
read), whether it is served now or answered at once with 503 `overloaded` and
`Retry-After`. The classes, most protected first:

- liveness: workers' registrations, heartbeats and restart notices, `GET /v1/health`
  (what probes and the other nodes decide who is alive by) and `GET /metrics` (an overload
  must be seen: the shedding alert is computed from this node's own scrapes). Its own bound
  (`liveness_in_flight_max`), never shared: reads and writes can never take its capacity,
  and the event loop's lag never sheds it.
- writes: checkpoint acks and every other non-GET call (`writes_in_flight_max`); shed too
  while the loop lags past `writes_shed_lag_s`.
- reads: GET/HEAD views and the dashboard (`reads_in_flight_max`); shed first,
  while the loop lags past `reads_shed_lag_s`.

503 and not 429: the cause is this node's capacity, not one client's rate, and every client
already retries 503 `unavailable`-kind answers after `Retry-After`.

Why lag: the node's handlers mostly run without awaiting, so requests in flight stay few
while reads still fill the event loop, and heartbeats (and Raft, which runs on the same
loop) wait behind them unread. `LagSampler` measures how late the loop wakes a sleeper;
past a class's lag bound that class is answered with a cheap 503 until the loop catches up.
Only a lag that lasts sheds: the median of the last `LAG_SAMPLES_SUSTAINED` samples must be
past the bound, so one late wake (a collection, a descheduled process on a busy host) sheds
nothing, while a flood, which holds the loop in most samples, does.

Invariant: a class's in-flight count equals the admitted requests of that class not yet
answered (every `enter` that returns True is matched by one `leave`), and no bound of one
class is ever charged for another's request.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Iterator
from enum import Enum

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shared.clock import Clock
from shared.errors import UnavailableError

__all__ = ["LAG_SAMPLES_SUSTAINED", "LagSampler", "LoadGate", "RequestClass", "classify"]

# The lag samples whose median must be past a class's bound before it is shed for lag.
LAG_SAMPLES_SUSTAINED = 3


class RequestClass(Enum):
    LIVENESS = "liveness"
    WRITES = "writes"
    READS = "reads"


_LIVENESS_PATH = re.compile(r"/v1/workers(/[^/]+/(heartbeat|restarting))?")
_PROBE_PATHS = frozenset(("/v1/health", "/metrics"))
_READ_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))


def classify(method: str, path: str) -> RequestClass:
    """The class of a request, from its request line only (no header, no body)."""
    if method == "POST" and _LIVENESS_PATH.fullmatch(path):
        return RequestClass.LIVENESS
    if method == "GET" and path in _PROBE_PATHS:
        return RequestClass.LIVENESS
    if method in _READ_METHODS:
        return RequestClass.READS
    return RequestClass.WRITES


class LoadGate(Collector):
    """The per-class bounds and counts; pure (the loop's lag comes in through `lagged`).
    Also the Prometheus collector of what it shed, exported at scrape time."""

    def __init__(
        self,
        *,
        in_flight_max: dict[RequestClass, int],
        shed_lag_ms: dict[RequestClass, int],
        retry_after_s: int,
    ) -> None:
        self._max = dict(in_flight_max)
        self._lag_max = dict(shed_lag_ms)  # a class absent here is never shed for lag
        self.retry_after_s = retry_after_s
        self.in_flight = dict.fromkeys(RequestClass, 0)
        self.shed = dict.fromkeys(RequestClass, 0)
        self.lag_ms = 0  # the event loop's latest measured lag
        self._recent_lag_ms: deque[int] = deque(maxlen=LAG_SAMPLES_SUSTAINED)
        self._sustained_lag_ms = 0  # the median of the recent samples: what sheds

    def lagged(self, lag_ms: int) -> None:
        self.lag_ms = max(0, lag_ms)
        self._recent_lag_ms.append(self.lag_ms)
        full = len(self._recent_lag_ms) == LAG_SAMPLES_SUSTAINED
        recent = sorted(self._recent_lag_ms)
        self._sustained_lag_ms = recent[LAG_SAMPLES_SUSTAINED // 2] if full else 0

    def enter(self, cls: RequestClass) -> bool:
        """Admit one request of `cls` (True: call `leave` once answered), or count it shed."""
        lag_max = self._lag_max.get(cls)
        if self.in_flight[cls] >= self._max[cls] or (
            lag_max is not None and self._sustained_lag_ms > lag_max
        ):
            self.shed[cls] += 1
            return False
        self.in_flight[cls] += 1
        return True

    def leave(self, cls: RequestClass) -> None:
        self.in_flight[cls] -= 1

    def refusal(self, cls: RequestClass) -> UnavailableError:
        return UnavailableError(
            f"this node is overloaded: {cls.value} requests are shed, retry later",
            code="overloaded",
            retry_after_s=self.retry_after_s,
        )

    def admit(self, cls: RequestClass) -> None:
        """`enter`, raising the 503 `overloaded` refusal when the class is full."""
        if not self.enter(cls):
            raise self.refusal(cls)

    def collect(self) -> Iterator[Metric]:
        shed = CounterMetricFamily(
            "ripple_http_shed_requests",
            "Requests answered 503 overloaded without being served, by admission class",
            labels=["class"],
        )
        in_flight = GaugeMetricFamily(
            "ripple_http_in_flight_requests",
            "Requests admitted and not yet answered, by admission class",
            labels=["class"],
        )
        for cls in RequestClass:
            shed.add_metric([cls.value], self.shed[cls])
            in_flight.add_metric([cls.value], self.in_flight[cls])
        yield shed
        yield in_flight
        lag = GaugeMetricFamily(
            "ripple_event_loop_lag_seconds",
            "How late the event loop last woke a sleeper (what sheds reads and writes)",
        )
        lag.add_metric([], self.lag_ms / 1000)
        yield lag


class LagSampler:
    """Measures the event loop's lag every `period_ms` on the node's monotonic clock and
    tells the gate; a background task of the app."""

    def __init__(self, gate: LoadGate, clock: Clock, period_ms: int) -> None:
        self._gate = gate
        self._clock = clock
        self._period_ms = period_ms

    async def run(self) -> None:
        while True:
            before = self._clock.monotonic_ms()
            await asyncio.sleep(self._period_ms / 1000)
            self._gate.lagged(self._clock.monotonic_ms() - before - self._period_ms)
