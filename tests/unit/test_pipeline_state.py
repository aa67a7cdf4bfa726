"""Per-key state: merging split batches equals aggregating everything; the key limit."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.state import (
    KeyState,
    aggregate_records,
    merge,
    merge_batch,
    merge_states,
)

KEYS = st.sampled_from([f"SYM{i:04d}" for i in range(12)])
# Multiples of 1/64: exact in binary, so sums do not depend on the order of addition.
VALUES = st.integers(min_value=-64_000, max_value=64_000).map(lambda t: t / 64)
RECORDS = st.lists(st.tuples(KEYS, VALUES), max_size=80)
CUTS = st.lists(st.integers(min_value=0, max_value=80), max_size=6)


def with_offsets(records: list[tuple[str, float]]) -> list[tuple[str, float, int]]:
    return [(k, v, i) for i, (k, v) in enumerate(records)]


def batches(rows: list[tuple[str, float, int]], cuts: list[int]) -> list[list]:
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    return [rows[a:b] for a, b in itertools.pairwise(bounds)]


def test_merge_takes_last_by_offset_not_order() -> None:
    early = KeyState.of(1.0, 3)
    late = KeyState.of(2.0, 9)
    for merged in (merge(early, late), merge(late, early)):
        assert merged == KeyState(
            count=2, sum=3.0, min=1.0, max=2.0, last=2.0, last_offset=9, first_offset=3
        )


@given(RECORDS, CUTS)
@settings(max_examples=200, deadline=None)
def test_merging_split_batches_equals_aggregating_all(
    records: list[tuple[str, float]], cuts: list[int]
) -> None:
    rows = with_offsets(records)
    state: dict[str, KeyState] = {}
    for batch in batches(rows, cuts):
        state, dead = merge_batch(state, aggregate_records(batch), max_keys=100)
        assert dead == {}
    assert state == aggregate_records(rows)


@given(RECORDS, CUTS, st.integers(min_value=1, max_value=14))
@settings(max_examples=200, deadline=None)
def test_key_limit_is_batch_independent_and_visible(
    records: list[tuple[str, float]], cuts: list[int], max_keys: int
) -> None:
    rows = with_offsets(records)
    first_seen: list[str] = list(dict.fromkeys(k for k, _ in records))
    admitted = set(first_seen[:max_keys])
    state: dict[str, KeyState] = {}
    dead_total: dict[str, KeyState] = {}
    for batch in batches(rows, cuts):
        state, dead = merge_batch(state, aggregate_records(batch), max_keys=max_keys)
        assert not set(dead) & set(state)
        dead_total = merge_states(dead_total, dead)
    everything = aggregate_records(rows)
    # The first max_keys keys by first offset are kept, however the input was cut ...
    assert state == {k: v for k, v in everything.items() if k in admitted}
    # ... and every record of every other key is accounted for in the dead letters.
    assert dead_total == {k: v for k, v in everything.items() if k not in admitted}
    assert sum(s.count for s in state.values()) + sum(s.count for s in dead_total.values()) == (
        len(records)
    )


def test_merge_batch_does_not_modify_its_input() -> None:
    state = {"a": KeyState.of(1.0, 0)}
    new, dead = merge_batch(state, {"a": KeyState.of(5.0, 1), "b": KeyState.of(2.0, 2)}, 1)
    assert state == {"a": KeyState.of(1.0, 0)}
    assert new["a"].count == 2 and new["a"].last == 5.0
    assert dead == {"b": KeyState.of(2.0, 2)}
