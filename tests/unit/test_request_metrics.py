"""The request counter: cached children, and a stranger's made-up methods cannot add series."""

from __future__ import annotations

from prometheus_client import generate_latest

from coordinator.service.metrics import REQUEST_CHILDREN_CACHED_MAX, Metrics


def test_made_up_methods_count_as_other_and_children_are_reused() -> None:
    metrics = Metrics()
    for i in range(50):
        metrics.request_counter("/v1/status", f"X{i}", 405).inc()
    metrics.request_counter("/v1/status", "GET", 200).inc()
    assert metrics.request_counter("/v1/status", "GET", 200) is metrics.request_counter(
        "/v1/status", "GET", 200
    )
    text = generate_latest(metrics.registry).decode()
    rows = [r for r in text.splitlines() if r.startswith("ripple_http_requests_total{")]
    assert sorted(rows) == [
        'ripple_http_requests_total{method="GET",route="/v1/status",status="200"} 1.0',
        'ripple_http_requests_total{method="other",route="/v1/status",status="405"} 50.0',
    ]


def test_the_cache_is_bounded() -> None:
    metrics = Metrics()
    for status in range(REQUEST_CHILDREN_CACHED_MAX + 10):
        metrics.request_counter("/r", "GET", status).inc()
    assert len(metrics._request_children) == REQUEST_CHILDREN_CACHED_MAX
    # Past the cap a child is still counted, just looked up each time.
    metrics.request_counter("/r", "GET", REQUEST_CHILDREN_CACHED_MAX + 5).inc()
    text = generate_latest(metrics.registry).decode()
    assert f'status="{REQUEST_CHILDREN_CACHED_MAX + 5}"}} 2.0' in text
