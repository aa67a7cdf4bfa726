"""Load-aware placement: which eligible worker should own each partition, by weight.

Owns `plan_weighted`, the placement the leader uses when every partition has a fresh weight
(its smoothed input rate, coordinator/core/load.py); without one it is
`coordinator/core/placement.py`'s count-balanced `plan_balanced`. A worker's load is the sum
of its partitions' weights. One round:

1. Every partition whose owner is not eligible (or None) is placed, heaviest first, on the
   least-loaded eligible worker (ties: fewer partitions, then worker id).
2. Then, while some worker's load is more than `tolerance` times the mean above it, or that
   far below it, one partition moves from the most loaded worker to the least loaded: the
   one whose weight is nearest half their difference, and only if it is less than the whole
   difference, so every move strictly lowers the sum of squared loads and the loop ends.
   When no single partition fits (the busiest holds only partitions heavier than the
   difference), it swaps one of them for a lighter one of a less loaded worker, on the same
   rule: the two weights differ by less than the two loads do, nearest half of it.
3. A round where a worker joined (an eligible worker owns nothing) or left (a partition has
   no eligible owner) moves at most `moves_lower_bound` partitions in all: never more than
   count balancing would move for the same change.

Invariants: the result is a pure function of its inputs (the order of `eligible` does not
matter); nothing moves while every worker's load is within the tolerance and every owner is
eligible; a join or leave moves at most the count lower bound. Counts are not balanced:
a worker with a hot partition holds fewer partitions.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Sequence

from coordinator.core.placement import moves_lower_bound

__all__ = ["BALANCE_TOLERANCE_DEFAULT", "plan_weighted", "weighted_spread"]

# How far from the mean (a fraction of it) a worker's load may be before partitions move.
BALANCE_TOLERANCE_DEFAULT = 0.1
# Every balancing step strictly lowers the sum of squared loads, so the loop ends; this caps
# it anyway (steps per partition, plus one per worker for those found stuck).
STEPS_PER_PARTITION_MAX = 2
# A worker no single move relieves looks for a swap with this many of the least loaded.
SWAP_PARTNERS_MAX = 32
# A move must leave the pair at least this fraction of their difference better off: a
# partition weighing the whole difference only swaps which of the two is the busier, and
# float rounding must not let two plans trade it back and forth.
GAP_MARGIN = 1e-9


class _Loads:
    """Each worker's load and held (weight, partition) pairs, with lazy min and max heaps."""

    __slots__ = ("held", "hi", "lo", "load")

    def __init__(self, workers: list[str]) -> None:
        self.load = dict.fromkeys(workers, 0.0)
        self.held: dict[str, list[tuple[float, int]]] = {w: [] for w in workers}
        self.lo: list[tuple[float, int, str]] = []
        self.hi: list[tuple[float, int, str]] = []

    def add(self, w: str, weight: float, p: int) -> None:
        insort(self.held[w], (weight, p))
        self.load[w] += weight
        self._push(w)

    def remove(self, w: str, weight: float, p: int) -> None:
        self.held[w].remove((weight, p))
        self.load[w] -= weight
        self._push(w)

    def _push(self, w: str) -> None:
        heapq.heappush(self.lo, (self.load[w], len(self.held[w]), w))
        heapq.heappush(self.hi, (-self.load[w], -len(self.held[w]), w))

    def build(self) -> None:
        for w in self.load:
            self._push(w)

    def _current(self, entry: tuple[float, int, str], sign: int) -> bool:
        load, n, w = entry
        return sign * load == self.load[w] and sign * n == len(self.held[w])

    def lightest(self) -> str:
        while not self._current(self.lo[0], 1):
            heapq.heappop(self.lo)
        return self.lo[0][2]

    def heaviest(self, skip: set[str]) -> str | None:
        """The most loaded worker not in `skip` (entries of skipped workers are set aside
        and put back, so a later call still sees them)."""
        aside = []
        found = None
        while self.hi:
            top = self.hi[0]
            if not self._current(top, -1):
                heapq.heappop(self.hi)
            elif top[2] in skip:
                aside.append(heapq.heappop(self.hi))
            else:
                found = top[2]
                break
        for entry in aside:
            heapq.heappush(self.hi, entry)
        return found


def _pick(held: list[tuple[float, int]], gap: float) -> tuple[float, int] | None:
    """The held partition whose weight is nearest gap / 2 among 0 < weight < gap, or None.
    Held is sorted by (weight, partition): the candidates are the heaviest below gap / 2
    (the highest id of its weight) and the lightest at or above it (the lowest id)."""
    i = bisect_left(held, (gap / 2, -1))
    below = held[i - 1] if i > 0 and held[i - 1][0] > 0.0 else None
    above = held[i] if i < len(held) and held[i][0] < gap * (1 - GAP_MARGIN) else None
    if below is None or above is None:
        return below or above
    return below if gap / 2 - below[0] <= above[0] - gap / 2 else above


