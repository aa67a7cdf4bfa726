"""Group commit: the proposal queue, its batches, their in-flight slots and every deadline.

Owns the way from `propose(entry)` to one pysyncobj append and back: while
`in_flight_max` batches are in flight, proposals queue (bounded in count and bytes); a free
slot sends everything queued, up to the batch bounds, as ONE log entry (`replication.batch`),
and a lone proposal as itself, so one client alone waits for nothing. Invariants:

- Every proposal gets exactly one outcome: its own result (a batch's results are handed out
  item by item), the entry's failure, or a timeout at its own deadline.
- A proposal whose caller gave up before its batch went out is never appended.
- A slot is released exactly once, by the entry's callback or, if pysyncobj never calls
  back, by a safety timer, so the queue cannot wedge.
- pysyncobj's failure codes become `replication.errors` here, where they enter.

Runs on the event loop thread; only an entry's callback may come from the stall guard's
thread, and it then hands the outcome to the loop.
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj import FAIL_REASON

from replication.batch import BatchFormatError, decode_results, encode_batch
from replication.errors import NoLeaderError, OutcomeUnknownError, QueueFullError
from shared.clock import Clock
from shared.system_clock import SYSTEM_CLOCK

__all__ = [
    "DEFAULT_PROPOSE_TIMEOUT_S",
    "GROUP_COMMIT_BYTES_MAX_DEFAULT",
    "GROUP_COMMIT_ENTRIES_MAX_DEFAULT",
    "GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT",
    "PROPOSALS_QUEUED_BYTES_MAX_DEFAULT",
    "PROPOSALS_QUEUED_MAX_DEFAULT",
    "Deadlines",
    "GroupCommit",
    "GroupCommitLimits",
    "GroupCommitStats",
]

DEFAULT_PROPOSE_TIMEOUT_S = 5.0
# pysyncobj calls back on commit or failure; if it never did (a bug), a slot is freed after
# the longest a caller with the default timeout could wait.
SLOT_TIMEOUT_S = 2 * DEFAULT_PROPOSE_TIMEOUT_S
GROUP_COMMIT_ENTRIES_MAX_DEFAULT = 256
GROUP_COMMIT_BYTES_MAX_DEFAULT = 1024 * 1024
GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT = 1
PROPOSALS_QUEUED_MAX_DEFAULT = 10_000
PROPOSALS_QUEUED_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
# The deadlines' heap is rebuilt without the settled proposals once it holds twice as many
# entries as after the last rebuild (and at least this many): it never holds more than twice
# the proposals waiting (queued plus in flight, themselves bounded) or this floor.
DEADLINES_PRUNE_MIN = 1024
# A timer may fire up to a clock tick early (the clock and uvloop's count milliseconds): a
# proposal that is due within this is given up on then rather than rearming for the remainder.
DEADLINE_SLACK_MS = 1

_NO_LEADER = (
    FAIL_REASON.QUEUE_FULL,
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.REQUEST_DENIED,
)
_FAIL_NAMES = {
    FAIL_REASON.QUEUE_FULL: "queue full",
    FAIL_REASON.MISSING_LEADER: "no leader",
    FAIL_REASON.DISCARDED: "discarded by a new leader",
    FAIL_REASON.NOT_LEADER: "not leader",
    FAIL_REASON.LEADER_CHANGED: "leader changed",
    FAIL_REASON.REQUEST_DENIED: "request denied",
}

Outcome = tuple[Any, int]  # what pysyncobj calls back with: (result, FAIL_REASON)
Append = Callable[[bytes, Callable[[Any, int], None]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCommitLimits:
    """The bounds of one node's group commit. entries_max = 1 turns batching off."""

    entries_max: int = GROUP_COMMIT_ENTRIES_MAX_DEFAULT
    bytes_max: int = GROUP_COMMIT_BYTES_MAX_DEFAULT
    in_flight_max: int = GROUP_COMMIT_IN_FLIGHT_MAX_DEFAULT
    queued_max: int = PROPOSALS_QUEUED_MAX_DEFAULT
    queued_bytes_max: int = PROPOSALS_QUEUED_BYTES_MAX_DEFAULT


