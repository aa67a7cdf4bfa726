"""Recorded pipelines' micro-batches on one worker: each its own task, its job outside the
batch lock, at most PIPELINE_JOBS_MAX at once in turn, a timeout interrupting its job alone,
and a result merged only into the runtime it was read for (pipeline/spec/batches.py)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.spec.batches import PIPELINE_JOBS_MAX, PipelineBatches
from pipeline.spec.run import BatchPartials
from shared.system_clock import SYSTEM_CLOCK

JOB_WAIT_S = 5.0  # a bound on every wait below; the jobs are released by the test itself
TIMEOUT_S = 1.0


class FakeSpark:
    """Spark Connect's tags: per thread, and an interrupt reaches the jobs carrying one."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.running: dict[str, threading.Event] = {}
        self.interrupted: list[str] = []

    def addTag(self, tag: str) -> None:
        self.local.tag = tag

    def removeTag(self, tag: str) -> None:
        self.local.tag = None

    def interruptTag(self, tag: str) -> list[str]:
        self.interrupted.append(tag)
        self.running[tag].set()
        return [tag]


class FakeLive:
    """A partition's live state that records what was merged into it."""

    basis_us = None

    def __init__(self) -> None:
        self.merged: list[Any] = []
        self.destroyed = False

    def prepare(self, outputs: Any, values: Any, *args: Any) -> Any:
        return SimpleNamespace(dead={}, values=values)

    def commit(self, prepared: Any, outputs: Any, sketches: Any) -> None:
        self.merged.append(prepared.values)

    def destroy(self) -> None:
        self.destroyed = True


class FakeRun:
    """A pipeline whose job waits for `release` (or an interrupt of its tag)."""

    def __init__(self, name: str, spark: FakeSpark) -> None:
        self.name, self.paused, self.spark = name, False, spark
        self.outputs, self.max_keys = (), 0
        self.release = threading.Event()
        self.release_on: list[str] = []  # released once this list has anything in it
        self.jobs = 0

    def read(self, partition: int, start: int, rows_max: int) -> tuple[pa.Table, int]:
        return pa.table({"k": ["a", "b"]}), start + 2

    def partials(
        self, spark: FakeSpark, tables: dict[int, pa.Table], carried: Any = None
    ) -> dict[int, Any]:
        self.jobs += 1
        tag = spark.local.tag
        interrupted = spark.running[tag] = threading.Event()
        for _ in range(int(JOB_WAIT_S * 100)):
            if self.release.is_set() or self.release_on:
                return {p: BatchPartials({"a": 1}, {"a": 0}) for p in tables}
            if interrupted.is_set():
                raise RuntimeError("OPERATION_CANCELED")
            interrupted.wait(0.01)
        raise AssertionError(f"{self.name}'s job was never released")


def worker(timeout_s: float = JOB_WAIT_S) -> tuple[PipelineBatches, Holdings, FakeSpark]:
    holdings = Holdings()
    session = SimpleNamespace(lease_valid=lambda: True)
    settings = SimpleNamespace(arrow_batch_rows_max=100, spark_job_timeout_s=timeout_s)
    stats = {"batch_failures": 0, "records": 0, "dead_letter_keys": 0}
    batches = PipelineBatches(
        settings,  # type: ignore[arg-type]
        holdings,
        session,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        stats,
        SYSTEM_CLOCK,
        1.0,
    )
    return batches, holdings, FakeSpark()


def hold(holdings: Holdings, partition: int, run: FakeRun) -> PartitionRuntime:
    rt = PartitionRuntime(epoch=1, run=run, spec_state=FakeLive())  # type: ignore[arg-type]
    rt.loaded.set()
    holdings.gates.host(partition, 1)
    holdings.parts[partition] = rt
    return rt


async def run_once(batches: PipelineBatches, spark: FakeSpark) -> int:
    return await batches.run_once(SimpleNamespace(spark=spark))  # type: ignore[arg-type]


async def finished(batches: PipelineBatches, run: FakeRun) -> int:
    return await asyncio.wait_for(batches.in_flight[run], JOB_WAIT_S)


