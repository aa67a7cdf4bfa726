"""A rescale's dry run (`coordinator/service/rescale_preview.py`): its numbers agree with the
partition map's (`feeders_max` with the listed feeders), and it refuses what StartRescale
refuses, with the same code and field."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.model import ROUTING_GENERATIONS_MAX
from coordinator.service.rescale_preview import preview
from shared.errors import RippleError
from shared.http_statuses import status_of
from shared.partition_map import feeders, feeders_max, moved_fraction
from shared.routing import KEY_GROUPS, Routing

COUNTS = st.integers(min_value=1, max_value=300)


@given(COUNTS, COUNTS, st.booleans())
@settings(max_examples=60, deadline=None)
def test_feeders_max_is_the_longest_feeder_list(old_n: int, new_n: int, grouped: bool) -> None:
    old = Routing(generation=1 if grouped else 0, partitions=old_n)
    new = Routing(generation=2, partitions=new_n)
    assert feeders_max(old, new) == max(len(f) for f in feeders(old, new).values())


def test_feeders_max_refuses_what_feeders_refuses() -> None:
    with pytest.raises(ValueError):
        feeders_max(Routing(generation=1, partitions=4), Routing(generation=1, partitions=8))


def test_a_first_rescale_reads_every_checkpoint_and_moves_nearly_every_key() -> None:
    got = preview((128,), 200)
    assert (got.previous, got.partitions, got.generation) == (128, 200, 1)
    # 128 -> 200 from generation 0 (docs/pipeline.md): 99.5 % of keys change partition.
    assert got.moved_fraction == pytest.approx(0.995, abs=5e-4)
    assert got.moved_fraction == float(
        moved_fraction(Routing(generation=0, partitions=128), Routing(generation=1, partitions=200))
    )
    assert got.feeders_max == 128  # 128 divides no group range evenly: all of them
    assert (got.checkpoints_read, got.partitions_built) == (128, 200)


def test_doubling_a_key_group_generation_has_one_feeder_and_moves_half_the_keys() -> None:
    got = preview((8, 100), 200)
    assert got.generation == 2 and got.previous == 100
    assert got.feeders_max == 1
    assert got.moved_fraction == float(
        moved_fraction(Routing(generation=1, partitions=100), Routing(generation=2, partitions=200))
    )
    assert Fraction(got.moved_fraction).limit_denominator(KEY_GROUPS) < 1


def test_a_large_generation_zero_is_counted_without_listing_feeders() -> None:
    got = preview((1_000_000,), KEY_GROUPS)
    # gcd(1e6, 65536) = 64 residue classes of 15 625 old partitions; one group per new one.
    assert got.feeders_max == 15_625
    assert got.checkpoints_read == 1_000_000 and got.partitions_built == KEY_GROUPS


@pytest.mark.parametrize(
    ("routing", "partitions", "code", "status", "field"),
    [
        ((8,), 0, "invalid", 400, "partitions"),
        ((8,), KEY_GROUPS + 1, "invalid", 400, "partitions"),
        ((8,), 8, "same_partition_count", 409, "partitions"),
        ((8, 16), 16, "same_partition_count", 409, "partitions"),
        ((), 4, "not_bootstrapped", 503, None),  # as StartRescale: wait for the bootstrap
        ((8,) * ROUTING_GENERATIONS_MAX, 4, "conflict", 409, None),
    ],
)
def test_refusals_name_the_code_and_field(
    routing: tuple[int, ...], partitions: int, code: str, status: int, field: str | None
) -> None:
    with pytest.raises(RippleError) as err:
        preview(routing, partitions)
    assert (err.value.code, status_of(err.value), err.value.field) == (code, status, field)
