"""Checkpoints of the partitions this worker holds: written, reported, and loaded when sent.

Invariant: a periodic checkpoint is written and reported only with a valid lease, only for
partitions open at their runtime's epoch, and under the batch lock, so the state it holds
is the state at its offset; each is named after the epoch that wrote it. A restart's last
checkpoints (`close_for_restart`) are written the same way and their gates closed under the
same lock, so nothing is processed after the offset they record. A checkpoint the
leader sends with a host call is loaded only if it is the canonical object of that
partition, epoch and offset in this worker's own store and holds exactly those, so no other
partition's checkpoint can stand in for this one's. A round the store fails is logged and
counted, and the next round retries it: the state it would have covered is still held.
A recorded pipeline's checkpoint is published to its results tables only once the
coordinator accepted it, from the state it holds (pipeline.spec.results), and its closed
windows are trimmed from the state only after they are published.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pipeline.checkpoint import CheckpointCorrupt, CheckpointData, CheckpointStore
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.session import CheckpointEntry, Session
from pipeline.spark_link import first_line
from pipeline.spec.aggregations import SketchOps
from pipeline.spec.partition_state import SpecCheckpoint, SpecPartitionState
from pipeline.spec.results import ResultsStore, publish
from pipeline.store import StoreError
from shared.checkpoint_ref import checkpoint_key
from shared.clock import Clock, monotonic_s
from shared.messages.common import SentCheckpoint
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["Checkpointer"]

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(
        self,
        checkpoints: CheckpointStore,
        holdings: Holdings,
        session: Session,
        stats: dict[str, int],
        clock: Clock = SYSTEM_CLOCK,
        *,
        results: ResultsStore | None = None,
        sketches: Callable[[], SketchOps] | None = None,
    ) -> None:
        self.clock = clock  # when a partition's state was last covered (the age metric)
        self.checkpoints = checkpoints
        self.holdings = holdings
        self.session = session
        self.stats = stats
        # Where accepted checkpoints of recorded pipelines are published (None: nowhere), and
        # the Spark sketch reads their snapshot needs.
        self.results = results
        self.sketches = sketches
        # A recorded pipeline's partition -> the runtime, offset and state of the checkpoint
        # last written or confirmed: what is published once the coordinator accepts it.
        self._reported: dict[int, tuple[PartitionRuntime, int, SpecPartitionState]] = {}

    async def write_checkpoints(self) -> list[CheckpointEntry]:
        """Checkpoint every open partition whose offset moved since its last checkpoint;
        the entries to report, one per open partition."""
        async with self.holdings.batch_lock:
            return await self._write_open()

    async def close_for_restart(self) -> list[CheckpointEntry]:
        """The process is stopping to start again: once the batch in flight is done,
        checkpoint every open partition (only with a valid lease: without one another worker
        may own it by now) and close every gate, so nothing more is processed here and the
        restarted process resumes from these offsets. The entries to report."""
        holdings = self.holdings
        async with holdings.batch_lock:
            holdings.stopping = True
            entries = await self._write_open()
            for p, rt in list(holdings.open_now().items()):
                holdings.gates.close(p, rt.epoch)
                holdings.drop(p, rt)
        return entries

    async def _write_open(self) -> list[CheckpointEntry]:
        """Under the batch lock: write what moved, and the entries of every open partition."""
        entries: list[CheckpointEntry] = []
        if not self.session.lease_valid():
            return entries
        # This round's partitions only: a released one's state is not kept alive here.
        self._reported = {}
        for p, rt in sorted(self.holdings.open_now().items()):
            if rt.checkpoint_offset != rt.offset or not rt.checkpoint_uri:
                rt.checkpoint_uri = await self._write(p, rt.epoch, rt)
                rt.checkpoint_offset = rt.offset
                self.stats["checkpoints"] += 1
            rt.covered_at_s = monotonic_s(self.clock)
            if rt.run is not None and rt.checkpointed is not None:
                # The state its checkpoint holds (`checkpoint_bytes` kept it until published).
                self._reported[p] = (rt, rt.offset, rt.checkpointed)
            entries.append(
                CheckpointEntry(
                    partition=p, epoch=rt.epoch, offset=rt.offset, uri=rt.checkpoint_uri
                )
            )
        return entries

    async def checkpoint_and_report(self) -> None:
        """One checkpoint round (in the background). A store that fails it past its client's
        retries costs this round only: the state stays in memory, the checkpoint age grows
        (ripple_worker_checkpoint_age_max_seconds) and the next round writes it again."""
        try:
            entries = await self.write_checkpoints()
        except StoreError as exc:
            self.stats["checkpoint_failures"] += 1
            log.warning("checkpoint round failed, the next one retries: %s", first_line(exc))
            return
        await self.report(entries)

    async def report(self, entries: list[CheckpointEntry]) -> None:
        """Report written checkpoints; log the fenced ones."""
        if not entries:
            return
        verdicts = await self.session.report_checkpoints(entries)
        fenced = [v for v in verdicts if v.fenced]
        self.stats["fenced"] += len(fenced)
        for v in fenced:
            log.warning("checkpoint of partition %d fenced: %s", v.partition, v.reason)
            self._reported.pop(v.partition, None)  # never published
        accepted = {v.partition for v in verdicts if not v.fenced}
        for e in entries:
            if e.partition in accepted:
                await self._publish(e.partition, e.offset)

    async def _publish(self, partition: int, offset: int) -> None:
        """Publish the accepted checkpoint of `partition` at `offset`, once per runtime and
        offset; a failure is logged and the next accepted round publishes again."""
        reported = self._reported.get(partition)
        if self.results is None or self.sketches is None or reported is None:
            return
        rt, at, state = reported
        if at != offset or rt.published_offset == offset or rt.run is None:
            return
        run = rt.run
        try:
            await asyncio.to_thread(
                publish,
                self.results,
                run.name,
                run.info.incarnation,
                run.spec,
                run.outputs,
                partition,
                offset,
                state,
                self.sketches,
            )
        except Exception as exc:  # a store or Spark failure: the next accepted round retries
            self.stats["results_failures"] += 1
            log.warning("publishing results of partition %d failed: %s", partition, first_line(exc))
            return
        self.stats["results_published"] += 1
        async with self.holdings.batch_lock:
            rt.published_offset = offset
            if rt.checkpointed is state:
                rt.checkpointed = None  # published: not held in memory any longer
            current = rt.spec_state
            if state.closed and current is not None:
                # Merges only append to `closed`: the published rows are its first ones.
                current.trim_closed(len(state.closed))

    async def write_final(self, partition: int, epoch: int, rt: PartitionRuntime) -> str:
        """The checkpoint a release at `epoch` hands over (the caller holds the batch lock)."""
        return await self._write(partition, epoch, rt)

    async def _write(self, partition: int, epoch: int, rt: PartitionRuntime) -> str:
        if rt.checkpoint_uri and rt.checkpoint_offset == rt.offset and epoch == rt.epoch:
            # This epoch's checkpoint at this offset holds this state (publishing may since
            # have trimmed its closed windows, which that checkpoint still names).
            return rt.checkpoint_uri
        # Encoded off the event loop (the caller holds the batch lock: the state stays put).
        encoded = await asyncio.to_thread(rt.checkpoint_bytes, partition, epoch)
        if encoded is not None:
            uri = await asyncio.to_thread(
                self.checkpoints.write_encoded, partition, epoch, rt.offset, encoded
            )
            if rt.spec_state is not None:
                # Its unnamed closed rows are named after it, as any loader of it names them.
                rt.spec_state.name_at(rt.offset)
            return uri
        return await asyncio.to_thread(
            self.checkpoints.write, partition, epoch, rt.offset, dict(rt.state)
        )

    def load_sent(self, partition: int, ck: SentCheckpoint) -> CheckpointData:
        """`load_sent_any` of one of `default`'s partitions."""
        data = self.load_sent_any(partition, ck)
        if isinstance(data, SpecCheckpoint):
            raise CheckpointCorrupt(f"{ck.uri!r} is a recorded pipeline's checkpoint")
        return data

    def load_sent_any(self, partition: int, ck: SentCheckpoint) -> CheckpointData | SpecCheckpoint:
        """Blocking: load the checkpoint the leader sent, and only if it is what it says it
        is: the canonical object of this partition at the sent epoch and offset in our own
        store, holding exactly that partition, epoch and offset."""
        expected = self.checkpoints.store.uri(checkpoint_key(partition, ck.epoch, ck.offset))
        if ck.uri != expected:
            raise CheckpointCorrupt(
                f"sent checkpoint {ck.uri!r} is not partition {partition}'s at epoch "
                f"{ck.epoch} offset {ck.offset} ({expected!r})"
            )
        data = self.checkpoints.read_any(ck.uri)
        held = (data.partition, data.epoch, data.offset)
        if held != (partition, ck.epoch, ck.offset):
            raise CheckpointCorrupt(f"{ck.uri!r} holds partition/epoch/offset {held}")
        return data
