"""The request counter: a stranger's made-up methods cannot add series, and the series are
bounded."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from coordinator.service import event_metrics as metrics_module
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


def _proposal_lines(registry: object) -> list[str]:
    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    return sorted(
        line
        for line in text.splitlines()
        if "ripple_proposal" in line and "_created" not in line and "queue_full" not in line
    )


def test_proposal_series_are_what_prometheus_client_would_export() -> None:
    """The plain-dict counter and histogram export what prometheus_client's own Counter and
    Histogram export for the same observations (times on a bucket's bound count in it)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    reference = CollectorRegistry()
    counter = Counter(
        "ripple_proposals",
        "Commands proposed, by outcome",
        ["command", "outcome"],
        registry=reference,
    )
    histogram = Histogram(
        "ripple_proposal_latency_seconds",
        "Time from propose to applied result",
        ["command"],
        registry=reference,
        buckets=metrics_module.PROPOSAL_SECONDS_BUCKETS,
    )
    metrics = Metrics()
    times = [0.0, 0.0005, 0.001, 0.0011, 0.0025, 0.03, 0.5, 1.0, 4.99, 5.0, 7.5, 120.0]
    for i, seconds in enumerate(times):
        command = ("RegisterWorker", "Checkpoint")[i % 2]
        outcome = ("ok", "rejected", "unknown")[i % 3]
        metrics.proposed(command, outcome, seconds)
        counter.labels(command=command, outcome=outcome).inc()
        histogram.labels(command=command).observe(seconds)
    assert _proposal_lines(metrics.registry) == _proposal_lines(reference)


def test_proposal_series_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "PROPOSAL_SERIES_MAX", 2)
    metrics = Metrics()
    for i in range(6):
        metrics.proposed(f"Command{i}", "ok", 0.002)
    metrics.proposed("Command0", "ok", 0.002)  # an existing series still counts as itself
    lines = _proposal_lines(metrics.registry)
    assert 'ripple_proposals_total{command="Command0",outcome="ok"} 2.0' in lines
    assert 'ripple_proposals_total{command="other",outcome="other"} 4.0' in lines
    assert len([line for line in lines if line.startswith("ripple_proposals_total")]) == 3
    counts = [line for line in lines if "latency_seconds_count" in line]
    assert counts == [
        'ripple_proposal_latency_seconds_count{command="Command0"} 2.0',
        'ripple_proposal_latency_seconds_count{command="Command1"} 1.0',
        'ripple_proposal_latency_seconds_count{command="other"} 4.0',
    ]


def test_checkpoint_reports_are_counted_by_status() -> None:
    metrics = Metrics()
    metrics.checkpoints_reported(3, 0)
    metrics.checkpoints_reported(0, 2)
    metrics.checkpoints_reported(1, 1)
    text = generate_latest(metrics.registry).decode()
    assert 'ripple_checkpoint_reports_total{status="accepted"} 4.0' in text
    assert 'ripple_checkpoint_reports_total{status="fenced"} 3.0' in text
