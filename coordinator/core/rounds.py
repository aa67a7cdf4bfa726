"""Checkpoint rounds: when the leader next asks each owning worker for a checkpoint.

Owns the per-worker schedule of checkpoint requests (docs/design.md §4: every interval, per
worker, no cluster-wide barrier): a worker's first round is staggered over one interval, then
it is due every interval; a request that did not get through is asked for in the worker's
next heartbeat reply instead. It is the leader's memory, never replicated.

Invariant: every owning (ACTIVE or DRAINING) worker has a round or waits for its first one
(`fresh`), and a worker that stopped owning has neither. A scan reads only the workers that
are due (a heap by time) and those that started or stopped owning since the last scan
(`ClusterState.owning_changes_since`): reading every worker, or set differences over all of
them, would cost the leader's event loop in proportion to every worker registered, every scan.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.core.backoff import Rng
from coordinator.core.cluster import ClusterState
from coordinator.core.model import OWNING_WORKER_STATES, WorkerId

__all__ = ["CHECKPOINT_SCAN_MS_MAX", "CheckpointRounds"]

CHECKPOINT_SCAN_MS_MAX = 1_000


@dataclass(slots=True)
class CheckpointRounds:
    interval_ms: int
    next_ms: dict[WorkerId, int] = field(default_factory=dict)
    # (next_ms, worker) for every entry of `next_ms`, earliest first; an entry whose time no
    # longer matches `next_ms` is stale and skipped when it comes up.
    due: list[tuple[int, WorkerId]] = field(default_factory=list)
    scan_at_ms: int = 0
    # Workers whose last checkpoint request did not get through: the heartbeat reply asks.
    missed: set[WorkerId] = field(default_factory=set)
    # Owning workers with no round yet (not in `next_ms`): joined since the last scan, or
    # not heard from when their first round was to be staggered.
    fresh: set[WorkerId] = field(default_factory=set)
    # Where the owning set's changes were last read (ClusterState.owning_changes_since).
    cursor: tuple[int, int] | None = None

    def heard(self, worker_id: WorkerId) -> bool:
        """A heartbeat from the worker: True when its reply must ask for a checkpoint."""
        if worker_id in self.missed:
            self.missed.discard(worker_id)
            return True
        return False

    def scan(
        self,
        state: ClusterState,
        now_ms: int,
        rng: Rng,
        paused: Callable[[WorkerId], bool],
    ) -> list[WorkerId]:
        """The workers to ask now, by worker id, each with its next round scheduled. A
        paused worker (not heard from lately) keeps its round for when it is heard again."""
        # At most every CHECKPOINT_SCAN_MS_MAX (or a tenth of the interval): a round is then
        # at most that much late.
        if now_ms < self.scan_at_ms:
            return []
        self.scan_at_ms = now_ms + min(CHECKPOINT_SCAN_MS_MAX, self.interval_ms // 10)
        changed, self.cursor = state.owning_changes_since(self.cursor)
        if changed is None:  # the first scan, or too far behind: the whole owning set
            owning = state.worker_set(*OWNING_WORKER_STATES)
            ended = self.next_ms.keys() - owning
            self.fresh = owning - self.next_ms.keys()
        else:
            # Per changed worker only: a set minus a dict's keys view walks the whole dict.
            # A changed worker may be retired since (gone from the state): it owns nothing.
            owning_now = {
                w
                for w in changed
                if (rec := state.workers.get(w)) is not None and rec.state in OWNING_WORKER_STATES
            }
            ended = changed - owning_now
            self.fresh.update(w for w in owning_now if w not in self.next_ms)
        # DEAD or LEFT: its round ends with it (a re-registration staggers anew), and so does
        # its checkpoint ask, even one whose failed call came back after the round ended.
        for wid in ended:
            self.next_ms.pop(wid, None)
            self.fresh.discard(wid)
        if self.missed:
            self.missed = {wid for wid in self.missed if wid in self.next_ms}
        due: list[WorkerId] = list(self.fresh)  # never staggered yet
        # Refilled below with those still without a round. A new set, because a set never
        # shrinks: one that once held every worker is slow to walk even when empty.
        self.fresh = set()
        while self.due and self.due[0][0] <= now_ms:
            at, wid = heapq.heappop(self.due)
            if self.next_ms.get(wid) == at:
                due.append(wid)
        out: list[WorkerId] = []
        # By worker id: who gets the in-flight cap's last slots, and the order of the
        # staggering draws, do not depend on the heap.
        for wid in sorted(due):
            if paused(wid):
                if wid in self.next_ms:  # still due: looked at again next scan
                    heapq.heappush(self.due, (self.next_ms[wid], wid))
                else:
                    self.fresh.add(wid)
                continue
            if wid not in self.next_ms:
                # Stagger first requests over one interval so workers don't all checkpoint
                # at once (per worker, no cluster-wide barrier).
                self._schedule(wid, now_ms + int(rng.random() * self.interval_ms))
                continue
            self._schedule(wid, now_ms + self.interval_ms)
            out.append(wid)
        return out

    def _schedule(self, worker_id: WorkerId, at_ms: int) -> None:
        self.next_ms[worker_id] = at_ms
        heapq.heappush(self.due, (at_ms, worker_id))
