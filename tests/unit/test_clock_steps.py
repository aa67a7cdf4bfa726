"""A wall-clock step (NTP, an operator) moves no safety decision.

The leader's liveness runs on the executor's monotonic clock and the worker's lease on the
worker's: both are given a FakeClock whose wall reading jumps an hour back and forth while
monotonic time advances a little. No verdict, no DeclareDead, no lease changes; only
monotonic time ends them. The wall clock still stamps the commands.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from coordinator.config import ClusterConfig
from coordinator.core.commands import Bootstrap, DeclareDead, RegisterWorker
from coordinator.core.model import WorkerId
from coordinator.core.planner import Planner
from coordinator.core.state import apply
from coordinator.planner_config import planner_settings
from coordinator.service.duties import LeaderDuties
from pipeline.lease import Lease
from pipeline.store import LocalStore
from pipeline.worker import Worker
from shared.clock import FakeClock
from tests.unit.test_duty_loop import StandInNode
from tests.unit.test_pipeline_worker import offline_settings

HOUR_MS = 3_600_000
W1 = WorkerId("w1")


def test_wall_clock_steps_move_no_liveness_verdict() -> None:
    node = StandInNode()
    # Too few workers to assign anything and no checkpoint round due for an hour: the
    # executor makes no worker call, only liveness decisions.
    node.config = ClusterConfig(
        total_partitions=4, min_cluster_size=5, heartbeat_timeout_s=30, checkpoint_interval_s=3600
    )
    clock = FakeClock()
    apply(node.state, "b", Bootstrap(total_partitions=4, now_ms=clock.wall_ms()))
    apply(node.state, "r", RegisterWorker(worker_id=W1, address="http://127.0.0.1:9", now_ms=1))
    duties = LeaderDuties(node, random.Random(1), clock)  # type: ignore[arg-type]
    settings = planner_settings(node.config)
    duties.planner = Planner(settings, duties.rng, node.state, clock.monotonic_ms())

    async def main() -> None:
        duties.heartbeat(W1, 0.0)
        for step in (-HOUR_MS, 2 * HOUR_MS, -2 * HOUR_MS, 10 * HOUR_MS):
            clock.step_wall(step)
            clock.advance(1_000)
            await duties.step()
            assert duties.liveness_of(W1) == "alive", step
        assert not [c for c in node.submitted if isinstance(c, DeclareDead)]
        # Monotonic time past the timeout is what kills, and the command carries wall time.
        clock.advance(settings.dead_after_ms + 1)
        await duties.step()
        (dead,) = [c for c in node.submitted if isinstance(c, DeclareDead)]
        assert dead.worker_ids == (W1,) and dead.now_ms == clock.wall_ms()
        await duties.close()

    asyncio.run(main())


def test_wall_clock_steps_do_not_stretch_or_cut_the_worker_lease(tmp_path: Path) -> None:
    clock = FakeClock()
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "s")), clock=clock)
    worker.lease = Lease(lease_ms=10_000).renewed(clock.monotonic_ms())
    for step in (-HOUR_MS, 2 * HOUR_MS, -2 * HOUR_MS):
        clock.step_wall(step)
        clock.advance(1_000)
        assert worker.lease_valid(), step
    clock.step_wall(-10 * HOUR_MS)  # a backward step would have stretched a wall-clock lease
    clock.advance(7_001)
    assert not worker.lease_valid()

    async def close() -> None:
        await worker.client.close()

    asyncio.run(close())
