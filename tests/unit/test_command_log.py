"""Each committed command's line and count (coordinator/service/command_log.py)."""

from __future__ import annotations

import logging

import pytest

from coordinator.core.commands import DeclareDead, FallBack, MarkStuck, StartRelease, StartWarm
from coordinator.core.model import Epoch, MigrationId, PartitionId, WorkerId
from coordinator.service.command_log import committed
from coordinator.service.metrics import Metrics


def sample(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    return metrics.registry.get_sample_value(name, labels or {}) or 0.0


def test_a_death_is_logged_and_counted_per_worker(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    dead = tuple(WorkerId(f"w{i}") for i in range(3))
    with caplog.at_level(logging.WARNING, logger="coordinator.service.command_log"):
        committed(DeclareDead(worker_ids=dead, assignments=(), now_ms=1), metrics, None)
    assert sample(metrics, "ripple_workers_declared_dead_total") == 3
    assert "declared dead (3): w0, w1, w2" in caplog.text


def test_fallbacks_are_counted_by_where_they_go() -> None:
    metrics = Metrics()
    p, e = PartitionId(1), Epoch(2)
    committed(FallBack(partition=p, epoch=e, checkpoint=None, note="n", now_ms=1), metrics, None)
    committed(MarkStuck(partition=p, epoch=e, note="n", now_ms=1), metrics, None)
    assert sample(metrics, "ripple_partition_fallbacks_total", {"to": "replay"}) == 1
    assert sample(metrics, "ripple_partition_fallbacks_total", {"to": "stuck"}) == 1


def test_a_release_without_a_warm_up_counts_as_cold() -> None:
    metrics = Metrics()
    mid = MigrationId("m-1")
    committed(StartWarm(migration_id=mid, now_ms=1), metrics, None)
    assert sample(metrics, "ripple_migration_releases_total", {"warm_up": "cold"}) == 0
    committed(StartRelease(migration_id=mid, now_ms=2), metrics, None)
    assert sample(metrics, "ripple_migration_releases_total", {"warm_up": "cold"}) == 1
