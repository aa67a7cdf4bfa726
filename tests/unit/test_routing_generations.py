"""Routing generations and the old -> new partition map of a rescale (shared/)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import partition_map
from shared.partition_map import HASHES, feeders, moved_fraction
from shared.routing import (
    KEY_GROUPS,
    Routing,
    key_group,
    key_hash,
    partition_for_key,
    partition_of_group,
)

KEYS = [f"SYM{i:05d}" for i in range(3000)]
COUNTS = st.integers(min_value=1, max_value=300)
GROUP_COUNTS = st.integers(min_value=1, max_value=KEY_GROUPS)


def test_generation_zero_is_the_existing_modulo_routing() -> None:
    for total in (1, 7, 128, 200):
        gen0 = Routing(generation=0, partitions=total)
        assert [gen0.partition_for(k) for k in KEYS] == [partition_for_key(k, total) for k in KEYS]


def test_key_group_generations_route_by_contiguous_group_ranges() -> None:
    # Pinned: every caller (producer, SDK, worker) must compute these same numbers.
    assert key_hash("SYM0042") == key_hash("SYM0042") < 2**32
    assert key_group("") == 0 and Routing(generation=3, partitions=200).partition_for("") == 0
    for total in (1, 3, 200, KEY_GROUPS):
        routing = Routing(generation=1, partitions=total)
        for k in KEYS[:300]:
            p = routing.partition_for(k)
            assert 0 <= p < total and key_group(k) in routing.groups(p)


@given(GROUP_COUNTS)
@settings(max_examples=200, deadline=None)
def test_group_ranges_tile_the_groups_evenly(total: int) -> None:
    routing = Routing(generation=1, partitions=total)
    probe = sorted({0, 1, total // 2, total - 1} & set(range(total)))
    for p in probe:
        groups = routing.groups(p)
        assert len(groups) in (KEY_GROUPS // total, -(-KEY_GROUPS // total))
        assert partition_of_group(groups.start, total) == p
        assert partition_of_group(groups.stop - 1, total) == p
        if p + 1 < total:
            assert routing.groups(p + 1).start == groups.stop  # no gap, no overlap
    assert routing.groups(0).start == 0 and routing.groups(total - 1).stop == KEY_GROUPS


def test_bad_generations_are_refused() -> None:
    with pytest.raises(ValueError):
        Routing(generation=-1, partitions=4)
    with pytest.raises(ValueError):
        Routing(generation=1, partitions=0)
    with pytest.raises(ValueError):
        Routing(generation=1, partitions=KEY_GROUPS + 1)
    Routing(generation=0, partitions=KEY_GROUPS + 1)  # generation 0 keeps its own bound
    with pytest.raises(ValueError):
        Routing(generation=0, partitions=8).groups(0)
    with pytest.raises(ValueError):
        feeders(Routing(generation=1, partitions=4), Routing(generation=1, partitions=8))


@given(COUNTS, COUNTS, st.booleans())
@settings(max_examples=60, deadline=None)
def test_every_key_s_old_partition_feeds_its_new_one(old_n: int, new_n: int, grouped: bool) -> None:
    old = Routing(generation=1 if grouped else 0, partitions=old_n)
    new = Routing(generation=2, partitions=new_n)
    fed = feeders(old, new)
    assert sorted(fed) == list(range(new_n))
    for k in KEYS:
        assert old.partition_for(k) in fed[new.partition_for(k)]
    if grouped:
        # Exactly the old ranges that meet the new range: few, contiguous, and each shares
        # a group with the new partition.
        for q, olds in fed.items():
            assert olds == tuple(range(olds[0], olds[-1] + 1))
            assert len(olds) <= -(-old_n // new_n) + 1
            for p in olds:
                assert set(old.groups(p)) & set(new.groups(q))


def test_feeders_from_generation_zero() -> None:
    # 8 divides KEY_GROUPS: a group's keys all sit in old partition group mod 8, and a new
    # partition of one group range is fed by exactly the residues its groups cover.
    fed = feeders(Routing(generation=0, partitions=8), Routing(generation=1, partitions=16_384))
    assert fed[0] == (0, 1, 2, 3) and fed[1] == (4, 5, 6, 7)
    # 7 does not: every new partition is fed by every old one.
    fed = feeders(Routing(generation=0, partitions=7), Routing(generation=1, partitions=5))
    assert all(olds == tuple(range(7)) for olds in fed.values())


@given(st.integers(min_value=0, max_value=KEY_GROUPS - 1), COUNTS, COUNTS)
@settings(max_examples=30, deadline=None)
def test_hashes_staying_in_a_group_counts_exactly(group: int, old_n: int, new_q: int) -> None:
    new_q %= old_n + 1  # also past the old count, where nothing stays
    brute = sum(1 for t in range(HASHES // KEY_GROUPS) if (group + KEY_GROUPS * t) % old_n == new_q)
    assert partition_map._hashes_staying(group, old_n, new_q) == brute


def test_moved_fraction_between_key_group_generations_counts_groups() -> None:
    def by_groups(old_n: int, new_n: int) -> Fraction:
        moved = sum(
            1
            for g in range(KEY_GROUPS)
            if partition_of_group(g, old_n) != partition_of_group(g, new_n)
        )
        return Fraction(moved, KEY_GROUPS)

    for old_n, new_n in ((128, 200), (200, 64), (4, 3), (5, 5), (1, 2)):
        got = moved_fraction(
            Routing(generation=1, partitions=old_n), Routing(generation=2, partitions=new_n)
        )
        assert got == by_groups(old_n, new_n)
    same = moved_fraction(Routing(generation=1, partitions=9), Routing(generation=2, partitions=9))
    assert same == 0


@pytest.mark.parametrize(("old_n", "new_n"), [(128, 200), (4, 3), (8, 8), (7, 64)])
def test_moved_fraction_from_generation_zero_matches_the_keys(old_n: int, new_n: int) -> None:
    old, new = Routing(generation=0, partitions=old_n), Routing(generation=1, partitions=new_n)
    exact = moved_fraction(old, new)
    observed = sum(old.partition_for(k) != new.partition_for(k) for k in KEYS) / len(KEYS)
    # 3000 keys: a binomial share within 0.04 of its mean is over 4 standard deviations wide.
    assert abs(float(exact) - observed) < 0.04
