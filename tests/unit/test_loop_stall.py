"""The leader's loop stall (coordinator/service/loop_stall.py) and the duties' use of it: a
worker heard just before the leader's loop stalled is not declared dead by the death check
that runs as the stall ends, while the same silence without a stall still kills."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given
from hypothesis import strategies as st

from coordinator.config import ClusterConfig
from coordinator.core.commands import Bootstrap, DeclareDead, RegisterWorker
from coordinator.core.model import WorkerId
from coordinator.core.planner import Planner
from coordinator.core.state import apply
from coordinator.planner_config import planner_settings
from coordinator.service.duties import LeaderDuties
from coordinator.service.loop_stall import STALL_FLOOR_MS, STALL_SAMPLE_PERIOD_MS, LoopStall
from shared.clock import FakeClock
from tests.unit.test_duty_loop import StandInNode

W1 = WorkerId("w1")


def test_only_lateness_past_the_floor_counts() -> None:
    s = LoopStall()
    s.sleeping(1_000)
    s.woke(1_000 + STALL_FLOOR_MS)  # ordinary jitter
    assert s.total_ms(5_000) == 0
    s.sleeping(2_000)
    s.woke(2_350)
    assert s.total_ms(2_350) == 350 - STALL_FLOOR_MS


def test_the_stall_in_progress_counts_before_the_sampler_wakes() -> None:
    s = LoopStall()
    s.sleeping(1_000)
    assert s.total_ms(900) == 0
    assert s.total_ms(4_000) == 3_000 - STALL_FLOOR_MS  # the wake is 3 s overdue
    s.woke(4_500)
    assert s.total_ms(4_500) == 3_500 - STALL_FLOOR_MS
    assert s.total_ms(9_000) == 3_500 - STALL_FLOOR_MS  # asleep no more: nothing in progress


@given(st.lists(st.tuples(st.integers(0, 5_000), st.integers(0, 5_000)), max_size=40))
def test_the_total_never_falls_and_never_outgrows_the_time_passed(
    spans: list[tuple[int, int]],
) -> None:
    # The sampler's life: sleep a period at `now`, wake `late` after it is due; the total is
    # read at every instant in between.
    s = LoopStall()
    now = 0
    before = s.total_ms(now)
    for pause, late in spans:
        now += pause
        s.sleeping(now + STALL_SAMPLE_PERIOD_MS)
        woke = now + STALL_SAMPLE_PERIOD_MS + late
        for t in range(now, woke + 1, 97):
            total = s.total_ms(t)
            assert before <= total <= before + (t - now)
        s.woke(woke)
        total = s.total_ms(woke)
        assert before <= total <= before + (woke - now)
        now, before = woke, total


def _duties(clock: FakeClock) -> tuple[StandInNode, LeaderDuties, int]:
    node = StandInNode()
    # Too few workers to assign anything and no checkpoint round due: only liveness moves.
    node.config = ClusterConfig(
        total_partitions=4, min_cluster_size=5, heartbeat_timeout_s=3, checkpoint_interval_s=3600
    )
    apply(node.state, "b", Bootstrap(total_partitions=4, now_ms=clock.wall_ms()))
    apply(node.state, "r", RegisterWorker(worker_id=W1, address="http://127.0.0.1:9", now_ms=1))
    duties = LeaderDuties(node, random.Random(1), clock)  # type: ignore[arg-type]
    settings = planner_settings(node.config)
    duties.planner = Planner(settings, duties.rng, node.state, clock.monotonic_ms())
    return node, duties, settings.dead_after_ms


def _declared(node: StandInNode) -> list[DeclareDead]:
    return [c for c in node.submitted if isinstance(c, DeclareDead)]


def test_a_death_check_right_after_a_stall_does_not_count_it_as_silence() -> None:
    clock = FakeClock()
    node, duties, dead_after_ms = _duties(clock)

    async def main() -> None:
        duties.heartbeat(W1, 0.0)
        # The loop stalls (the sampler's wake is overdue) past the timeout; the duty step
        # runs first as it ends, before the sampler or the worker's waiting heartbeat.
        duties.stall.sleeping(clock.monotonic_ms() + STALL_SAMPLE_PERIOD_MS)
        clock.advance(dead_after_ms + 1_000)
        await duties.step()
        assert not _declared(node)
        assert duties.liveness_of(W1) == "alive"
        duties.stall.woke(clock.monotonic_ms())
        duties.heartbeat(W1, 0.0)  # read once the loop is free
        # A real silence after it still kills, on time.
        clock.advance(dead_after_ms)
        await duties.step()
        assert not _declared(node)
        clock.advance(1)
        await duties.step()
        (dead,) = _declared(node)
        assert dead.worker_ids == (W1,)
        await duties.close()

    asyncio.run(main())


def test_the_same_silence_without_a_stall_kills() -> None:
    clock = FakeClock()
    node, duties, dead_after_ms = _duties(clock)

    async def main() -> None:
        duties.heartbeat(W1, 0.0)
        clock.advance(dead_after_ms + 1_000)
        await duties.step()
        (dead,) = _declared(node)
        assert dead.worker_ids == (W1,)
        await duties.close()

    asyncio.run(main())
