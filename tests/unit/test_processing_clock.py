"""The micro-batch loop (pipeline/processing.py) times its stages and measures how fast the
source grows on the worker's clock: with a FakeClock that the planning step moves on, the
plan stage's seconds and a partition's input rate come out exact. The feed is a fake that
lists a growing source log and plans nothing to run (no Spark)."""

from __future__ import annotations

from pathlib import Path

from pipeline.datapath import PlannedBatch
from pipeline.holdings import PartitionRuntime
from pipeline.lease import Lease
from pipeline.store import LocalStore
from pipeline.worker import Worker
from shared.clock import FakeClock
from tests.unit.test_pipeline_worker import offline_settings

PLAN_MS = 250  # what listing the source takes, on the fake clock


class GrowingSource:
    """A feed whose listing takes PLAN_MS and finds the source 100 records longer each time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.fetched = 0
        self.head = 0

    def plan(self, offsets: dict[int, int]) -> PlannedBatch:
        self.clock.advance(PLAN_MS)
        self.head += 100
        return PlannedBatch(heads=dict.fromkeys(offsets, self.head))


async def test_stage_times_and_input_rate_are_read_on_the_workers_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    worker = Worker(offline_settings(tmp_path, "w1"), LocalStore(str(tmp_path / "s")), clock=clock)
    processor = worker.processor
    processor.feed = GrowingSource(clock)  # type: ignore[assignment]
    processor.aggregator = object()  # type: ignore[assignment]
    processor.warming = None
    worker.lease = Lease(lease_ms=600_000).renewed(clock.monotonic_ms())
    rt = PartitionRuntime(epoch=1)
    rt.loaded.set()
    worker.parts[0] = rt
    worker.holdings.gates.host(0, 1)
    try:
        assert await processor.process_once() == 0  # listed, nothing new to run
        assert processor.batch_seconds["plan"] == PLAN_MS / 1000
        assert rt.source_end == 100 and rt.input_rate.rate_per_s is None  # a baseline only
        clock.advance(1_750)
        assert await processor.process_once() == 0
        assert processor.batch_seconds["plan"] == 2 * PLAN_MS / 1000
        # 100 more records listed 2 s (of the clock) after the first listing.
        assert rt.source_end == 200 and rt.input_rate.rate_per_s == 50.0
    finally:
        await worker.client.close()
