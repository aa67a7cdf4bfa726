"""Warm copies: partitions this worker warms up for a move into it, read-only.

Owns the copies a leader's warm calls start (docs/design.md §5, warm hand-offs): each loads
the partition's checkpoint and then follows the source log in the micro-batches, while the
source still owns and serves the partition. Invariant: a warm copy holds no epoch and no
gate; it is never checkpointed, reported or served, and writes nothing (a batch that would
dead-letter keys ends it instead). Its state is the deterministic state of the partition at
its offset, so a host call of the partition at any epoch may start from it
(`take`) instead of loading a checkpoint: it is used when it has caught up with the log
(or is past the sent checkpoint), and dropped otherwise. At most `copies_max` exist; one the
leader has not asked about for `idle_s` is dropped. A warm call may ask to be answered only
after the copy's next step (`answer`, `WarmRequest.hold_s`): a step is a micro-batch that
merged into the copy or found nothing new for it, and the next one starts right after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from pipeline.checkpointing import Checkpointer
from pipeline.holdings import Holdings
from pipeline.settings import WARM_COPIES_MAX_DEFAULT, WARM_COPY_IDLE_S_DEFAULT
from pipeline.state import PartitionState, merge_batch
from shared.clock import Clock, monotonic_s
from shared.errors import RequestError, UnavailableError
from shared.messages.warm import UnwarmReply, UnwarmRequest, WarmReply, WarmRequest
from shared.system_clock import SYSTEM_CLOCK

__all__ = ["WarmCopy", "Warming"]

log = logging.getLogger(__name__)

ERROR_CHARS_MAX = 200


@dataclass(slots=True)
class WarmCopy:
    migration_id: str
    asked_at_s: float  # monotonic: the leader's last warm call about it
    state: PartitionState = field(default_factory=dict)
    offset: int = 0  # the next source offset it would read
    head: int = 0  # the source log's end when last listed
    loaded: bool = False
    # Since the load, a micro-batch has merged records into it or listed nothing new for it:
    # until then `head - offset` is the tail since the checkpoint, not a replaying copy's lag.
    listed: bool = False
    # Its last merged batch reached the log's end its plan listed: within one micro-batch.
    caught_up: bool = False
    failed: str = ""
    # Set (and forgotten) at the copy's next step, or when it ends: what a held call awaits.
    stepped: asyncio.Event | None = None

    def step(self) -> None:
        """The copy took a micro-batch step, failed or was taken: held answers go now."""
        event, self.stepped = self.stepped, None
        if event is not None:
            event.set()

    def reply(self, partition: int) -> WarmReply:
        return WarmReply(
            partition=partition,
            loaded=self.loaded and self.listed,
            offset=self.offset,
            head=self.head,
        )


class Warming:
    def __init__(
        self,
        holdings: Holdings,
        checkpointer: Checkpointer,
        *,
        copies_max: int = WARM_COPIES_MAX_DEFAULT,
        idle_s: float = WARM_COPY_IDLE_S_DEFAULT,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock  # when the leader last asked about each copy
        self.holdings = holdings
        self.checkpointer = checkpointer
        self.copies_max = copies_max
        self.idle_s = idle_s
        self.copies: dict[int, WarmCopy] = {}
        self._loads: set[asyncio.Task[None]] = set()
        self.stats = {"started": 0, "used": 0, "dropped": 0}

    def warm(self, call: WarmRequest) -> WarmReply:
        """Start warming `call.partition` up, or say how far it is."""
        p = call.partition
        if self.holdings.stopping:
            raise UnavailableError("the worker is stopping to restart", code="stopping")
        if p in self.holdings.parts:
            raise RequestError(f"partition {p} is hosted here", code="hosted")
        self.expire()
        copy = self.copies.get(p)
        if copy is not None and copy.failed:
            self._drop(p, copy)
            raise UnavailableError(f"warm-up of {p} failed: {copy.failed}", code="warm_failed")
        now = monotonic_s(self.clock)
        if copy is not None:
            copy.asked_at_s, copy.migration_id = now, call.migration_id
            return copy.reply(p)
        if len(self.copies) >= self.copies_max:
            raise UnavailableError(
                f"{len(self.copies)} warm copies here already (warm_copies_max)",
                code="warm_refused",
            )
        copy = self.copies[p] = WarmCopy(migration_id=call.migration_id, asked_at_s=now)
        self.stats["started"] += 1
        task = asyncio.get_running_loop().create_task(self._load(p, copy, call))
        self._loads.add(task)
        task.add_done_callback(self._loads.discard)
        log.info("warming partition %d up for %s", p, call.migration_id)
        return copy.reply(p)

    async def answer(self, call: WarmRequest) -> WarmReply:
        """`warm`, and once the copy is loaded, its answer after its next step when the call
        asks to be held (`hold_s`; answered as it stands when that passes first)."""
        reply = self.warm(call)
        copy = self.copies.get(call.partition)
        if call.hold_s <= 0 or copy is None or not copy.loaded or copy.failed:
            return reply
        if copy.stepped is None:
            copy.stepped = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(copy.stepped.wait(), call.hold_s)
        return copy.reply(call.partition)

    async def loads_done(self) -> None:
        """Until every checkpoint load started so far has ended (its copy loaded, or failed:
        the copy says so)."""
        await asyncio.gather(*self._loads, return_exceptions=True)

    async def _load(self, p: int, copy: WarmCopy, call: WarmRequest) -> None:
        try:
            if call.checkpoint is not None:
                data = await asyncio.to_thread(self.checkpointer.load_sent, p, call.checkpoint)
                copy.state, copy.offset = dict(data.state), data.offset
        except Exception as exc:  # the leader's next warm call hears of it and goes cold
            log.warning("warm-up of partition %d: loading its checkpoint failed: %s", p, exc)
            copy.failed = (str(exc) or type(exc).__name__)[:ERROR_CHARS_MAX]
            return
        copy.head, copy.loaded = copy.offset, True

    def counts(self) -> dict[str, int]:
        """The copies held now and how many were started, used and dropped (for /metrics)."""
        return {"held": len(self.copies), **self.stats}

    def offsets(self) -> dict[int, int]:
        """Where each loaded warm copy reads next (what a micro-batch plans for them)."""
        self.expire()
        return {
            p: c.offset
            for p, c in self.copies.items()
            if c.loaded and not c.failed and p not in self.holdings.parts
        }

    def saw_head(self, p: int, head: int) -> None:
        copy = self.copies.get(p)
        if copy is not None and copy.loaded:
            copy.head = max(copy.head, head)
            copy.listed = copy.listed or head <= copy.offset

    def merge(
        self, p: int, start: int, end: int, head: int, part: PartitionState, max_keys: int
    ) -> int:
        """Fold one batch's results into `p`'s copy if the copy is still where the batch
        started; the records merged."""
        copy = self.copies.get(p)
        if copy is None or copy.failed or copy.offset != start:
            return 0
        new_state, dead = merge_batch(copy.state, part, max_keys)
        copy.step()
        if dead:
            # Dead-letter rows are the owner's to write: a copy that would write some ends.
            copy.failed = f"{len(dead)} keys over max_keys_per_partition"
            return 0
        copy.state, copy.offset, copy.head = new_state, end, max(copy.head, head)
        copy.listed = True
        copy.caught_up = end >= head
        return sum(s.count for s in part.values())

    def take(self, p: int, sent_offset: int | None) -> WarmCopy | None:
        """The copy a host of `p` starts from, or None (it loads the checkpoint); either way
        the copy is gone after."""
        copy = self.copies.pop(p, None)
        if copy is None:
            return None
        copy.step()
        if (
            copy.loaded
            and not copy.failed
            and (copy.caught_up or copy.offset >= (sent_offset or 0))
        ):
            self.stats["used"] += 1
            return copy
        self.stats["dropped"] += 1
        return None

    def unwarm(self, call: UnwarmRequest) -> UnwarmReply:
        """Drop the copy of `call.partition` if it is the one made for `call.migration_id`
        (the move ended without a hand-off); another move's copy stays."""
        copy = self.copies.get(call.partition)
        if copy is None or copy.migration_id != call.migration_id:
            return UnwarmReply(partition=call.partition, dropped=False)
        log.info("dropping warm copy of partition %d: %s ended", call.partition, copy.migration_id)
        self._drop(call.partition, copy)
        return UnwarmReply(partition=call.partition, dropped=True)

    def expire(self) -> None:
        limit = monotonic_s(self.clock) - self.idle_s
        for p, copy in list(self.copies.items()):
            if copy.asked_at_s < limit:
                log.info("dropping warm copy of partition %d (%s): not asked", p, copy.migration_id)
                self._drop(p, copy)

    def _drop(self, p: int, copy: WarmCopy) -> None:
        if self.copies.get(p) is copy:
            del self.copies[p]
            self.stats["dropped"] += 1
            copy.step()
