"""Micro-batches of the recorded pipelines a worker has partitions of, beside `default`'s.

Owns the batch of each recorded pipeline (pipeline/spec/run.py runs its Spark job). Invariant,
as for `default`'s batches (pipeline/processing.py): a batch's results merge into a partition
only if, after the job, the lease still holds and the gate is still open at the epoch the
batch started with; a failed batch moves no offset. Each pipeline's batch is its own: one
whose job fails (its transform throws, Spark refuses it, it runs past spark_job_timeout_s)
counts the failure on its own partitions only, and the others' batches go on. A paused
pipeline's partitions are held and not processed. State changes under the batch lock only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pyarrow as pa

from pipeline.aggregate import Aggregator
from pipeline.checkpoint import CheckpointStore
from pipeline.holdings import Holdings, PartitionRuntime, count_failures
from pipeline.session import Session
from pipeline.settings import WorkerSettings
from pipeline.spark_link import first_line
from pipeline.spec.run import PipelineRun, PipelineRuns
from pipeline.spec.sketches import SparkSketches
from shared.clock import Clock, monotonic_s
from shared.messages.session import BATCH_ERROR_LEN_MAX

__all__ = ["PipelineBatches"]

log = logging.getLogger(__name__)


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

    async def run_once(self, aggregator: Aggregator) -> int:
        """One micro-batch of every recorded pipeline with partitions open here, a Spark job
        per pipeline; returns records merged."""
        if self.runs is not None:
            await self.runs.refresh(monotonic_s(self.clock))
        async with self.holdings.batch_lock:
            if not self.session.lease_valid():
                return 0
            by_run: dict[PipelineRun, dict[int, PartitionRuntime]] = {}
            for p, rt in self.holdings.open_now().items():
                if rt.run is not None and not rt.run.paused:
                    by_run.setdefault(rt.run, {})[p] = rt
            merged = 0
            for run, parts in by_run.items():
                try:
                    merged += await self._batch(aggregator, run, parts)
                except Exception as exc:
                    self.stats["batch_failures"] += 1
                    text = first_line(exc, BATCH_ERROR_LEN_MAX) or type(exc).__name__
                    count_failures(parts, text, f"pipeline {run.name} ")
                    if isinstance(exc, TimeoutError):
                        # Past spark_job_timeout_s: cut the job off so its thread returns.
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(
                                asyncio.to_thread(aggregator.interrupt), self.interrupt_wait_s
                            )
            return merged

    async def _batch(
        self, aggregator: Aggregator, run: PipelineRun, parts: dict[int, PartitionRuntime]
    ) -> int:
        """One pipeline's micro-batch over `parts` (under the batch lock); records merged."""
        epochs = {p: rt.epoch for p, rt in parts.items()}
        starts = {p: rt.offset for p, rt in parts.items()}
        rows_max = self.settings.arrow_batch_rows_max

        def read_all() -> dict[int, tuple[pa.Table, int]]:
            return {p: run.read(p, start, rows_max) for p, start in starts.items()}

        reads = await asyncio.to_thread(read_all)
        tables = {p: t for p, (t, _) in reads.items() if t.num_rows}
        if not tables:
            return 0
        spark = aggregator.spark
        results = await asyncio.wait_for(
            asyncio.to_thread(run.partials, spark, tables), self.settings.spark_job_timeout_s
        )
        sketches = SparkSketches(spark)
        merged = 0
        for p, (table, end) in reads.items():
            rt = self.holdings.parts.get(p)
            if (
                end == starts[p]
                or rt is not parts[p]
                or rt.epoch != epochs[p]
                or rt.spec_state is None
                or not self.holdings.gates.admits(p, rt.epoch)
                or not self.session.lease_valid()
            ):
                continue
            values, firsts = results.get(p, ({}, {}))
            state, dead = await asyncio.to_thread(
                run.merge, rt.spec_state, values, firsts, sketches
            )
            if dead:
                data = run.dead_letter_bytes(p, dead)
                await asyncio.to_thread(
                    self.checkpoints.write_dead_letter_encoded, p, rt.epoch, starts[p], end, data
                )
                self.stats["dead_letter_keys"] += len(dead)
                log.warning(
                    "pipeline %s partition %d: %d new keys over its key limit went to the "
                    "dead-letter segment",
                    run.name,
                    p,
                    len(dead),
                )
            rt.spec_state, rt.offset = state, end
            rt.failures, rt.error = 0, ""
            merged += table.num_rows
        self.stats["records"] += merged
        return merged