@dataclass(slots=True)
class GroupCommitStats:
    entries: int = 0  # log entries proposed (a batch or a lone proposal)
    proposals: int = 0  # proposals they carried
    queue_full: int = 0  # proposals refused because the queue was at its bound


class _Proposal:
    __slots__ = ("entry", "fut")

    def __init__(self, entry: bytes, fut: asyncio.Future[Outcome]) -> None:
        self.entry = entry
        self.fut = fut


class _Slot:
    """One batch in flight; released once, by its callback or by its safety timer."""

    __slots__ = ("released", "timer")

    def __init__(self) -> None:
        self.released = False
        self.timer: asyncio.TimerHandle | None = None


class Deadlines:
    """When each waiting proposal gives up (`TimeoutError` set on its future): one timer, for
    the earliest deadline, rather than `asyncio.wait_for` per proposal, which costs a timer,
    a second future and one more event-loop pass per write (docs/benchmarks.md). Event loop
    thread only."""

    __slots__ = ("_clock", "_heap", "_prune_at", "_seq", "_timer", "_timer_at_ms")

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock  # deadlines are its readings; the loop's timer only wakes us
        self._heap: list[tuple[int, int, asyncio.Future[Any]]] = []
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms: float = math.inf
        self._prune_at = DEADLINES_PRUNE_MIN

    def __len__(self) -> int:
        return len(self._heap)

    def add(
        self, loop: asyncio.AbstractEventLoop, timeout_s: float, fut: asyncio.Future[Any]
    ) -> None:
        now_ms = self._clock.monotonic_ms()
        deadline_ms = now_ms + round(timeout_s * 1000)
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, fut))
        if len(self._heap) > self._prune_at:
            self._heap = [item for item in self._heap if not item[2].done()]
            heapq.heapify(self._heap)
            self._prune_at = max(DEADLINES_PRUNE_MIN, 2 * len(self._heap))
        if deadline_ms < self._timer_at_ms:
            self._arm(loop, deadline_ms, now_ms)

    def _arm(self, loop: asyncio.AbstractEventLoop, at_ms: int, now_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later((at_ms - now_ms) / 1000, self._expire, loop)
        self._timer_at_ms = at_ms

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer, self._timer_at_ms = None, math.inf
        now_ms = self._clock.monotonic_ms()
        heap, due_ms = self._heap, now_ms + DEADLINE_SLACK_MS
        while heap and (heap[0][0] <= due_ms or heap[0][2].done()):
            fut = heapq.heappop(heap)[2]
            if not fut.done():
                fut.set_exception(TimeoutError())
        if heap:
            self._arm(loop, heap[0][0], now_ms)


class GroupCommit:
    """One node's proposals on their way into the log.

    `append(payload, callback)` hands one log entry to pysyncobj, which calls `callback(result,
    err)` inside a tick once it is applied here or failed; `on_loop()` says whether that tick
    runs on the event loop's thread; `sent()` runs after a pass that appended anything (the
    log ticks then, so the entry leaves in this pass of the loop)."""

    __slots__ = (
        "_append",
        "_deadlines",
        "_in_flight",
        "_limits",
        "_on_loop",
        "_queue",
        "_queued_bytes",
        "_sent",
        "_stats",
    )

    def __init__(
        self,
        limits: GroupCommitLimits,
        *,
        append: Append,
        on_loop: Callable[[], bool],
        sent: Callable[[], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._limits = limits
        self._append = append
        self._on_loop = on_loop
        self._sent = sent
        self._queue: deque[_Proposal] = deque()
        self._queued_bytes = 0
        self._deadlines = Deadlines(clock)
        self._in_flight = 0
        self._stats = GroupCommitStats()

    @property
    def in_flight(self) -> int:
        """Batches appended and not yet settled."""
        return self._in_flight

    def stats(self) -> GroupCommitStats:
        """Log entries sent by this node's proposals and proposals they carried (so far)."""
        return self._stats

    async def propose(self, entry: bytes, timeout_s: float) -> bytes:
        """Queue `entry`, wait for its own outcome, return the machine's result. Raises
        QueueFullError (not queued), NoLeaderError (not appended) or OutcomeUnknownError
        (may commit: timed out, leader changed, discarded)."""
        loop = asyncio.get_running_loop()
        limits = self._limits
        if (
            len(self._queue) >= limits.queued_max
            or self._queued_bytes + len(entry) > limits.queued_bytes_max
        ):
            self._stats.queue_full += 1
            raise QueueFullError("proposal queue full")
        fut: asyncio.Future[Outcome] = loop.create_future()
        self._queue.append(_Proposal(entry, fut))
        self._queued_bytes += len(entry)
        self._deadlines.add(loop, timeout_s, fut)
        self._flush()
        try:
            result, err = await fut
        except TimeoutError as exc:
            raise OutcomeUnknownError(f"no commit within {timeout_s} s") from exc
        if err == FAIL_REASON.SUCCESS:
            if not isinstance(result, bytes):
                raise OutcomeUnknownError("machine returned no result")  # pragma: no cover
            return result
        if err in _NO_LEADER:
            raise NoLeaderError(_FAIL_NAMES.get(err, str(err)))
        raise OutcomeUnknownError(_FAIL_NAMES.get(err, str(err)))

    def _flush(self) -> None:
        """Send what is queued, one batch per free in-flight slot (event loop thread)."""
        limits = self._limits
        loop = asyncio.get_running_loop()
        sent = False
        while self._queue and self._in_flight < limits.in_flight_max:
            batch: list[_Proposal] = []
            size = 0
            while self._queue and len(batch) < limits.entries_max:
                head = self._queue[0]
                if batch and size + len(head.entry) > limits.bytes_max:
                    break
                self._queue.popleft()
                self._queued_bytes -= len(head.entry)
                if head.fut.done():
                    continue  # its caller timed out: never appended, nothing to wait for
                batch.append(head)
                size += len(head.entry)
            if not batch:
                continue
            payload = batch[0].entry if len(batch) == 1 else encode_batch([p.entry for p in batch])
            self._in_flight += 1
            self._stats.entries += 1
            self._stats.proposals += len(batch)
            slot = _Slot()

            def callback(
                result: Any, err: int, batch: list[_Proposal] = batch, slot: _Slot = slot
            ) -> None:  # in a tick: on the loop or on the guard
                if self._on_loop():
                    self._settle(batch, slot, result, err, release_later=True)
                else:
                    loop.call_soon_threadsafe(self._settle, batch, slot, result, err)

            slot.timer = loop.call_later(SLOT_TIMEOUT_S, self._release_slot, slot)
            self._append(payload, callback)
            sent = True
        if sent:
            self._sent()

    def _release_slot(self, slot: _Slot) -> None:
        if not slot.released:
            slot.released = True
            if slot.timer is not None:
                slot.timer.cancel()
            self._in_flight -= 1
            self._flush()

    def _settle(
        self,
        batch: list[_Proposal],
        slot: _Slot,
        result: Any,
        err: int,
        *,
        release_later: bool = False,
    ) -> None:
        """Hand each proposal of a committed (or failed) entry its own outcome.
        `release_later`: called inside a tick on the loop; the callers learn now, and the
        slot is freed on the next pass of the loop, so the proposals that pass brings wait
        and go out together rather than the first of them alone."""
        outcomes: list[Outcome]
        if err != FAIL_REASON.SUCCESS or len(batch) == 1:
            outcomes = [(result, err)] * len(batch)
        else:
            try:
                results = decode_results(result) if isinstance(result, bytes) else []
            except BatchFormatError:
                results = []
            if len(results) == len(batch):
                outcomes = [(r, err) for r in results]
            else:  # the machine's error value for a malformed batch: everyone learns of it
                outcomes = [(result, err)] * len(batch)
        for proposal, outcome in zip(batch, outcomes, strict=True):
            if not proposal.fut.done():
                proposal.fut.set_result(outcome)
        if release_later:
            asyncio.get_running_loop().call_soon(self._release_slot, slot)
        else:
            self._release_slot(slot)