def _swap(loads: _Loads, hot: str) -> tuple[tuple[float, int], str, tuple[float, int]] | None:
    """(a partition of `hot`, a less loaded worker, its partition to take back) whose weights
    differ by less than the two loads and nearest half of that; None if no pair does."""
    partners = sorted((w for w in loads.load if w != hot), key=lambda w: (loads.load[w], w))
    best: tuple[float, tuple[float, int], str, tuple[float, int]] | None = None
    for other in partners[:SWAP_PARTNERS_MAX]:
        gap = loads.load[hot] - loads.load[other]
        theirs = loads.held[other]
        if gap <= 0.0 or not theirs:
            continue
        for mine in loads.held[hot]:
            # Want their weight near mine - gap / 2, and strictly between mine - gap and mine.
            i = bisect_left(theirs, (mine[0] - gap / 2, -1))
            for j in (i - 1, i):
                if 0 <= j < len(theirs) and 0.0 < mine[0] - theirs[j][0] < gap * (1 - GAP_MARGIN):
                    miss = abs(mine[0] - theirs[j][0] - gap / 2)
                    if best is None or miss < best[0]:
                        best = (miss, mine, other, theirs[j])
    return None if best is None else best[1:]


def plan_weighted(
    owners: Sequence[str | None],
    eligible: Sequence[str],
    weights: Sequence[float],
    *,
    tolerance: float = BALANCE_TOLERANCE_DEFAULT,
) -> list[str | None]:
    """New owner of every partition, balancing the sum of weights per worker (the module
    docstring gives the rule). `weights[p]` is partition p's weight, finite and >= 0."""
    if len(weights) != len(owners):
        raise ValueError(f"length mismatch: {len(weights)} weights, {len(owners)} partitions")
    if not tolerance >= 0.0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    workers = sorted(set(eligible))
    total = len(owners)
    if not workers:
        return [None] * total
    member = set(workers)
    loads = _Loads(workers)
    homeless: list[int] = []
    for p, owner in enumerate(owners):
        if owner is not None and owner in member:
            loads.held[owner].append((weights[p], p))
            loads.load[owner] += weights[p]
        else:
            homeless.append(p)
    for held in loads.held.values():
        held.sort()
    joined = any(not loads.held[w] for w in workers)
    loads.build()

    result: list[str | None] = list(owners)
    # Heaviest first on the lightest worker: the classic greedy that keeps the worst
    # worker within one partition's weight of the best it could be.
    for p in sorted(homeless, key=lambda p: (-weights[p], p)):
        w = loads.lightest()
        loads.add(w, weights[p], p)
        result[p] = w

    budget = total
    if homeless or joined:
        budget = moves_lower_bound(owners, workers) - sum(1 for p in homeless if owners[p])
    mean = sum(loads.load.values()) / len(workers)
    high, low = mean * (1 + tolerance), mean * (1 - tolerance)
    stuck: set[str] = set()  # workers no move can relieve
    moved: set[int] = set()  # partitions this round takes from an owner
    for _ in range(STEPS_PER_PARTITION_MAX * total + len(workers)):
        if len(moved) >= budget:
            break
        cold = loads.lightest()
        hot = loads.heaviest(stuck)
        if hot is None or hot == cold:
            break
        if loads.load[hot] <= high and loads.load[cold] >= low:
            break
        best = _pick(loads.held[hot], loads.load[hot] - loads.load[cold])
        if best is not None:
            steps = [(best, hot, cold)]
        else:
            swap = _swap(loads, hot) if budget - len(moved) >= 2 else None
            if swap is None:
                stuck.add(hot)
                continue
            mine, other, theirs = swap
            steps = [(mine, hot, other), (theirs, other, hot)]
        for (weight, p), source, target in steps:
            loads.remove(source, weight, p)
            loads.add(target, weight, p)
            result[p] = target
            if owners[p] is not None and owners[p] != target:
                moved.add(p)
            else:
                moved.discard(p)
    return result


def weighted_spread(
    assignment: Sequence[str | None], eligible: Sequence[str], weights: Sequence[float]
) -> float:
    """max / mean of the workers' loads over `eligible` (1.0 when nothing weighs)."""
    loads = dict.fromkeys(sorted(set(eligible)), 0.0)
    for p, owner in enumerate(assignment):
        if owner is not None and owner in loads:
            loads[owner] += weights[p]
    total = sum(loads.values())
    if not loads or total <= 0.0:
        return 1.0
    return max(loads.values()) / (total / len(loads))
