"""Micro-batches of the recorded pipelines a worker has partitions of, beside `default`'s.

Owns the batch of each recorded pipeline (pipeline/spec/run.py runs its Spark job) and the
tasks that run them. Invariant, as for `default`'s batches (pipeline/processing.py): a batch's
results merge into a partition only if, after the job, the runtime is the one the batch read
for, at the same epoch and offset, its gate is still open and the lease still holds; a failed
batch moves no offset. Each pipeline's batch is its own task: its input is read and its Spark
job runs outside the batch lock, at most PIPELINE_JOBS_MAX pipelines' jobs at once, each
tagged so a timeout interrupts that job alone; the lock is taken only to merge. So a slow or
failing pipeline (its transform throws or sleeps, Spark refuses it, it runs to
spark_job_timeout_s) counts its failure on its own partitions only and delays neither the
other pipelines' batches nor `default`'s, hosting or checkpoints. A paused pipeline's
partitions are held and not processed: a batch that ends after this worker read the pause is
dropped unmerged, so its offsets stop from that moment. State changes under the batch lock
only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from pipeline.aggregate import Aggregator
from pipeline.checkpoint import CheckpointStore
from pipeline.holdings import Holdings, PartitionRuntime, count_failures
from pipeline.session import Session
from pipeline.settings import WorkerSettings
from pipeline.spark_link import first_line
from pipeline.spec.live_state import LiveState
from pipeline.spec.run import BatchPartials, PipelineRun, PipelineRuns
from pipeline.spec.sketches import SparkSketches
from shared.clock import Clock, monotonic_s
from shared.messages.session import BATCH_ERROR_LEN_MAX

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PIPELINE_JOBS_MAX", "PipelineBatches"]

log = logging.getLogger(__name__)

# At most this many recorded pipelines' Spark jobs run at once from one worker: each holds a
# thread and a share of the Spark cluster's slots; the others wait their turn, least recently
# started first, so no pipeline is starved by the ones before it.
PIPELINE_JOBS_MAX = 4

# Each partition's batch partials (PipelineRun.partials).
Partials = dict[int, BatchPartials]


class PipelineBatches:
    def __init__(
        self,
        settings: WorkerSettings,
        holdings: Holdings,
        session: Session,
        checkpoints: CheckpointStore,
        stats: dict[str, int],
        clock: Clock,
        interrupt_wait_s: float,
    ) -> None:
        self.settings = settings
        self.holdings = holdings
        self.session = session
        self.checkpoints = checkpoints  # where dead letters go
        self.stats = stats
        self.clock = clock
        self.interrupt_wait_s = interrupt_wait_s
        # The recorded pipelines this worker has partitions of (their pause, their resume).
        self.runs: PipelineRuns | None = None
        # Each pipeline's batch in flight (at most one per pipeline, PIPELINE_JOBS_MAX in all).
        self.in_flight: dict[PipelineRun, asyncio.Task[int]] = {}
        # When each pipeline's last batch started (a sequence number): the turn order.
        self.started: dict[str, int] = {}
        self._sequence = itertools.count(1)

    async def run_once(self, aggregator: Aggregator) -> int:
        """Start a micro-batch of every recorded pipeline with partitions open here and no
        batch in flight, within PIPELINE_JOBS_MAX; returns the records merged by the batches
        that ended since the last call. Never waits for a Spark job."""
        merged = self._collect()
        if self.runs is not None:
            await self.runs.refresh(monotonic_s(self.clock))
        if not self.session.lease_valid():
            return merged
        by_run: dict[PipelineRun, dict[int, PartitionRuntime]] = {}
        for p, rt in self.holdings.open_now().items():
            if rt.run is not None and not rt.run.paused and rt.run not in self.in_flight:
                by_run.setdefault(rt.run, {})[p] = rt
        turns = sorted(by_run, key=lambda run: self.started.get(run.name, 0))
        for run in turns[: max(0, PIPELINE_JOBS_MAX - len(self.in_flight))]:
            self.started[run.name] = next(self._sequence)
            self.in_flight[run] = asyncio.create_task(
                self._batch(aggregator, run, by_run[run]), name=f"pipeline {run.name} batch"
            )
        return merged

    def _collect(self) -> int:
        """Records merged by the batches that ended; they are forgotten."""
        merged = 0
        for run, task in list(self.in_flight.items()):
            if task.done():
                del self.in_flight[run]
                merged += task.result()  # a batch's task never raises: failures are counted
        return merged

    async def close(self) -> None:
        """Cancel the batches in flight and wait for them (the worker is stopping)."""
        tasks = list(self.in_flight.values())
        self.in_flight.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _batch(
        self, aggregator: Aggregator, run: PipelineRun, parts: dict[int, PartitionRuntime]
    ) -> int:
        """One pipeline's micro-batch over `parts`; records merged. A failure is counted on
        `parts` alone."""
        spark = aggregator.spark  # a new session made meanwhile serves the next batch
        try:
            return await self._run(spark, run, parts)
        except Exception as exc:
            self.stats["batch_failures"] += 1
            text = first_line(exc, BATCH_ERROR_LEN_MAX) or type(exc).__name__
            count_failures(parts, text, f"pipeline {run.name} ")
            return 0

    async def _run(
        self, spark: SparkSession, run: PipelineRun, parts: dict[int, PartitionRuntime]
    ) -> int:
        epochs = {p: rt.epoch for p, rt in parts.items()}
        starts = {p: rt.offset for p, rt in parts.items()}
        # A windowed spec's watermark basis before the batch: it changes only with the offset,
        # which the merge checks is still `starts[p]`.
        carried = {
            p: None if rt.spec_state is None else rt.spec_state.basis_us for p, rt in parts.items()
        }
        rows_max = self.settings.arrow_batch_rows_max

        def read_all() -> dict[int, tuple[pa.Table, int]]:
            return {p: run.read(p, start, rows_max) for p, start in starts.items()}

        reads = await asyncio.to_thread(read_all)
        tables = {p: t for p, (t, _) in reads.items() if t.num_rows}
        if not tables:
            return 0
        results = await self._job(spark, run, tables, carried)
        sketches = SparkSketches(spark)
        merged = 0
        async with self.holdings.batch_lock:
            for p, (table, end) in reads.items():
                rt = self.holdings.parts.get(p)
                if (
                    end == starts[p]
                    or run.paused  # read since the job started: its rows wait for the resume
                    or rt is not parts[p]
                    or rt.epoch != epochs[p]
                    or rt.offset != starts[p]
                    or rt.spec_state is None
                    or not self.holdings.gates.admits(p, rt.epoch)
                    or not self.session.lease_valid()
                ):
                    continue
                await self._merge(run, p, rt, rt.spec_state, starts[p], end, results, sketches)
                merged += table.num_rows
        self.stats["records"] += merged
        return merged

    async def _job(
        self,
        spark: SparkSession,
        run: PipelineRun,
        tables: dict[int, pa.Table],
        carried: dict[int, int | None],
    ) -> Partials:
        """The batch's Spark job within spark_job_timeout_s; past it the job, found by its
        tag, is interrupted (the other pipelines' jobs go on) and TimeoutError raised."""
        tag = f"ripple-pipeline-batch-{next(self._sequence)}"

        def tagged() -> Partials:
            # Tags are per thread and session: only this thread's operations carry it.
            spark.addTag(tag)
            try:
                return run.partials(spark, tables, carried)
            finally:
                spark.removeTag(tag)

        timeout_s = self.settings.spark_job_timeout_s
        task = asyncio.ensure_future(asyncio.to_thread(tagged))
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            pass
        log.error(
            "pipeline %s: a micro-batch job ran past spark_job_timeout_s=%g; interrupting it",
            run.name,
            timeout_s,
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.to_thread(spark.interruptTag, tag), self.interrupt_wait_s
            )
        with contextlib.suppress(Exception):
            # Its result, if it still comes, is dropped: the batch is retried whole.
            await asyncio.wait_for(asyncio.shield(task), self.interrupt_wait_s)
        raise TimeoutError(
            f"the Spark job ran past spark_job_timeout_s={timeout_s:g} and was interrupted"
        )

    async def _merge(
        self,
        run: PipelineRun,
        p: int,
        rt: PartitionRuntime,
        live: LiveState,
        start: int,
        end: int,
        results: Partials,
        sketches: SparkSketches,
    ) -> None:
        """Fold one partition's batch, from `start` to `end`, into its state `live` (under
        the batch lock): prepared (the batch's keys read), its dead letters written, then
        committed, so a failed write leaves the state and the offset before the batch."""
        part = results.get(p) or BatchPartials()
        prepared = await asyncio.to_thread(
            live.prepare, run.outputs, part.values, part.firsts, run.max_keys, sketches, part.max_us
        )
        dead = prepared.dead
        if part.late is not None:
            # Written before the state moves past them, as the key limit's dead letters are.
            late = run.dead_letter_bytes_late(part.late)
            await asyncio.to_thread(
                self.checkpoints.write_late_encoded, p, rt.epoch, start, end, late
            )
            self.stats["late_records"] += part.late.num_rows
            log.info(
                "pipeline %s partition %d: %d late records went to the dead-letter segment",
                run.name,
                p,
                part.late.num_rows,
            )
        if dead:
            data = run.dead_letter_bytes(p, dead)
            await asyncio.to_thread(
                self.checkpoints.write_dead_letter_encoded, p, rt.epoch, start, end, data
            )
            self.stats["dead_letter_keys"] += len(dead)
            log.warning(
                "pipeline %s partition %d: %d new keys over its key limit went to the "
                "dead-letter segment",
                run.name,
                p,
                len(dead),
            )
        await asyncio.to_thread(live.commit, prepared, run.outputs, sketches)
        rt.offset = end
        rt.failures, rt.error = 0, ""
