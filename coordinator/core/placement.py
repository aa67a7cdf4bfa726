"""Partition placement: which eligible worker should own each partition.

Owns the placement algorithms the leader uses to compute an assignment plan: the default
sticky balanced planner and a consistent-hash ring (mmh3, virtual nodes: docs/design.md §4;
kept as a selectable strategy and as the benchmark baseline).

Invariant kept by `plan_balanced`: the result is a pure function of its inputs (the order of
`eligible` does not matter), per-worker partition counts differ by at most one, and the
number of partitions that change owner equals `moves_lower_bound` -- nothing moves that
perfect balance does not force to move.

What counts as a move: a partition whose owner changes from a worker to anything else.
Placing an unassigned partition (owner None) is not a move; taking a partition away from a
worker that is no longer eligible (dead, draining, left) is.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from enum import Enum

import mmh3

__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "HashRing",
    "NaiveRing",
    "PlacementStrategy",
    "moves",
    "moves_lower_bound",
    "plan",
    "plan_balanced",
    "plan_hash_ring",
    "spread",
]

DEFAULT_VIRTUAL_NODES = 128

GroupOf = Callable[[int], int]


def _single_group(partition: int) -> int:
    return 0


def _quotas(counts: dict[str, int], workers: list[str], total: int) -> dict[str, int]:
    """Target count per worker: the ceil slots go to the workers already holding the most.

    Giving the `total % n` larger quotas to the fullest workers minimises the sum of
    `max(0, count - quota)`, i.e. the partitions that must leave their worker.
    """
    floor, ceil_slots = divmod(total, len(workers))
    by_load = sorted(workers, key=lambda w: (-counts[w], w))
    return {w: floor + (1 if i < ceil_slots else 0) for i, w in enumerate(by_load)}


def _eligible_set(eligible: Iterable[str]) -> list[str]:
    # Sorting is what makes every plan independent of the caller's ordering.
    return sorted(set(eligible))


def moves(before: Sequence[str | None], after: Sequence[str | None]) -> int:
    """Partitions whose owner changes away from a worker (None -> worker is not a move)."""
    if len(before) != len(after):
        raise ValueError(f"length mismatch: {len(before)} != {len(after)}")
    return sum(1 for b, a in zip(before, after, strict=True) if b is not None and b != a)


def moves_lower_bound(owners: Sequence[str | None], eligible: Sequence[str]) -> int:
    """Fewest moves any perfectly balanced assignment over `eligible` can need.

    Every partition held by a non-eligible worker must move; each eligible worker must shed
    whatever it holds above its quota (with the ceil quotas given to the fullest workers).
    Unassigned partitions are placed, not moved, so they add nothing.
    """
    workers = _eligible_set(eligible)
    if not workers:
        return sum(1 for o in owners if o is not None)
    member = set(workers)
    counts = dict.fromkeys(workers, 0)
    stranded = 0
    for owner in owners:
        if owner is None:
            continue
        if owner in member:
            counts[owner] += 1
        else:
            stranded += 1
    quota = _quotas(counts, workers, len(owners))
    return stranded + sum(max(0, counts[w] - quota[w]) for w in workers)


def _evict(held: list[int], excess: int, group_of: GroupOf, fair: dict[int, int]) -> list[int]:
    """Pick `excess` partitions of one worker to move away.

    Most over-represented group first (how far its count on this worker exceeds its fair
    share), so shedding also spreads groups; then the highest partition id, so the choice is
    deterministic and low ids stay put.
    """
    by_group: dict[int, list[int]] = defaultdict(list)
    for p in sorted(held):
        by_group[group_of(p)].append(p)
    heap = [(-(len(ps) - fair[g]), -ps[-1], g) for g, ps in by_group.items()]
    heapq.heapify(heap)
    out: list[int] = []
    for _ in range(excess):
        _, _, g = heapq.heappop(heap)
        ps = by_group[g]
        out.append(ps.pop())
        if ps:
            heapq.heappush(heap, (-(len(ps) - fair[g]), -ps[-1], g))
    return out


def plan_balanced(
    owners: Sequence[str | None],
    eligible: Sequence[str],
    group_of: GroupOf | None = None,
) -> list[str | None]:
    """New owner of every partition: balanced, sticky, deterministic, groups spread.

    `owners[p]` is partition p's current owner; any owner not in `eligible` (or None) is
    treated as needing a new home. Receivers are chosen by fewest partitions of the same
    group, then fewest partitions in total, then worker id.

    Runs in O(P log W): each worker's quota is fixed up front, so only the excess and the
    homeless partitions are touched, and receivers come from heaps rather than scans.
    """
    workers = _eligible_set(eligible)
    total = len(owners)
    if not workers:
        return [None] * total
    groups: GroupOf = group_of if group_of is not None else _single_group
    member = set(workers)

    held: dict[str, list[int]] = {w: [] for w in workers}
    homeless: list[int] = []
    for p, owner in enumerate(owners):
        if owner is not None and owner in member:
            held[owner].append(p)
        else:
            homeless.append(p)
    counts = {w: len(ps) for w, ps in held.items()}
    quota = _quotas(counts, workers, total)

    group_size = Counter(groups(p) for p in range(total))
    n = len(workers)
    fair = {g: -(-size // n) for g, size in group_size.items()}

    result: list[str | None] = list(owners)
    to_place = homeless  # every partition here gets a new owner below
    for w in workers:
        excess = counts[w] - quota[w]
        if excess > 0:
            leaving = _evict(held[w], excess, groups, fair)
            gone = set(leaving)
            held[w] = [p for p in held[w] if p not in gone]
            to_place.extend(leaving)
            counts[w] = quota[w]

    # Per-group view of what stays put, so a group's receivers can be ranked by how many
    # of its partitions they already hold without scanning every worker.
    pending: dict[int, list[int]] = defaultdict(list)
    for p in to_place:
        pending[groups(p)].append(p)
    holders: dict[int, Counter[str]] = {g: Counter() for g in pending}
    for w in workers:
        for p in held[w]:  # `_evict` has already taken the leavers out of `held[w]`
            g = groups(p)
            if g in holders:
                holders[g][w] += 1

    # Global heap of under-quota workers by (total, id). Entries go stale when a worker's
    # count changes; a stale entry is recognised by its count and skipped.
    room: list[tuple[int, str]] = [(counts[w], w) for w in workers if counts[w] < quota[w]]
    heapq.heapify(room)

    # Largest groups first: they are the hardest to spread, so they get the widest choice.
    for g in sorted(pending, key=lambda g: (-len(pending[g]), g)):
        have = holders[g]
        # Holders of this group compete on (group count, total, id); non-holders all have
        # group count 0 and are ranked by the global heap alone.
        mine = [(c, counts[w], w) for w, c in have.items() if counts[w] < quota[w]]
        heapq.heapify(mine)
        for p in sorted(pending[g]):
            while room and (
                room[0][0] != counts[room[0][1]]
                or counts[room[0][1]] >= quota[room[0][1]]
                or room[0][1] in have
            ):
                # Holders dropped here are pushed back after this group.
                heapq.heappop(room)
            while mine and (
                mine[0][1] != counts[mine[0][2]] or counts[mine[0][2]] >= quota[mine[0][2]]
            ):
                heapq.heappop(mine)
            if room and (not mine or (0, room[0][0], room[0][1]) < mine[0]):
                _, w = heapq.heappop(room)
            else:
                _, _, w = heapq.heappop(mine)
            result[p] = w
            counts[w] += 1
            have[w] += 1
            if counts[w] < quota[w]:
                heapq.heappush(mine, (have[w], counts[w], w))
        for w in have:
            if counts[w] < quota[w]:
                heapq.heappush(room, (counts[w], w))
    return result


def _hash(key: str) -> int:
    return int(mmh3.hash(key, signed=False))


class HashRing:
    """The consistent-hash ring with an O(log n) clockwise lookup.

    Vnodes are kept sorted by (hash, worker): the worker breaks hash collisions so the ring
    is the same whatever order workers were added in. Lookups bisect a plain list of hashes.
    """

    __slots__ = ("_hashes", "_members", "_workers", "virtual_nodes")

    def __init__(
        self, workers: Iterable[str] = (), *, virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    ) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self._hashes: list[int] = []
        self._workers: list[str] = []
        self._members: set[str] = set()
        self.extend(workers)

    @property
    def workers(self) -> frozenset[str]:
        return frozenset(self._members)

    def _vnodes(self, worker: str) -> list[tuple[int, str]]:
        return [(_hash(f"{worker}-vnode-{i}"), worker) for i in range(self.virtual_nodes)]

    def extend(self, workers: Iterable[str]) -> None:
        """Add many workers with one sort (adding 1,000 one by one would sort 1,000 times)."""
        fresh = sorted(set(workers) - self._members)
        if not fresh:
            return
        nodes = [n for w in fresh for n in self._vnodes(w)]
        merged = sorted([*zip(self._hashes, self._workers, strict=True), *nodes])
        self._hashes = [h for h, _ in merged]
        self._workers = [w for _, w in merged]
        self._members.update(fresh)

    def add(self, worker: str) -> None:
        self.extend((worker,))

    def remove(self, worker: str) -> None:
        if worker not in self._members:
            return
        kept = [(h, w) for h, w in zip(self._hashes, self._workers, strict=True) if w != worker]
        self._hashes = [h for h, _ in kept]
        self._workers = [w for _, w in kept]
        self._members.discard(worker)

    def owner(self, partition: int) -> str | None:
        if not self._hashes:
            return None
        i = bisect_left(self._hashes, _hash(f"partition-{partition}"))
        # Past the last vnode the lookup wraps clockwise to the first one.
        return self._workers[i if i < len(self._hashes) else 0]

    def __len__(self) -> int:
        return len(self._hashes)


class NaiveRing:
    """The same ring as a sorted list scanned linearly. Benchmark baseline only."""

    __slots__ = ("ring", "virtual_nodes")

    def __init__(self, virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        self.virtual_nodes = virtual_nodes
        self.ring: list[tuple[int, str]] = []

    def add(self, worker: str) -> None:
        new_nodes = [(_hash(f"{worker}-vnode-{i}"), worker) for i in range(self.virtual_nodes)]
        self.ring = sorted(self.ring + new_nodes)

    def remove(self, worker: str) -> None:
        self.ring = [(h, w) for h, w in self.ring if w != worker]

    def owner(self, partition: int) -> str | None:
        h = _hash(f"partition-{partition}")
        for vh, w in self.ring:
            if vh >= h:
                return w
        return self.ring[0][1] if self.ring else None


def plan_hash_ring(
    total_partitions: int, eligible: Sequence[str], virtual_nodes: int = DEFAULT_VIRTUAL_NODES
) -> list[str | None]:
    ring = HashRing(eligible, virtual_nodes=virtual_nodes)
    return [ring.owner(p) for p in range(total_partitions)]


def spread(assignment: Sequence[str | None], eligible: Sequence[str]) -> tuple[int, float]:
    """(max - min, max / mean) of partition counts over the eligible workers.

    Workers with no partitions count as zero. With no eligible workers or nothing assigned
    the answer is (0, 1.0): nothing is uneven.
    """
    workers = _eligible_set(eligible)
    counts = dict.fromkeys(workers, 0)
    for owner in assignment:
        if owner is not None and owner in counts:
            counts[owner] += 1
    assigned = sum(counts.values())
    if not workers or assigned == 0:
        return (0, 1.0)
    hi, lo = max(counts.values()), min(counts.values())
    return (hi - lo, hi / (assigned / len(workers)))


class PlacementStrategy(Enum):
    BALANCED = "balanced"
    HASH_RING = "hash_ring"


def plan(
    strategy: PlacementStrategy,
    owners: Sequence[str | None],
    eligible: Sequence[str],
    *,
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
    group_of: GroupOf | None = None,
) -> list[str | None]:
    """Dispatch to a strategy. HASH_RING ignores current owners: the ring alone decides."""
    if strategy is PlacementStrategy.BALANCED:
        return plan_balanced(owners, eligible, group_of)
    if strategy is PlacementStrategy.HASH_RING:
        return plan_hash_ring(len(owners), eligible, virtual_nodes)
    raise ValueError(f"unknown placement strategy: {strategy!r}")