async def until(condition: Any) -> None:
    for _ in range(int(JOB_WAIT_S * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def test_a_slow_pipelines_job_holds_neither_the_lock_nor_another_pipeline() -> None:
    batches, holdings, spark = worker()
    slow, fast = FakeRun("slow", spark), FakeRun("fast", spark)
    slow_rt, fast_rt = hold(holdings, 1, slow), hold(holdings, 2, fast)
    fast.release.set()
    assert await run_once(batches, spark) == 0  # nothing has ended yet
    assert await finished(batches, fast) == 2
    assert fast_rt.offset == 2 and slow_rt.offset == 0
    assert not holdings.batch_lock.locked()  # `slow`'s job runs outside it
    # `fast` goes on while `slow`'s first job still runs; `slow` is not started twice.
    assert await run_once(batches, spark) == 2
    assert await finished(batches, fast) == 2
    assert fast_rt.offset == 4 and slow.jobs == 1
    slow.release.set()
    await finished(batches, slow)
    assert slow_rt.offset == 2 and slow_rt.failures == 0


async def test_at_most_PIPELINE_JOBS_MAX_jobs_at_once_least_recently_started_first() -> None:
    batches, holdings, spark = worker()
    runs = [FakeRun(f"p{i}", spark) for i in range(PIPELINE_JOBS_MAX + 2)]
    for i, run in enumerate(runs):
        hold(holdings, i, run)
    await run_once(batches, spark)
    assert list(batches.in_flight) == runs[:PIPELINE_JOBS_MAX]
    for run in runs:
        run.release.set()
    for run in runs[:PIPELINE_JOBS_MAX]:
        await finished(batches, run)
    assert await run_once(batches, spark) == 2 * PIPELINE_JOBS_MAX
    # The two that waited go first, then the longest waiting of the others.
    assert list(batches.in_flight) == [*runs[PIPELINE_JOBS_MAX:], *runs[:2]]
    await batches.close()
    assert batches.in_flight == {}


async def test_a_timeout_interrupts_that_pipelines_job_alone() -> None:
    batches, holdings, spark = worker(timeout_s=TIMEOUT_S)
    stuck, other = FakeRun("stuck", spark), FakeRun("other", spark)
    stuck_rt = hold(holdings, 1, stuck)
    await run_once(batches, spark)
    # `other` starts half a timeout later and ends as soon as `stuck`'s job is interrupted:
    # its own job is running when that happens.
    await asyncio.sleep(TIMEOUT_S / 2)
    other_rt = hold(holdings, 2, other)
    await run_once(batches, spark)
    other.release_on = spark.interrupted
    assert await finished(batches, stuck) == 0
    assert stuck_rt.failures == 1 and "spark_job_timeout_s" in stuck_rt.error
    assert stuck_rt.offset == 0
    assert await finished(batches, other) == 2
    assert other_rt.failures == 0 and other_rt.offset == 2
    assert len(spark.interrupted) == 1  # `stuck`'s tag alone


@pytest.mark.parametrize("change", ["released", "newer_epoch", "gate_closed", "paused"])
async def test_a_result_merges_only_into_the_runtime_it_was_read_for(change: str) -> None:
    batches, holdings, spark = worker()
    run = FakeRun("p", spark)
    rt = hold(holdings, 1, run)
    live = rt.spec_state
    await run_once(batches, spark)
    await until(lambda: run.jobs == 1)
    if change == "released":
        holdings.drop(1, rt)
    elif change == "newer_epoch":
        rt.epoch = 2
        holdings.gates.host(1, 2)
    elif change == "paused":
        run.paused = True  # the worker read the pause while the job ran
    else:
        holdings.gates.close(1, 1)
    run.release.set()
    assert await finished(batches, run) == 0
    assert rt.offset == 0 and isinstance(live, FakeLive) and live.merged == []
    # A released runtime's store is destroyed, once no merge holds the lock.
    await until(lambda: live.destroyed == (change == "released"))
