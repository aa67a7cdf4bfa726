"""Micro-batches: every open partition's new source records as one Spark job, merged.

Owns the Spark session (an `Aggregator`), the data path's `Feed`, the start-up probe and the
processing loop. Invariant: a batch's results are merged into a partition only if, after
the job, the lease still holds and the gate is still open at the epoch the batch started
with; a failed batch moves no offset (its input is kept for the retry) and is retried after
a growing, capped pause with jitter. A batch's Spark job is bounded by spark_job_timeout_s;
a job cut off by it, or a session the server lost (a restart) or cannot reach, is followed
by a new session before the next batch (pipeline/spark_link.py), never by a partition move;
a store or staging-disk fault is waited out the same way. Results are merged only once the
job's whole result is collected, so a batch fails whole or merges whole.
Blocking work (store, Spark) runs in threads; partition state is touched only on the event
loop, under the batch lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
from collections.abc import Sequence

from pipeline.aggregate import Aggregator, Transform
from pipeline.checkpoint import CheckpointStore
from pipeline.datapath import DataPath, Feed, PlannedBatch, ProbeFailed, default_data_path
from pipeline.holdings import Holdings, PartitionRuntime, count_failures
from pipeline.session import Session
from pipeline.settings import WorkerSettings
from pipeline.source import SourceLog
from pipeline.spark_link import BatchFault, SparkJobTimeout, SparkLink, classify, first_line
from pipeline.spec.batches import PipelineBatches
from pipeline.state import PartitionState, merge_batch
from pipeline.store import ObjectStore
from pipeline.warming import Warming
from shared.clock import Clock, monotonic_s
from shared.messages.session import BATCH_ERROR_LEN_MAX
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["Processor", "retry_pause_s"]

log = logging.getLogger(__name__)

# Failing batches are retried with a growing pause, capped, so a broken path does not spin;
# each pause is drawn between half and all of it, so workers failing on one store together
# do not retry in step.
BATCH_RETRY_PAUSE_S_MAX = 5.0
BATCH_RETRY_DOUBLINGS_MAX = 8
BATCH_RETRY_JITTER_MIN = 0.5
# How long an interrupted start-up probe, or a job past its timeout, may take to hand its
# thread back (the interrupt itself included); past it the thread is left to finish alone.
PROBE_CANCEL_WAIT_S = 10.0


def retry_pause_s(interval_s: float, failures_in_row: int, rng: random.Random) -> float:
    """The pause before retrying a failed micro-batch: the batch interval doubled per
    failure in a row, capped, with jitter."""
    backoff_s = interval_s * float(2 ** min(failures_in_row, BATCH_RETRY_DOUBLINGS_MAX))
    return min(BATCH_RETRY_PAUSE_S_MAX, backoff_s) * rng.uniform(BATCH_RETRY_JITTER_MIN, 1.0)


class Processor:
    def __init__(
        self,
        settings: WorkerSettings,
        store: ObjectStore,
        transform: Transform,
        checkpoints: CheckpointStore,
        holdings: Holdings,
        session: Session,
        stats: dict[str, int],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock  # the stages' times and the source's growth are read on it
        self.settings = settings
        self.store = store
        self.transform = transform
        self.holdings = holdings
        self.session = session
        self.stats = stats
        self.checkpoints = checkpoints  # where dead-letter segments go
        self.staging = settings.staging_dir or tempfile.mkdtemp(prefix="ripple-stage-")
        self.data_path = (
            DataPath(settings.data_path)
            if settings.data_path
            else default_data_path(store, settings.spark_remote)
        )
        self.source: SourceLog | None = None
        self.aggregator: Aggregator | None = None
        self.feed: Feed | None = None
        # Where micro-batch seconds go (cumulative): listing + fetching segments, the Spark
        # job (plan, scan or upload, join, aggregate, collect), merging into the state.
        self.batch_seconds = {"plan": 0.0, "spark": 0.0, "merge": 0.0}
        self._batch_failures_in_row = 0
        self.rng = random.Random()  # the retry pauses' jitter
        self.last_fault: BatchFault | None = None  # why the last failed batch failed
        # Failed micro-batches by BatchFault value (ripple_worker_failed_batches_total).
        self.failed_batches = dict.fromkeys((f.value for f in BatchFault), 0)
        self.link = SparkLink(
            settings.spark_reconnect_backoff_s_min, settings.spark_reconnect_backoff_s_max
        )
        # Warm copies ride along in every micro-batch, read-only (pipeline/warming.py).
        self.warming: Warming | None = None
        # Micro-batches of the recorded pipelines open here, beside `default`'s.
        self.pipelines = PipelineBatches(
            settings, holdings, session, checkpoints, stats, clock, PROBE_CANCEL_WAIT_S
        )

    async def start(self, total_partitions: int | Sequence[int]) -> None:
        """Open the Spark session and the feed, then prove the data path (ProbeFailed).
        `total_partitions`: generation 0's count, or every routing generation's."""
        self.source = SourceLog(self.store, total_partitions)
        self.aggregator = await asyncio.to_thread(
            Aggregator, self.settings.spark_remote, self.transform
        )
        self.feed = Feed(
            self.data_path,
            self.store,
            self.source,
            self.staging,
            arrow_rows_max=self.settings.arrow_batch_rows_max,
            arrow_bytes_max=self.settings.arrow_batch_bytes_max,
        )
        await self.probe(self.aggregator, self.feed)

    async def close(self) -> None:
        await self.pipelines.close()
        if self.aggregator is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.aggregator.close)

    async def probe(self, aggregator: Aggregator, feed: Feed) -> None:
        """Raise ProbeFailed unless Spark reads a probe object through our data path in time."""
        task = asyncio.ensure_future(
            asyncio.to_thread(feed.probe, aggregator, self.settings.worker_id)
        )
        try:
            await asyncio.wait_for(asyncio.shield(task), self.settings.probe_timeout_s)
        except TimeoutError:
            # The job is stuck server-side (say, no executor ever came): cancel it so the
            # thread returns, then refuse to start.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(aggregator.interrupt)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, PROBE_CANCEL_WAIT_S)
            raise ProbeFailed(
                f"Spark at {self.settings.spark_remote} did not finish the start-up probe "
                f"through the {self.data_path.value!r} data path in "
                f"{self.settings.probe_timeout_s:g} s (does the cluster have executors?)"
            ) from None

    def follow_generations(self) -> None:
        """Read the source log of every routing generation the session knows (a host call
        of a partition of a new generation taught it one)."""
        counts = self.session.generations.counts
        if self.source is None or len(counts) <= len(self.source.routings):
            return
        self.source = SourceLog(self.store, counts)
        if self.feed is not None:
            self.feed.source = self.source

    async def process_once(self) -> int:
        """One micro-batch over every open partition; returns records merged."""
        if self.aggregator is None or self.feed is None:
            return 0
        self.follow_generations()
        feed, aggregator = self.feed, self.aggregator
        if self.link.lost:
            # Outside the batch lock: checkpoints and hand-offs need not wait on Spark.
            await self._reconnect(aggregator)
        async with self.holdings.batch_lock:
            if not self.session.lease_valid():
                self.stats["lease_pauses"] += 1
                return 0
            # Recorded pipelines' partitions are processed by `process_pipelines`.
            open_now = {p: rt for p, rt in self.holdings.open_now().items() if rt.run is None}
            warm = {} if self.warming is None else self.warming.offsets()
            if not open_now and not warm:
                return 0
            epochs = {p: rt.epoch for p, rt in open_now.items()}
            began = monotonic_s(self.clock)
            fetched = feed.fetched
            planning = True
            try:
                # Per-partition offsets only advance for segments read whole: a batch never
                # splits a segment.
                batch = await asyncio.to_thread(
                    feed.plan, warm | {p: rt.offset for p, rt in open_now.items()}
                )
                listed = monotonic_s(self.clock)
                for p, head in batch.heads.items():
                    if p in open_now:
                        open_now[p].source_end = head
                        open_now[p].input_rate.observe(head, listed)
                    elif self.warming is not None:
                        self.warming.saw_head(p, head)
                planned = monotonic_s(self.clock)
                self.batch_seconds["plan"] += planned - began
                if not batch:
                    # Nothing new: warm copies at the log's end have caught up.
                    await self._merge_warm(batch, {}, warm)
                    return 0
                # One Spark job for every open partition's new records.
                planning = False
                results = await self._run_job(feed, aggregator, batch)
            except Exception as exc:
                self._batch_failed(open_now, exc, classify(exc, planning=planning))
                raise
            finally:
                self.stats["segments_fetched"] += feed.fetched - fetched
            merging = monotonic_s(self.clock)
            self.batch_seconds["spark"] += merging - planned
            feed.done(batch)
            merged = await self._merge(batch, results, epochs)
            merged += await self._merge_warm(batch, results, warm)
            self.batch_seconds["merge"] += monotonic_s(self.clock) - merging
            return merged

    async def _run_job(
        self, feed: Feed, aggregator: Aggregator, batch: PlannedBatch
    ) -> dict[int, PartitionState]:
        """The batch's Spark job, whole result collected, within spark_job_timeout_s; past it
        the job is interrupted and SparkJobTimeout raised (its session is then replaced)."""
        timeout_s = self.settings.spark_job_timeout_s
        task = asyncio.ensure_future(asyncio.to_thread(feed.run, aggregator, batch))
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            pass
        log.error(
            "spark: a micro-batch job over %d segments ran past spark_job_timeout_s=%g; "
            "interrupting it, retrying on a new session",
            len(batch.keys),
            timeout_s,
        )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.to_thread(aggregator.interrupt), PROBE_CANCEL_WAIT_S)
        with contextlib.suppress(Exception):
            # Its result, if it still comes, is dropped: the batch is retried whole.
            await asyncio.wait_for(asyncio.shield(task), PROBE_CANCEL_WAIT_S)
        if not task.done():
            log.error(
                "spark: the interrupted job did not return in %g s; its thread is left to "
                "finish alone and the batch retried on a new session",
                PROBE_CANCEL_WAIT_S,
            )
        raise SparkJobTimeout(
            f"the Spark job ran past spark_job_timeout_s={timeout_s:g} and was interrupted"
        )

    async def _reconnect(self, aggregator: Aggregator) -> None:
        """A new session in place of the lost one; raises (counted as a failed batch of every
        open partition) while Spark cannot make one."""
        try:
            await asyncio.wait_for(
                asyncio.to_thread(aggregator.reconnect), self.settings.spark_job_timeout_s
            )
        except Exception as exc:
            fault = classify(exc)
            if not fault.needs_new_session:  # whatever stops a session being made
                fault = BatchFault.SPARK_UNREACHABLE
            self._batch_failed(self.holdings.open_now(), exc, fault)
            raise
        lasted = self.link.reconnected(monotonic_s(self.clock))
        self.stats["spark_reconnects"] += 1
        log.warning(
            "spark: new session on %s; micro-batches resume after %.1f s without one",
            self.settings.spark_remote,
            lasted,
        )

    def _batch_failed(
        self, parts: dict[int, PartitionRuntime], exc: BaseException, fault: BatchFault
    ) -> None:
        text = first_line(exc, BATCH_ERROR_LEN_MAX)
        self.stats["batch_failures"] += 1
        self.failed_batches[fault.value] += 1
        self._batch_failures_in_row += 1
        self.last_fault = fault
        if self.link.failed(fault, text, monotonic_s(self.clock)):
            log.warning(
                "spark: %s (%s); making a new session, retrying every %g-%g s",
                fault.value,
                text,
                self.link.backoff_s_min,
                self.link.backoff_s_max,
            )
        count_failures(parts, text, "")

    async def _merge(
        self, batch: PlannedBatch, results: dict[int, PartitionState], epochs: dict[int, int]
    ) -> int:
        self._batch_failures_in_row = 0
        if not self.session.lease_valid():
            # Paused mid-batch (say SIGSTOP) past the lease: someone else may own these
            # partitions now. Discard the results.
            self.stats["lease_pauses"] += 1
            return 0
        merged = 0
        for p, end in batch.ends.items():
            if p not in epochs:
                continue  # a warm copy's
            rt = self.holdings.parts.get(p)
            if rt is None or rt.epoch != epochs[p] or not self.holdings.gates.admits(p, rt.epoch):
                continue
            merged += await self._merge_into(p, rt, end, results.get(p, {}))
        self.stats["batches"] += 1
        self.stats["records"] += merged
        return merged

    async def _merge_into(
        self, p: int, rt: PartitionRuntime, end: int, part: PartitionState
    ) -> int:
        """Fold one batch's records of `p`, from `rt.offset` to `end`, into its state."""
        max_keys = self.settings.max_keys_per_partition
        rt.failures, rt.error = 0, ""
        new_state, dead = merge_batch(rt.state, part, max_keys)
        if dead:
            await asyncio.to_thread(
                self.checkpoints.write_dead_letter, p, rt.epoch, rt.offset, end, dead
            )
            self.stats["dead_letter_keys"] += len(dead)
            log.warning(
                "partition %d: %d new keys over max_keys_per_partition=%d "
                "went to the dead-letter segment",
                p,
                len(dead),
                max_keys,
            )
        rt.state, rt.offset = new_state, end
        return sum(s.count for s in part.values())

    async def _merge_warm(
        self, batch: PlannedBatch, results: dict[int, PartitionState], starts: dict[int, int]
    ) -> int:
        if self.warming is None:
            return 0
        merged = 0
        for p, start in starts.items():
            end = batch.ends.get(p, start)
            head = batch.heads.get(p, end)
            part = results.get(p, {})
            rt = self.holdings.parts.get(p)
            if rt is not None and self._hosted_from_copy(p, rt, start):
                # A host took the copy while this batch ran: the batch is the hosted
                # partition's first, which saves the move a whole micro-batch.
                merged += await self._merge_into(p, rt, end, part)
                continue
            merged += self.warming.merge(
                p, start, end, head, part, self.settings.max_keys_per_partition
            )
        return merged

    def _hosted_from_copy(self, p: int, rt: PartitionRuntime, start: int) -> bool:
        """Whether `p` is hosted now, from the copy this batch read for, still where the batch
        started: its records from `start` are then the hosted state's next ones."""
        return (
            rt.loaded.is_set()
            and rt.offset == start
            and self.holdings.gates.admits(p, rt.epoch)
            and self.session.lease_valid()
        )

    async def process_pipelines(self) -> int:
        """One micro-batch of every recorded pipeline open here (pipeline/spec/batches.py);
        none while Spark has no session (the default batch's loop makes a new one)."""
        if self.aggregator is None or self.link.lost:
            return 0
        return await self.pipelines.run_once(self.aggregator)

    async def loop(self, stopped: asyncio.Event) -> None:
        """Micro-batches until `stopped`; a batch that merged nothing waits the interval."""
        while not stopped.is_set():
            pause_s = self.settings.batch_interval_s
            try:
                merged = await self.process_once()
            except Exception as exc:  # keep the worker alive; the batch is retried (input kept)
                merged = 0
                if self.link.lost:
                    # One line per attempt: the traceback of a refused connection says nothing.
                    pause_s = self.link.pause_s()
                    log.warning(
                        "spark: no usable session (%s, attempt %d): %s; next try in %.1f s",
                        self.link.fault.value if self.link.fault else "?",
                        self.link.attempts,
                        first_line(exc),
                        pause_s,
                    )
                else:
                    pause_s = retry_pause_s(pause_s, self._batch_failures_in_row, self.rng)
                    fault = self.last_fault
                    if fault in (BatchFault.STORE, BatchFault.STAGING_DISK):
                        # One line per retry: a store outage's traceback says nothing new.
                        log.warning(
                            "micro-batch failed (%s): %s; retrying in %.1f s",
                            fault.value if fault else "?",
                            first_line(exc),
                            pause_s,
                        )
                    else:
                        log.exception("micro-batch failed; retrying")
            merged += await self.process_pipelines()
            if merged == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopped.wait(), pause_s)
