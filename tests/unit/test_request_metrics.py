"""The request counter: a stranger's made-up methods cannot add series, and the series are
bounded."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from coordinator.service import metrics as metrics_module
from coordinator.service.metrics import Metrics


def _rows(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return sorted(r for r in text.splitlines() if r.startswith("ripple_http_requests_total"))


def test_made_up_methods_count_as_other() -> None:
    metrics = Metrics()
    for i in range(50):
        metrics.requests.inc("/v1/status", f"X{i}", 405)
    metrics.requests.inc("/v1/status", "GET", 200)
    metrics.requests.inc("/v1/status", "GET", 200)
    assert _rows(metrics) == [
        'ripple_http_requests_total{method="GET",route="/v1/status",status="200"} 2.0',
        'ripple_http_requests_total{method="other",route="/v1/status",status="405"} 50.0',
    ]
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE ripple_http_requests_total counter" in text


def test_the_series_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "REQUEST_SERIES_MAX", 3)
    metrics = Metrics()
    for status in range(10):
        metrics.requests.inc("/r", "GET", status)
    metrics.requests.inc("/r", "GET", 1)  # an existing series still counts as itself
    assert _rows(metrics) == [
        'ripple_http_requests_total{method="GET",route="/r",status="0"} 1.0',
        'ripple_http_requests_total{method="GET",route="/r",status="1"} 2.0',
        'ripple_http_requests_total{method="GET",route="/r",status="2"} 1.0',
        'ripple_http_requests_total{method="other",route="other",status="other"} 7.0',
    ]


def test_proposals_are_counted_and_timed_per_command_and_outcome() -> None:
    metrics = Metrics()
    for seconds in (0.002, 0.004):
        metrics.proposed("RegisterWorker", "ok", seconds)
    metrics.proposed("RegisterWorker", "rejected", 0.001)
    text = generate_latest(metrics.registry).decode()
    assert 'ripple_proposals_total{command="RegisterWorker",outcome="ok"} 2.0' in text
    assert 'ripple_proposals_total{command="RegisterWorker",outcome="rejected"} 1.0' in text
    assert 'ripple_proposal_latency_seconds_count{command="RegisterWorker"} 3.0' in text
    assert (
        'ripple_proposal_latency_seconds_bucket{command="RegisterWorker",le="0.0025"} 2.0' in text
    )
