"""`bench.stats.percentile`, the nearest-rank percentile every benchmark reports."""

from __future__ import annotations

from bench.stats import percentile


def test_nearest_rank_picks_a_value_of_the_sample() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, out of order
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_one_value_is_every_percentile_and_none_is_zero() -> None:
    assert percentile([7.5], 1) == percentile([7.5], 99) == 7.5
    assert percentile([], 50) == 0.0
