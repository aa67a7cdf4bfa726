"""The leader's host and release calls, applied to this worker's holdings.

Invariant: a gate opens only once its partition's checkpoint is loaded, so a failed load
leaves the epoch open to the leader's retry; a gate closes only after the final checkpoint
is written, so a failed write leaves the partition processing and the release retryable;
an epoch once released never reopens (the gate's table, `pipeline/gate.py`). Failures come
back as `shared.errors` with the status the worker answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pipeline.checkpoint import CheckpointCorrupt, CheckpointData
from pipeline.checkpointing import Checkpointer
from pipeline.gate import Refused
from pipeline.generations import Generations
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.source import generation_base, generation_of
from pipeline.spec.live_state import LiveState
from pipeline.spec.partition_state import SpecCheckpoint, SpecPartitionState
from pipeline.spec.run import PipelineRun, PipelineRuns
from pipeline.warming import Warming
from shared.errors import ClientError, RequestError, UnavailableError
from shared.messages.common import SentCheckpoint
from shared.messages.host import HostReply, HostRequest
from shared.messages.release import ReleasedCheckpoint, ReleaseReply, ReleaseRequest

__all__ = ["HOST_LOAD_WAIT_S", "Hosting"]

log = logging.getLogger(__name__)

# A repeated host or a release waits this long for the first host's checkpoint load.
HOST_LOAD_WAIT_S = 60.0


def _stale(message: str) -> RequestError:
    return RequestError(message, field="epoch", code="stale_epoch")


def _unavailable(message: str) -> UnavailableError:
    return UnavailableError(message, code="checkpoint_unavailable")


class Hosting:
    def __init__(
        self,
        holdings: Holdings,
        checkpointer: Checkpointer,
        warming: Warming | None = None,
        *,
        generations: Generations | None = None,
        cluster_routing: Callable[[], Awaitable[tuple[int, ...]]] | None = None,
        runs: PipelineRuns | None = None,
    ) -> None:
        self.holdings = holdings
        self.checkpointer = checkpointer
        self.warming = warming
        self.generations = Generations() if generations is None else generations
        # Asked when a checkpoint names a generation no call has told this worker of.
        self.cluster_routing = cluster_routing
        # Finds the recorded pipeline of a partition numbered past `default`'s.
        self.runs = runs

    async def _run_of(self, partition: int) -> PipelineRun | None:
        if self.runs is None:
            return None
        try:
            return await self.runs.of(partition)
        except ClientError as exc:
            raise UnavailableError(str(exc), code="unavailable") from None

    async def learn_routing(
        self, partition: int, routing: tuple[int, ...] | None, checkpoint: SentCheckpoint | None
    ) -> None:
        """Know the generation `checkpoint`'s offset names before hosting or warming from it:
        from the call's `routing`, else from the coordinator's health (a call without one)."""
        if routing is not None:
            self.generations.learn(routing)
        needed = 0 if checkpoint is None else generation_of(checkpoint.offset)
        if needed == 0:
            return  # generation 0 needs no routing beyond the worker's own
        if needed > self.generations.current and self.cluster_routing is not None:
            try:
                self.generations.learn(await self.cluster_routing())
            except ClientError as exc:
                raise UnavailableError(str(exc), code="routing_unknown") from None
        if needed > self.generations.current:
            raise UnavailableError(
                f"the checkpoint names routing generation {needed}; this worker knows up to "
                f"{self.generations.current}",
                code="routing_unknown",
            )
        count = self.generations.counts[needed]
        if partition >= count:
            raise RequestError(
                f"partition {partition} is not in generation {needed} ({count} partitions)",
                field="partition",
            )

    async def host(self, call: HostRequest) -> HostReply:
        """Open the partition at the call's epoch, from the sent checkpoint or offset 0."""
        p, epoch = call.partition, call.epoch
        if self.holdings.stopping:
            # Its last checkpoints are written: the leader hosts it on the restarted process.
            raise UnavailableError("the worker is stopping to restart", code="stopping")
        run = await self._run_of(p)
        if run is None:
            await self.learn_routing(p, call.routing, call.checkpoint)
        else:
            _check_generation(p, run, call.checkpoint)
        gates, parts = self.holdings.gates, self.holdings.parts
        # Check the gate without changing it: it opens only once the checkpoint is loaded,
        # so a failed load leaves the epoch open to the leader's retry.
        probe = gates.get(p).host(epoch)
        if isinstance(probe, Refused):
            raise _stale(probe.reason)
        rt = parts.get(p)
        if rt is not None and rt.epoch == epoch:
            await asyncio.wait_for(rt.loaded.wait(), HOST_LOAD_WAIT_S)  # same call, repeated
            return HostReply(partition=p, epoch=epoch, offset=rt.offset)
        if rt is not None:
            self.holdings.drop(p, rt)  # an older epoch's runtime: its store goes too
        rt = PartitionRuntime(epoch=epoch, run=run)
        if run is not None:
            # Its generation's first offset: without a checkpoint it starts there.
            rt.offset = generation_base(run.info.generation)
        parts[p] = rt
        sent = None if call.checkpoint is None else call.checkpoint.offset
        # A recorded pipeline's partitions move cold: warm copies are `default`'s only.
        warm = None if self.warming is None or run is not None else self.warming.take(p, sent)
        try:
            if warm is not None:
                # A warm copy is the partition's state at its offset (replay is
                # deterministic): only the tail after it is replayed, nothing is loaded.
                rt.state, rt.offset = warm.state, warm.offset
            elif call.checkpoint is not None:
                data = await asyncio.to_thread(self.checkpointer.load_sent_any, p, call.checkpoint)
                # The loaded object is named after the epoch that wrote it: this epoch's
                # first report writes its own, so every checkpoint the coordinator records
                # at an epoch was written at that epoch.
                if run is not None or isinstance(data, SpecCheckpoint):
                    ran, state = _spec_state(p, run, data)
                    rt.spec_state = await asyncio.to_thread(self._live, p, epoch, ran, state)
                else:
                    rt.state = dict(data.state)
                rt.offset = data.offset
            elif run is not None:
                rt.spec_state = await asyncio.to_thread(self._live, p, epoch, run, None)
        except Exception as exc:  # report to the leader, which retries with backoff
            self.holdings.drop(p, rt)
            log.exception("loading checkpoint for partition %d failed", p)
            raise _unavailable(str(exc)) from None
        if self.holdings.stopping:
            self.holdings.drop(p, rt)
            raise UnavailableError("the worker is stopping to restart", code="stopping")
        # Gates read again after the load: a re-registration meanwhile replaces them.
        result = self.holdings.gates.host(p, epoch)
        if isinstance(result, Refused) or parts.get(p) is not rt:
            # A newer epoch arrived while loading: this call lost the race.
            self.holdings.drop(p, rt)
            raise _stale(f"partition {p} moved on while loading")
        rt.loaded.set()
        log.info(
            "hosting partition %d at epoch %d from offset %d (%s)",
            p,
            epoch,
            rt.offset,
            "its warm copy" if warm is not None else "the sent checkpoint",
        )
        return HostReply(partition=p, epoch=epoch, offset=rt.offset)

    def _live(
        self, partition: int, epoch: int, run: PipelineRun, state: SpecPartitionState | None
    ) -> LiveState:
        """Blocking: a new store for the partition, holding `state` (None: empty)."""
        directory = self.holdings.store_directory(partition, epoch)
        window, cache = run.spec.window, self.holdings.cache
        if state is None:
            return LiveState.create(directory, window, cache)
        return LiveState.from_state(directory, window, state, cache)

    async def release(self, call: ReleaseRequest) -> ReleaseReply:
        """Close the partition at the call's epoch after writing its final checkpoint."""
        p, epoch, holdings = call.partition, call.epoch, self.holdings
        rt = holdings.parts.get(p)
        if rt is None or not holdings.gates.admits(p, epoch):
            raise _stale(f"partition {p} is not open here at {epoch}")
        # Waits for a merge in flight: default's whole batch, a recorded pipeline's merge only
        # (its job runs outside the lock, and its merge skips a partition released here).
        async with holdings.batch_lock:
            if holdings.parts.get(p) is not rt or not holdings.gates.admits(p, epoch):
                # Released by an overlapping call (the leader's retry) while this one
                # waited: answered as a repeated release is, with no second final checkpoint.
                raise _stale(f"partition {p} is not open here at {epoch}")
            await asyncio.wait_for(rt.loaded.wait(), HOST_LOAD_WAIT_S)
            # The final checkpoint first, the gate after (the lock keeps the state still):
            # a store failure then leaves the gate open and the release retryable, instead
            # of a closed gate whose runtime is never dropped.
            try:
                uri = await self.checkpointer.write_final(p, epoch, rt)
            except Exception as exc:  # the leader retries the release with backoff
                log.exception("final checkpoint of partition %d epoch %d failed", p, epoch)
                raise _unavailable(str(exc)) from None
            holdings.gates.close(p, epoch)
            holdings.drop(p, rt)
        log.info(
            "released partition %d epoch %d at offset %d (%s)",
            p,
            epoch,
            rt.offset,
            call.migration_id,
        )
        return ReleaseReply(
            partition=p, epoch=epoch, checkpoint=ReleasedCheckpoint(offset=rt.offset, uri=uri)
        )


