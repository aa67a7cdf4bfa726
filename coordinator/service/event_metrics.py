"""The coordinator's per-event counters, kept in plain dicts and ints bumped on the event
loop's thread and exported at scrape time: HTTP requests by route, method and status, what
the HTTP front door served or handed over, and proposals by command and outcome with their
latencies. prometheus_client's Counter and Histogram take a lock and look labels up on every
increment, which the write path would pay per request; one thread counts, so no lock is
needed. Every label set is bounded by a named series cap, past which new combinations count
in one overflow series.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["FrontDoorCounts", "ProposalStats", "RequestCounts"]

# The request counter's method label: these, or "other".
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
# Routes x methods x statuses is small; the cap only makes the bound explicit. Past it, a new
# combination is counted in the one series OVERFLOW_LABELS.
REQUEST_SERIES_MAX = 4096
OVERFLOW_LABELS = ("other", "other", "other")
# Command kinds x outcomes is small; the cap only makes the bound explicit. Past it, a new
# combination is counted in the one series PROPOSAL_OVERFLOW_LABELS.
PROPOSAL_SERIES_MAX = 1024
PROPOSAL_OVERFLOW_LABELS = ("other", "other")
PROPOSAL_SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

Labels = TypeVar("Labels", bound=tuple[str, ...])


def _count(counts: dict[Labels, int], key: Labels, series_max: int, overflow: Labels) -> Labels:
    """Count one event under `key` in a plain-dict counter of at most `series_max` series
    (then one more, `overflow`, for every new key past the bound); return the key counted."""
    if key not in counts and len(counts) >= series_max:
        key = overflow
    counts[key] = counts.get(key, 0) + 1
    return key


class RequestCounts(Collector):
    """`ripple_http_requests_total` by route, method and status, counted in a plain dict
    and exported at scrape time. A prometheus_client Counter takes a lock per increment,
    and this is bumped once per request, heartbeats included. Only the event loop's thread
    counts (the API's `finish`), so the dict needs no lock. Any method outside HTTP's own
    counts as "other", so a stranger's made-up methods cannot grow the series;
    `REQUEST_SERIES_MAX` bounds them anyway."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}

    def inc(self, route: str, method: str, status: int) -> None:
        key = (route, method if method in HTTP_METHODS else "other", str(status))
        _count(self._counts, key, REQUEST_SERIES_MAX, OVERFLOW_LABELS)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "ripple_http_requests",
            "HTTP requests by route and status",
            labels=["route", "method", "status"],
        )
        for labels, n in list(self._counts.items()):
            family.add_metric(labels, n)
        yield family


class FrontDoorCounts(Collector):
    """What the HTTP front door (front.py) did: requests it read and answered itself, and
    connections it handed to aiohttp. Plain ints bumped on the event loop's thread only,
    exported at scrape time (no lock per request). Workers' heartbeats served here and not
    by aiohttp is the fast path working; a handover count growing with the worker count
    says their requests are not plain (a proxy adding chunked bodies, say)."""

    def __init__(self) -> None:
        self.served = 0
        self.handed_over = 0

    def collect(self) -> Iterator[Metric]:
        served = CounterMetricFamily(
            "ripple_http_front_door_requests",
            "Requests the HTTP front door read and answered itself",
        )
        served.add_metric([], self.served)
        yield served
        handed = CounterMetricFamily(
            "ripple_http_front_door_handovers",
            "Connections the HTTP front door handed to aiohttp",
        )
        handed.add_metric([], self.handed_over)
        yield handed


class _Latencies:
    """One command's proposal times: a count per bucket (the last is +Inf) and their sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(PROPOSAL_SECONDS_BUCKETS) + 1)
        self.total = 0.0


class ProposalStats(Collector):
    """`ripple_proposals_total` by command and outcome and `ripple_proposal_latency_seconds`
    by command, kept in plain dicts and exported at scrape time. prometheus_client's Counter
    and Histogram take a lock and look up labels on every increment, twice per write here.
    Only the event loop's thread proposes
    (`CoordinatorNode.submit`), so the dicts need no lock. `PROPOSAL_SERIES_MAX` bounds the
    series: past it a new combination counts as `PROPOSAL_OVERFLOW_LABELS`."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._latencies: dict[str, _Latencies] = {}

    def add(self, command: str, outcome: str, seconds: float) -> None:
        key = _count(
            self._counts, (command, outcome), PROPOSAL_SERIES_MAX, PROPOSAL_OVERFLOW_LABELS
        )
        latencies = self._latencies.get(key[0])
        if latencies is None:
            full = len(self._latencies) >= PROPOSAL_SERIES_MAX
            name = PROPOSAL_OVERFLOW_LABELS[0] if full else key[0]
            latencies = self._latencies.setdefault(name, _Latencies())
        # A bucket counts the times at or under its bound, as prometheus_client's Histogram.
        latencies.counts[bisect.bisect_left(PROPOSAL_SECONDS_BUCKETS, seconds)] += 1
        latencies.total += seconds

    def collect(self) -> Iterator[Metric]:
        counts = CounterMetricFamily(
            "ripple_proposals", "Commands proposed, by outcome", labels=["command", "outcome"]
        )
        for labels, n in list(self._counts.items()):
            counts.add_metric(labels, n)
        yield counts
        latency = HistogramMetricFamily(
            "ripple_proposal_latency_seconds",
            "Time from propose to applied result",
            labels=["command"],
        )
        bounds = [*map(floatToGoString, PROPOSAL_SECONDS_BUCKETS), "+Inf"]
        for command, latencies in list(self._latencies.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(bounds, latencies.counts, strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([command], buckets, latencies.total)
        yield latency
