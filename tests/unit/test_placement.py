"""Placement: balance, minimal moves, determinism and group spread under churn."""

from __future__ import annotations

import bisect
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import placement
from coordinator.core.placement import (
    HashRing,
    NaiveRing,
    PlacementStrategy,
    moves,
    moves_lower_bound,
    plan,
    plan_balanced,
    plan_hash_ring,
    spread,
)

POOL = [f"w{i:02d}" for i in range(20)]


def check_plan(
    before: list[str | None], eligible: list[str], groups: int, seed: int
) -> list[str | None]:
    """Apply plan_balanced and assert every property the design promises."""
    group_of = (lambda p: p % groups) if groups > 1 else None
    after = plan_balanced(before, eligible, group_of)
    assert len(after) == len(before)
    if not eligible:
        assert after == [None] * len(before)
        return after
    assert all(o in eligible for o in after)
    max_min, _ = spread(after, eligible)
    assert max_min <= 1
    assert moves(before, after) == moves_lower_bound(before, eligible)
    shuffled = list(eligible)
    random.Random(seed).shuffle(shuffled)
    assert plan_balanced(before, shuffled, group_of) == after
    return after


def assert_groups_spread(after: list[str | None], n_workers: int, groups: int) -> None:
    per_group: dict[int, Counter[str | None]] = {}
    for p, owner in enumerate(after):
        per_group.setdefault(p % groups, Counter())[owner] += 1
    for g, owners in per_group.items():
        size = sum(owners.values())
        fair = -(-size // n_workers)
        # Distinct workers whenever the group fits; never more than its fair share otherwise.
        assert max(owners.values()) <= fair, (g, owners)


events = st.lists(
    st.tuples(st.sampled_from(["join", "leave", "death"]), st.integers(0, len(POOL) - 1)),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(1, 200),
    n_workers=st.integers(1, 12),
    groups=st.integers(1, 8),
    history=events,
    seed=st.integers(0, 2**32 - 1),
)
def test_churn_keeps_balance_minimal_moves_and_determinism(
    total: int, n_workers: int, groups: int, history: list[tuple[str, int]], seed: int
) -> None:
    eligible = POOL[:n_workers]
    owners = check_plan([None] * total, eligible, groups, seed)
    assert_groups_spread(owners, n_workers, groups)
    for kind, i in history:
        if kind == "join":
            if POOL[i] not in eligible:
                eligible = [*eligible, POOL[i]]
        elif eligible:
            # A leave (drain) and a death look the same to the planner: the worker is no
            # longer eligible but still named as owner until the plan moves its partitions.
            eligible = [w for w in eligible if w != eligible[i % len(eligible)]]
        owners = check_plan(owners, eligible, groups, seed)


@settings(max_examples=300, deadline=None)
@given(
    owners=st.lists(st.one_of(st.none(), st.sampled_from(POOL)), min_size=1, max_size=200),
    eligible=st.lists(st.sampled_from(POOL), min_size=1, max_size=12, unique=True),
    groups=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_arbitrary_start_reaches_lower_bound(
    owners: list[str | None], eligible: list[str], groups: int, seed: int
) -> None:
    after = check_plan(owners, eligible, groups, seed)
    # A balanced plan is a fixed point: planning again moves nothing.
    assert plan_balanced(after, eligible, lambda p: p % groups) == after


def test_join_and_leave_move_exactly_a_quarter() -> None:
    three = ["w0", "w1", "w2"]
    four = [*three, "w3"]
    start = plan_balanced([None] * 128, three)
    grown = plan_balanced(start, four)
    assert moves(start, grown) == 32
    assert Counter(grown)["w3"] == 32
    shrunk = plan_balanced(grown, three)
    assert moves(grown, shrunk) == 32
    assert spread(shrunk, three)[0] <= 1


def test_only_the_dead_workers_partitions_move() -> None:
    workers = ["a", "b", "c", "d"]
    start = plan_balanced([None] * 12, workers)
    after = plan_balanced(start, ["a", "b", "c"])
    changed = {p for p, (x, y) in enumerate(zip(start, after, strict=True)) if x != y}
    assert changed == {p for p, o in enumerate(start) if o == "d"}


def test_unassigned_partitions_are_placed_not_moved() -> None:
    before: list[str | None] = [None] * 10
    after = plan_balanced(before, ["a", "b"])
    assert moves(before, after) == 0 == moves_lower_bound(before, ["a", "b"])
    assert Counter(after) == {"a": 5, "b": 5}


def test_no_eligible_workers_unassigns_everything() -> None:
    before: list[str | None] = ["a", None, "b"]
    assert plan_balanced(before, []) == [None, None, None]
    assert moves_lower_bound(before, []) == 2


def test_ceil_quota_goes_to_the_fuller_worker() -> None:
    # 5 partitions, 2 workers: b already holds 3, so b keeps 3 and nothing moves.
    before: list[str | None] = ["a", "a", "b", "b", "b"]
    assert plan_balanced(before, ["a", "b"]) == before
    assert moves_lower_bound(before, ["a", "b"]) == 0


def test_evicts_over_represented_group_first() -> None:
    # a holds 4 partitions, two of them in group 0; b holds none. a must shed 2: one of
    # group 0 (over-represented on a), then the highest id -- so group 0 ends up split.
    before: list[str | None] = ["a", "a", "a", "a"]
    after = plan_balanced(before, ["a", "b"], lambda p: 0 if p in (0, 1) else p)
    assert [p for p, o in enumerate(after) if o == "a"] == [0, 2]


def test_hash_ring_strategy_ignores_current_owners() -> None:
    owners: list[str | None] = ["x"] * 50
    assert plan(PlacementStrategy.HASH_RING, owners, ["a", "b"]) == plan_hash_ring(50, ["b", "a"])
    assert plan(PlacementStrategy.BALANCED, owners, ["a", "b"]) == plan_balanced(owners, ["a", "b"])


def test_ring_matches_naive_ring() -> None:
    ring = HashRing(virtual_nodes=16)
    naive = NaiveRing(virtual_nodes=16)
    for w in ["w0", "w1", "w2", "w3"]:
        ring.add(w)
        naive.add(w)
    ring.remove("w2")
    naive.remove("w2")
    assert all(ring.owner(p) == naive.owner(p) for p in range(2000))
    assert len(ring) == 3 * 16


def test_ring_is_independent_of_add_order() -> None:
    a = HashRing(["w0", "w1", "w2"])
    b = HashRing()
    for w in ["w2", "w0", "w1"]:
        b.add(w)
    assert [a.owner(p) for p in range(500)] == [b.owner(p) for p in range(500)]


def test_ring_lookup_wraps_and_uses_bisect(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = HashRing(["w0", "w1"], virtual_nodes=4)
    calls: list[int] = []
    real = bisect.bisect_left

    def counting(a: list[int], x: int) -> int:
        calls.append(x)
        return real(a, x)

    monkeypatch.setattr(placement, "bisect_left", counting)
    owner = ring.owner(7)
    assert calls and owner in {"w0", "w1"}
    # A hash above every vnode wraps to the first vnode's worker.
    monkeypatch.setattr(placement, "_hash", lambda key: 2**32 if key.startswith("p") else 0)
    wrapped = HashRing(["w0"], virtual_nodes=2)
    assert wrapped.owner(1) == "w0"
    assert HashRing().owner(0) is None
    assert NaiveRing().owner(0) is None


def test_ring_join_moves_roughly_a_quarter() -> None:
    before = plan_hash_ring(128, ["w0", "w1", "w2"])
    after = plan_hash_ring(128, ["w0", "w1", "w2", "w3"])
    moved = moves(before, after)
    # Consistent hashing: only partitions taken by the new worker move.
    assert moved == Counter(after)["w3"]
    assert 10 <= moved <= 60


def test_spread_reports_gap_and_peak_over_mean() -> None:
    assert spread(["a", "a", "a", "b"], ["a", "b", "c"]) == (3, 3 / (4 / 3))
    assert spread([None], ["a"]) == (0, 1.0)
    assert spread([], []) == (0, 1.0)


def test_moves_rejects_length_mismatch() -> None:
    with pytest.raises(ValueError):
        moves(["a"], [])
