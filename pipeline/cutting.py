"""The cut call of a rescale: end an old partition's routing generation at its seal and
checkpoint it exactly there (docs/pipeline.md "Rescaling", the CUTTING step).

The first call seals the partition's source log (`SourceLog.seal`, create-only and
idempotent, so a repeat or a new owner after a failover finds the same cut); the micro-
batches go on reading the partition up to the seal and no further, since a source log's
listing ends at its seal. Once the partition's offset is the cut, a checkpoint at exactly
(partition, epoch, cut) is written, create-only, under the batch lock and only while the
gate is open at that epoch and the lease holds. Invariant: a cut reply is done only with the
URI of a checkpoint holding the partition's state at the cut, written at the call's epoch.

`default`'s partitions and a recorded pipeline's are cut alike; only the log sealed differs:
`default`'s is the cluster's (whose routing the call teaches this worker), a recorded
pipeline's is its run's generation log (its next generation has numbers of its own, and the
cluster's routing is not its), and its checkpoint is format 2, of the run's spec.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pipeline.checkpointing import Checkpointer
from pipeline.generations import Generations
from pipeline.holdings import Holdings, PartitionRuntime
from pipeline.source import SourceLog, generation_of
from pipeline.store import ObjectStore, StoreError
from shared.clock import monotonic_s
from shared.errors import ErrorCode, RequestError, UnavailableError
from shared.messages.rescale import CutReply, CutRequest
from shared.routing import SLOT_BASE, Routing

__all__ = ["Cutting"]

log = logging.getLogger(__name__)


def _stale(message: str, code: ErrorCode = "stale_epoch", field: str = "epoch") -> RequestError:
    return RequestError(message, field=field, code=code)


class Cutting:
    def __init__(
        self,
        store: ObjectStore,
        holdings: Holdings,
        checkpointer: Checkpointer,
        generations: Generations,
        lease_valid: Callable[[], bool],
    ) -> None:
        self.store = store
        self.holdings = holdings
        self.checkpointer = checkpointer
        self.generations = generations
        self.lease_valid = lease_valid

    def _hosted(self, call: CutRequest) -> PartitionRuntime:
        rt = self.holdings.held(call.partition)
        if rt is None or rt.epoch != call.epoch:
            raise _stale(f"partition {call.partition} is not hosted here at epoch {call.epoch}")
        if generation_of(rt.offset) != call.generation:
            raise _stale(
                f"partition {call.partition} here is of generation {generation_of(rt.offset)}, "
                f"not {call.generation}",
                code="stale_generation",
                field="generation",
            )
        return rt

    def _sealing(self, call: CutRequest, rt: PartitionRuntime) -> SourceLog:
        """The log whose seal ends the partition's generation for the next one."""
        following = Routing(generation=call.generation + 1, partitions=call.partitions)
        if rt.run is not None:
            return rt.run.log.followed_by(following)  # its generation is the call's (_hosted)
        # The next generation is not committed yet (the build commits it): only this seal
        # names it, so it goes into a log of its own rather than the worker's routing.
        return SourceLog(self.store, (*call.routing, call.partitions))

    async def cut(self, call: CutRequest) -> CutReply:
        """Seal, and answer done once the checkpoint at the cut is written."""
        p, epoch = call.partition, call.epoch
        if p < SLOT_BASE:
            self.generations.learn(call.routing)  # first: a conflicting routing is refused
        rt = self._hosted(call)
        sealing = self._sealing(call, rt)
        try:
            cut = await asyncio.to_thread(sealing.seal, p, call.generation)
        except (StoreError, OSError) as exc:
            raise UnavailableError(f"sealing partition {p}: {exc}", code="store_failed") from None
        if rt.offset < cut:
            return CutReply(partition=p, epoch=epoch, offset=cut, done=False, uri=None)
        async with self.holdings.batch_lock:
            rt = self._hosted(call)  # a release or a newer epoch may have come meanwhile
            if not self.lease_valid():
                raise UnavailableError("no lease: not checkpointing now", code="no_lease")
            if rt.offset != cut:
                # The listing ends at the seal, so processing cannot pass it.
                raise UnavailableError(
                    f"partition {p} is at offset {rt.offset}, past its cut {cut}",
                    code="store_failed",
                )
            try:
                uri = await self.checkpointer.write_final(p, epoch, rt)
            except Exception as exc:  # the leader repeats the call
                log.exception("cut checkpoint of partition %d epoch %d failed", p, epoch)
                raise UnavailableError(str(exc), code="checkpoint_unavailable") from None
            rt.checkpoint_offset, rt.checkpoint_uri = cut, uri
            rt.covered_at_s = monotonic_s(self.checkpointer.clock)
        log.info("partition %d epoch %d cut at offset %d: %s", p, epoch, cut, uri)
        return CutReply(partition=p, epoch=epoch, offset=cut, done=True, uri=uri)
