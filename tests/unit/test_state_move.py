"""The state move of a rescale: each key's state lands in exactly one new partition, the key
limit holds, and on Spark it equals the in-process move and one batch job over the input."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.aggregate import Aggregator
from pipeline.checkpoint import CheckpointStore
from pipeline.source import Producer, SourceLog, generate, generation_base
from pipeline.state import (
    KeyState,
    PartitionState,
    aggregate_records,
    merge_batch,
    merge_states,
)
from pipeline.state_move import MovedState, move_on_spark, move_states
from pipeline.store import LocalStore
from shared.routing import Routing

OLD_PARTITIONS = 4
NEW_PARTITIONS = 6

KEY = st.sampled_from([f"K{i:03d}" for i in range(40)])
STATE = st.builds(
    lambda n, total, first, span: KeyState(
        count=n,
        sum=total / 64,
        min=-1.0,
        max=1.0,
        last=0.5,
        last_offset=first + span,
        first_offset=first,
    ),
    st.integers(1, 9),
    st.integers(-640, 640),
    st.integers(0, 1000),
    st.integers(0, 50),
)
OLD_STATES = st.dictionaries(st.integers(0, 5), st.dictionaries(KEY, STATE, max_size=25))


def placed(moved: dict[int, MovedState]) -> dict[str, list[int]]:
    """Key -> the new partitions holding it, in their state or their dead-letter rows."""
    out: dict[str, list[int]] = {}
    for q, m in moved.items():
        for key in [*m.state, *m.dead]:
            out.setdefault(key, []).append(q)
    return out


@given(OLD_STATES, st.integers(1, 9), st.integers(1, 30))
@settings(max_examples=150, deadline=None)
def test_every_key_lands_once_where_the_new_routing_says(
    old: dict[int, PartitionState], new_n: int, max_keys: int
) -> None:
    new = Routing(generation=1, partitions=new_n)
    moved = move_states(old, new, max_keys)
    assert sorted(moved) == list(range(new_n))
    keys = {k for state in old.values() for k in state}
    where = placed(moved)
    assert set(where) == keys
    for key, qs in where.items():
        assert qs == [new.partition_for(key)]
    for m in moved.values():
        # The key limit, admitting by (first offset, key) exactly as a batch would.
        assert len(m.state) <= max_keys
        assert not m.dead or len(m.state) == max_keys
        admitted = sorted((s.first_offset, k) for k, s in m.state.items())
        refused = sorted((s.first_offset, k) for k, s in m.dead.items())
        assert not refused or not admitted or admitted[-1] < refused[0]
    if all(len(m.state) + len(m.dead) <= max_keys for m in moved.values()):
        # Nothing refused: each key has its old aggregates (merged if in two partitions).
        union: PartitionState = {}
        for p in sorted(old):
            union = merge_states(union, old[p])
        assert {k: s for m in moved.values() for k, s in m.state.items()} == union


def test_a_move_builds_a_key_group_generation_only() -> None:
    with pytest.raises(ValueError):
        move_states({}, Routing(generation=0, partitions=4))
    with pytest.raises(ValueError):
        move_states({}, Routing(generation=1, partitions=4), max_keys=0)


@pytest.fixture(scope="module")
def aggregator(spark_remote: str) -> Iterator[Aggregator]:
    yield Aggregator(spark_remote)


@pytest.mark.spark
@given(OLD_STATES, st.integers(1, 9), st.integers(1, 30))
@settings(max_examples=6, deadline=None)
def test_the_spark_move_equals_the_in_process_move(
    aggregator: Aggregator, old: dict[int, PartitionState], new_n: int, max_keys: int
) -> None:
    new = Routing(generation=2, partitions=new_n)
    assert move_on_spark(aggregator.spark, old, new, max_keys) == move_states(old, new, max_keys)


@pytest.mark.spark
def test_a_rescale_from_checkpoints_equals_one_batch_job(
    aggregator: Aggregator, tmp_path: Path
) -> None:
    store = LocalStore(str(tmp_path / "store"))
    checkpoints = CheckpointStore(store)
    old, new = (
        Routing(generation=0, partitions=OLD_PARTITIONS),
        Routing(generation=1, partitions=NEW_PARTITIONS),
    )
    producer = Producer(store, OLD_PARTITIONS)
    producer.produce(generate(4000, 120, seed=1))
    # Cut every old partition, checkpoint its state at the cut (as its owner would), and
    # rebuild the state from those checkpoints' contents.
    log = SourceLog(store, [OLD_PARTITIONS, NEW_PARTITIONS])
    at_cut: dict[int, PartitionState] = {}
    for p in range(old.partitions):
        cut = log.seal(p, 0)
        t = log.read(p).to_pydict()
        uri = checkpoints.write(
            p, 3, cut, aggregate_records(zip(t["key"], t["value"], t["offset"], strict=True))
        )
        at_cut[p] = checkpoints.read(uri).state
    moved = move_on_spark(aggregator.spark, at_cut, new, max_keys=1000)
    assert all(not m.dead for m in moved.values())
    every_key = [k for m in moved.values() for k in m.state]
    assert len(every_key) == len(set(every_key))  # no key in two new partitions
    paths = [store.local_path(s.key) or "" for s in log.all_segments()]
    assert {k: s for m in moved.values() for k, s in m.state.items()} == aggregator.batch_job(paths)
    # The producer follows the seals; each new partition continues from its moved state
    # with its own generation-1 records, and still equals one batch job over everything.
    producer.produce(generate(3000, 150, seed=2))
    assert producer.log.routing == new
    final: PartitionState = {}
    for q in range(new.partitions):
        t = log.read(q, generation_base(1)).to_pydict()
        tail = aggregate_records(zip(t["key"], t["value"], t["offset"], strict=True))
        assert all(new.partition_for(k) == q for k in tail)
        state, dead = merge_batch(moved[q].state, tail, 1000)
        assert not dead and not set(state) & set(final)
        final.update(state)
    paths = [store.local_path(s.key) or "" for s in log.all_segments()]
    assert final == aggregator.batch_job(paths)
