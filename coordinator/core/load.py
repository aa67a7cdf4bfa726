"""Partition load as the leader last heard it: each partition's input rate and lag.

Owns the leader's in-memory book of what owners report in their heartbeats for each
partition (the input rate in records per second, smoothed by the worker, and the lag in
records), and the rule that turns it into placement weights. Load is advisory: it is never
replicated, a new leader starts with an empty book and refills it from heartbeats, and
epochs, fences and gates stay what keeps a partition to one owner (docs/design.md §4).

Invariants: the book holds at most one entry per partition of the routing generation it
follows (`follow`: a rescale's new table numbers other key ranges, so the old reports go),
each stamped with the monotonic time it was reported; `weights` answers only when EVERY
partition has an entry younger than `stale_after_ms`, so a placement round weighs either all
partitions by load or none (the round then balances counts). A new leader balances by
counts only after it has heard every owning worker or listened for one staleness window
(`listening`), so a failover's first plan does not undo a load-aware placement for want of
heartbeats not yet arrived.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from shared.messages.common import RATE_PER_S_MAX as _RATE_PER_S_MAX

__all__ = ["RATE_PER_S_MAX", "LoadBook", "PartitionLoad"]

# The largest input rate one partition may report (declared with the heartbeat's message).
RATE_PER_S_MAX = _RATE_PER_S_MAX


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionLoad:
    rate_per_s: float  # records per second arriving for the partition, smoothed
    lag_records: int | None  # records the owner has not processed yet, when it knows
    reported_ms: int  # monotonic


class LoadBook:
    """Mutable but pure: time comes in as `now_ms`, nothing here reads a clock."""

    __slots__ = ("_generation", "_heard", "_listen_until_ms", "_loads", "stale_after_ms")

    def __init__(self, *, stale_after_ms: int, now_ms: int) -> None:
        if stale_after_ms <= 0:
            raise ValueError(f"stale_after_ms must be > 0, got {stale_after_ms}")
        self.stale_after_ms = stale_after_ms
        self._loads: dict[int, PartitionLoad] = {}
        self._generation = 0  # the routing generation whose partitions `_loads` numbers
        # While listening (a new leader): the workers heard so far. None once it has ended.
        self._heard: set[str] | None = set()
        self._listen_until_ms = now_ms + stale_after_ms

    def follow(self, generation: int) -> None:
        """The routing generation the partitions are numbered in now. A new one (a rescale
        replaced the table) forgets every report: partition p of the old table is another
        key range than p of the new, and its rate would weigh the wrong partition."""
        if generation != self._generation:
            self._generation = generation
            self._loads.clear()

    def record(
        self, partition: int, rate_per_s: float, lag_records: int | None, now_ms: int
    ) -> None:
        """The owner's report of one partition (the caller checked it owns it)."""
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        if not (math.isfinite(rate_per_s) and 0.0 <= rate_per_s <= RATE_PER_S_MAX):
            raise ValueError(f"rate_per_s must be in [0, {RATE_PER_S_MAX:g}], got {rate_per_s}")
        prev = self._loads.get(partition)
        # A late-delivered, older report cannot replace a newer one.
        if prev is None or prev.reported_ms <= now_ms:
            self._loads[partition] = PartitionLoad(
                rate_per_s=rate_per_s, lag_records=lag_records, reported_ms=now_ms
            )

    def of(self, partition: int) -> PartitionLoad | None:
        return self._loads.get(partition)

    def fresh(self, partition: int, now_ms: int) -> bool:
        seen = self._loads.get(partition)
        return seen is not None and now_ms - seen.reported_ms <= self.stale_after_ms

    def weights(self, total_partitions: int, now_ms: int) -> list[float] | None:
        """Every partition's rate, or None when any partition has no fresh report: the
        round then balances counts (one missing weight would skew every comparison)."""
        if total_partitions <= 0 or len(self._loads) < total_partitions:
            return None
        out: list[float] = []
        for p in range(total_partitions):
            seen = self._loads.get(p)
            if seen is None or now_ms - seen.reported_ms > self.stale_after_ms:
                return None
            out.append(seen.rate_per_s)
        return out

    def heard(self, worker_id: str) -> None:
        """A heartbeat or registration from the worker (counted while listening only)."""
        if self._heard is not None:
            self._heard.add(worker_id)

    def listening(self, owning: Iterable[str], now_ms: int) -> bool:
        """True while a new leader has neither heard every owning worker nor listened for
        one staleness window; once False it stays False."""
        if self._heard is None:
            return False
        if now_ms < self._listen_until_ms and not all(w in self._heard for w in owning):
            return True
        self._heard = None
        return False
