"""Whether this node's disk is too slow to lead: the verdict on its journal syncs' times.

Owns `SlowDisk`: the last SLOW_SYNC_WINDOW journal syncs' durations and the verdict drawn
from them. A leader syncs its journal in every tick and every write and heartbeat of the
cluster waits on those syncs, so a leader whose median sync of the window exceeds
`leader_sync_slow_ms` hands its leadership to an up-to-date follower
(`replication.log`), as etcd steps down a leader whose disk cannot keep up. Invariants:

- Memory is bounded: SLOW_SYNC_WINDOW durations, nothing else per sync.
- The median, not the mean or the worst: one slow sync (a page cache flush, a snapshot)
  does not move the leadership; a run of them (over half the window) does.
- A node found slow does not stand for leader (`may_stand`) until its syncs have been under
  the bound for `leader_sync_cooldown_s`: as a follower it keeps syncing what the leader
  sends, and each slow verdict then pushes the end of the cooldown out again.

Pure: times come in as arguments (the clock's milliseconds, a sync's seconds).
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["SLOW_SYNC_WINDOW", "SlowDisk"]

# Syncs the verdict is drawn from: three keeps detection quick (two slow syncs of a run,
# about 4 s at 2 s a sync) while one outlier cannot decide it.
SLOW_SYNC_WINDOW = 3


class SlowDisk:
    """The verdict on the last SLOW_SYNC_WINDOW journal syncs. `bound_ms` 0 turns it off.
    Fed under the node's Raft lock; read from any thread (a reader may see one sync late)."""

    __slots__ = ("_bound_s", "_cooldown_ms", "_slow_at_ms", "_step_downs", "_times")

    def __init__(self, *, bound_ms: int, cooldown_s: float) -> None:
        self._bound_s = bound_ms / 1000
        self._cooldown_ms = int(cooldown_s * 1000)
        self._times: deque[float] = deque(maxlen=SLOW_SYNC_WINDOW)
        self._slow_at_ms: int | None = None  # the last slow verdict
        self._step_downs = 0

    def synced(self, seconds: float, now_ms: int) -> None:
        """One journal sync took `seconds`, ending at `now_ms`."""
        if self._bound_s <= 0:
            return
        self._times.append(seconds)
        if self.slow:
            self._slow_at_ms = now_ms

    @property
    def slow(self) -> bool:
        """The median of a full window is over the bound."""
        times = self._times
        return len(times) == times.maxlen and statistics.median(times) > self._bound_s

    @property
    def median_ms(self) -> int:
        """The window's median sync, for logs (0 before any sync)."""
        return round(statistics.median(self._times) * 1000) if self._times else 0

    def may_stand(self, now_ms: int) -> bool:
        """False while slow, and for the cooldown after the last slow verdict."""
        at = self._slow_at_ms
        return at is None or (not self.slow and now_ms - at >= self._cooldown_ms)

    def stepped_down(self) -> None:
        """The leader handed its leadership over for this disk."""
        self._step_downs += 1

    @property
    def step_downs(self) -> int:
        """Leaderships handed over for a slow disk (so far)."""
        return self._step_downs