def _check_generation(partition: int, run: PipelineRun, checkpoint: SentCheckpoint | None) -> None:
    """A recorded pipeline's partition starts in its run's generation: its numbers are that
    generation's alone, so `default`'s routing has nothing to say about them."""
    if checkpoint is not None and generation_of(checkpoint.offset) != run.info.generation:
        raise RequestError(
            f"partition {partition} is of routing generation {run.info.generation}; the "
            f"checkpoint at offset {checkpoint.offset} is of generation "
            f"{generation_of(checkpoint.offset)}",
            field="checkpoint",
        )


def _spec_state(
    partition: int, run: PipelineRun | None, ck: CheckpointData | SpecCheckpoint
) -> tuple[PipelineRun, SpecPartitionState]:
    """The run and loaded state of a recorded pipeline's partition: a format-2 checkpoint of
    the spec version it runs, or an error (loaded as nothing else)."""
    if run is None or not isinstance(ck, SpecCheckpoint):
        raise CheckpointCorrupt(
            f"partition {partition}: a checkpoint of the other format "
            f"({'a recorded pipeline' if run is not None else 'default'} holds it)"
        )
    problem = run.problem(ck)
    if problem is not None:
        raise CheckpointCorrupt(f"partition {partition}: {problem}")
    return run, ck.state
