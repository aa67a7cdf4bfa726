"""The build of a recorded pipeline's rescale: from cut checkpoints made by merging batches of
rows as a worker merges them, to new partitions' checkpoints that, merged on with the rows
after the cut, equal one state per key over all the rows.

Partials are computed in Python the way Spark's aggregates compute them
(tests/unit/test_pipeline_spec_merge.py); distinct counts use its exact fake sketches (a real
HLL union needs Spark: its bytes here are the fake's, so what is checked is that the build
carries, unions and admits sketches as it does every other state).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest

from pipeline.source import generation_base
from pipeline.spec.aggregations import KeyState, Output, finals, merge_states, outputs_of
from pipeline.spec.partition_state import (
    SpecPartitionState,
    decode_spec_checkpoint,
    encode_spec_checkpoint,
    merge_spec_batch,
)
from pipeline.spec.produce import key_text
from pipeline.spec.rescale_build import RescaleBuildError, build, carried_outputs
from shared.routing import SLOT_BASE, Routing
from shared.spec.model import AggFn, PipelineSpec
from shared.spec.parse import parse_spec
from tests.unit.test_pipeline_spec_merge import SetSketches, partial, sketch

OLD_FIRST = SLOT_BASE + 100
NEW_FIRST = SLOT_BASE + 200
BIG = 1_000_000

Row = tuple[int, str, int | None, str | None]  # offset, key, v, tag


def column(name: str, row: Row) -> Any:
    """A row's value of a column; `w`, which some specs add, is derived from `v`."""
    v = row[2]
    return {"v": v, "tag": row[3], "w": None if v is None else v * 3 + 1}[name]


def spec_text(ddl: str = "k STRING, v BIGINT, tag STRING", *aggs: tuple[str, str, str]) -> str:
    chosen = aggs or (
        ("n", "count", ""),
        ("total", "sum", "v"),
        ("low", "min", "v"),
        ("high", "max", "v"),
        ("avg", "mean", "v"),
        ("head", "first", "v"),
        ("tail", "last", "v"),
        ("tags", "approx_distinct", "tag"),
    )
    text = f'[schema]\nddl = "{ddl}"\nkey = "k"\n'
    for name, fn, column in chosen:
        col = f'column = "{column}"\n' if column else ""
        text += f'\n[[aggregations]]\nname = "{name}"\nfn = "{fn}"\n{col}'
    return text


SPEC = parse_spec(spec_text())


def partials(
    outputs: Sequence[Output], rows: Sequence[Row]
) -> tuple[dict[Any, KeyState], dict[Any, int]]:
    """One batch's partial state per key and each key's first offset, as Spark's job gives."""
    by_key: dict[str, list[Row]] = {}
    for row in rows:
        by_key.setdefault(row[1], []).append(row)
    values: dict[Any, KeyState] = {}
    for key, mine in by_key.items():
        state: KeyState = {}
        for out in outputs:
            col = out.spec.column
            if col is None:
                state[out.spec.name] = len(mine)
            elif out.spec.fn is AggFn.APPROX_DISTINCT:
                found = {str(column(col, r)) for r in mine if column(col, r) is not None}
                state[out.spec.name] = sketch(*found)
            else:
                pairs = [(r[0], column(col, r)) for r in mine]
                state[out.spec.name] = partial(out.spec.fn, pairs)
        values[key] = state
    return values, {k: min(o for o, *_ in mine) for k, mine in by_key.items()}


def offsets(
    rows: Sequence[tuple[str, int | None, str | None]], routing: Routing, first_slot: int
) -> dict[int, list[Row]]:
    """The rows as each partition's log holds them: routed by key, offsets from the
    generation's base."""
    logs: dict[int, list[Row]] = {}
    for key, v, tag in rows:
        log = logs.setdefault(first_slot + routing.partition_for(key_text(key)), [])
        log.append((generation_base(routing.generation) + len(log), key, v, tag))
    return logs


def merged(
    outputs: Sequence[Output],
    state: SpecPartitionState,
    log: Sequence[Row],
    rng: random.Random,
    max_keys: int = BIG,
) -> SpecPartitionState:
    """`log` merged into `state` in micro-batches of random sizes, as a worker merges."""
    start = 0
    while start < len(log):
        end = min(len(log), start + rng.randint(1, 9))
        values, firsts = partials(outputs, log[start:end])
        state, dead = merge_spec_batch(outputs, state, values, firsts, max_keys, SetSketches())
        assert not dead
        start = end
    return state


def rows_of(rng: random.Random, n: int, keys: int) -> list[tuple[str, int | None, str | None]]:
    return [
        (
            f"k{rng.randrange(keys)}",
            None if rng.random() < 0.1 else rng.randint(-50, 50),
            None if rng.random() < 0.1 else f"t{rng.randrange(6)}",
        )
        for _ in range(n)
    ]


def cut_checkpoints(
    spec: PipelineSpec, logs: dict[int, list[Row]], rng: random.Random
) -> dict[int, bytes]:
    outputs = outputs_of(spec)
    cuts = {}
    for p, log in sorted(logs.items()):
        state = merged(outputs, SpecPartitionState(), log, rng)
        cuts[p] = encode_spec_checkpoint(p, 4, log[-1][0] + 1, spec.version, outputs, state)
    return cuts


def one_state(outputs: Sequence[Output], logs: Sequence[dict[int, list[Row]]]) -> dict[Any, Any]:
    """Every row of every log merged into one state per key, read out."""
    state: dict[Any, KeyState] = {}
    for log in (row for gen in logs for p in sorted(gen) for row in gen[p]):
        values, _ = partials(outputs, [log])
        state = merge_states(outputs, state, values, SetSketches())
    return finals(outputs, state, SetSketches())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("old_count", "new_count"), [(3, 5), (4, 2), (1, 1)])
def test_built_states_merged_on_equal_one_state_over_all_rows(
    seed: int, old_count: int, new_count: int
) -> None:
    rng = random.Random(seed)
    outputs = outputs_of(SPEC)
    before = offsets(rows_of(rng, 300, 40), Routing(generation=0, partitions=old_count), OLD_FIRST)
    cuts = cut_checkpoints(SPEC, before, rng)
    routing = Routing(generation=1, partitions=new_count)
    built = build(SPEC, SPEC, cuts, routing, NEW_FIRST, 7, BIG, SetSketches())
    assert sorted(built) == list(range(NEW_FIRST, NEW_FIRST + new_count))
    after = offsets(rows_of(rng, 300, 50), routing, NEW_FIRST)
    results: dict[Any, Any] = {}
    for number, part in built.items():
        assert not part.dead
        ck = decode_spec_checkpoint(part.checkpoint)
        assert (ck.partition, ck.epoch, ck.offset) == (number, 7, generation_base(1))
        assert ck.spec_version == SPEC.version
        for key in ck.state.values:
            assert routing.partition_for(key_text(key)) == number - NEW_FIRST
        state = merged(outputs, ck.state, after.get(number, []), rng)
        results.update(finals(outputs, state.values, SetSketches()))
    assert results == one_state(outputs, [before, after])


def test_the_key_limit_admits_by_first_offset_then_key_and_dead_letters_the_rest() -> None:
    rng = random.Random(11)
    before = offsets(rows_of(rng, 400, 60), Routing(generation=0, partitions=3), OLD_FIRST)
    cuts = cut_checkpoints(SPEC, before, rng)
    routing = Routing(generation=1, partitions=2)
    held = {
        k: (v, ck.state.firsts[k])
        for ck in map(decode_spec_checkpoint, cuts.values())
        for k, v in ck.state.values.items()
    }
    built = build(SPEC, SPEC, cuts, routing, NEW_FIRST, 1, 10, SetSketches())
    seen: set[Any] = set()
    for number, part in built.items():
        ck = decode_spec_checkpoint(part.checkpoint)
        mine = sorted(
            (held[k][1], k)
            for k in held
            if routing.partition_for(key_text(k)) == number - NEW_FIRST
        )
        assert sorted(ck.state.values) == sorted(k for _, k in mine[:10])
        assert sorted(part.dead) == sorted(k for _, k in mine[10:])
        assert part.dead and all(part.dead[k] == held[k][0] for k in part.dead)
        assert all(ck.state.firsts[k] == held[k][1] for k in ck.state.values)
        seen |= set(ck.state.values) | set(part.dead)
    assert seen == set(held)  # every key lands once: in a state or in the dead letters


def test_the_build_is_deterministic_whatever_the_order_of_its_input() -> None:
    rng = random.Random(3)
    # A second rescale: the old generation is itself a key-group one.
    before = offsets(rows_of(rng, 200, 30), Routing(generation=1, partitions=4), OLD_FIRST)
    cuts = cut_checkpoints(SPEC, before, rng)
    routing = Routing(generation=2, partitions=3)
    shuffled = dict(reversed(list(cuts.items())))
    one = build(SPEC, SPEC, cuts, routing, NEW_FIRST, 2, 8, SetSketches())
    two = build(SPEC, SPEC, shuffled, routing, NEW_FIRST, 2, 8, SetSketches())
    assert one == two
    starts = {decode_spec_checkpoint(b.checkpoint).offset for b in one.values()}
    assert starts == {generation_base(2)}


def test_a_key_in_two_old_partitions_is_merged_with_its_smaller_first_offset() -> None:
    # Only a transform that rewrites keys puts one key in two partitions.
    outputs = outputs_of(SPEC)
    a = partials(outputs, [(5, "x", 3, "t1"), (6, "x", 9, "t2")])
    b = partials(outputs, [(2, "x", 4, "t2"), (8, "x", None, "t3")])
    cuts = {
        OLD_FIRST + i: encode_spec_checkpoint(
            OLD_FIRST + i, 1, 9, SPEC.version, outputs, SpecPartitionState(*batch)
        )
        for i, batch in enumerate([a, b])
    }
    sketches = SetSketches()
    built = build(SPEC, SPEC, cuts, Routing(generation=1, partitions=1), NEW_FIRST, 1, 5, sketches)
    ck = decode_spec_checkpoint(built[NEW_FIRST].checkpoint)
    assert ck.state.firsts == {"x": 2}
    assert ck.state.values["x"] == {
        "n": 4,
        "total": 16,
        "low": 3,
        "high": 9,
        "avg": (16, 3),
        "head": (2, 4),
        "tail": (8, None),
        "tags": sketch("t1", "t2", "t3"),
    }
    assert sketches.union_calls == 1


def test_a_cut_that_is_not_the_old_generation_s_state_is_refused() -> None:
    outputs = outputs_of(SPEC)
    state = SpecPartitionState(*partials(outputs, [(0, "x", 1, "t")]))
    other = parse_spec(spec_text("k STRING, v BIGINT, tag STRING", ("n", "count", "")))
    routing = Routing(generation=1, partitions=2)

    def refused(cuts: dict[int, bytes], match: str, old: PipelineSpec = SPEC) -> None:
        with pytest.raises(RescaleBuildError, match=match):
            build(old, SPEC, cuts, routing, NEW_FIRST, 1, 5, SetSketches())

    good = encode_spec_checkpoint(OLD_FIRST, 1, 1, SPEC.version, outputs, state)
    build(SPEC, SPEC, {OLD_FIRST: good}, routing, NEW_FIRST, 1, 5, SetSketches())
    wrong_version = encode_spec_checkpoint(OLD_FIRST, 1, 1, other.version, outputs, state)
    refused({OLD_FIRST: wrong_version}, "is of spec sha256:")
    refused({OLD_FIRST: good}, "the old generation ran", old=other)
    refused({OLD_FIRST + 1: good}, "is partition")
    refused({OLD_FIRST: b"\x00garbage"}, "does not decode|not a format-2")
    later = encode_spec_checkpoint(OLD_FIRST, 1, generation_base(1), SPEC.version, outputs, state)
    refused({OLD_FIRST: later}, "not in generation 0")
    refused({NEW_FIRST: good}, "reuse old numbers|is partition")
    with pytest.raises(RescaleBuildError, match="key-group generation"):
        build(SPEC, SPEC, {}, Routing(generation=0, partitions=2), NEW_FIRST, 1, 5, SetSketches())


def test_a_spec_update_carries_identical_outputs_starts_new_ones_and_drops_the_rest() -> None:
    rng = random.Random(5)
    new = parse_spec(
        spec_text(
            "k STRING, v BIGINT, tag STRING, w BIGINT",
            ("n", "count", ""),
            ("total", "sum", "v"),
            ("tail", "last", "v"),
            ("tags", "approx_distinct", "tag"),
            ("high", "min", "v"),  # a name kept with another aggregation: a new output
            ("wn", "count", "w"),
            ("wtags", "approx_distinct", "w"),
            ("whead", "first", "w"),
        )
    )
    assert carried_outputs(SPEC, new) == {"n", "total", "tail", "tags"}
    before = offsets(rows_of(rng, 200, 30), Routing(generation=0, partitions=2), OLD_FIRST)
    cuts = cut_checkpoints(SPEC, before, rng)
    routing = Routing(generation=1, partitions=3)
    built = build(SPEC, new, cuts, routing, NEW_FIRST, 1, BIG, SetSketches())
    quiet = {"k0", "k1", "k2"}  # keys with no row after the cut
    later = [r for r in rows_of(rng, 150, 45) if r[0] not in quiet]
    after = offsets(later, routing, NEW_FIRST)
    outputs = outputs_of(new)
    results: dict[Any, Any] = {}
    for number, part in built.items():
        ck = decode_spec_checkpoint(part.checkpoint)
        assert ck.spec_version == new.version
        state = merged(outputs, ck.state, after.get(number, []), rng)
        results.update(finals(outputs, state.values, SetSketches()))
    carried = one_state(outputs_of(SPEC), [before, after])
    fresh = one_state(outputs, [after])
    assert set(results) == set(carried)
    for key, got in results.items():
        assert list(got) == [o.spec.name for o in outputs]  # dropped outputs are gone
        for name in ("n", "total", "tail", "tags"):
            assert got[name] == carried[key][name]
        if key in fresh:
            assert {n: got[n] for n in ("high", "wn", "wtags", "whead")} == {
                n: fresh[key][n] for n in ("high", "wn", "wtags", "whead")
            }
        else:  # no row since the cut: the new outputs read as over no rows
            assert (got["high"], got["wn"], got["wtags"], got["whead"]) == (None, 0, 0, None)
    assert any(k not in fresh for k in results) and any(k in fresh for k in results)


def test_what_a_spec_update_carries() -> None:
    base = spec_text("k STRING, v BIGINT", ("n", "count", ""), ("total", "sum", "v"))
    assert carried_outputs(parse_spec(base), parse_spec(base)) == {"n", "total"}
    retyped = parse_spec(spec_text("k STRING, v INT", ("n", "count", ""), ("total", "sum", "v")))
    assert carried_outputs(parse_spec(base), retyped) == {"n"}  # the sum's input type changed
    moved = base.replace('key = "k"', 'key = "v"')
    with pytest.raises(RescaleBuildError, match="key column changed"):
        carried_outputs(parse_spec(base), parse_spec(moved))
    rekeyed = parse_spec(spec_text("k INT, v BIGINT", ("n", "count", "")))
    with pytest.raises(RescaleBuildError, match="key column changed"):
        carried_outputs(parse_spec(base), rekeyed)
    transformed = [
        parse_spec(
            base + f"\n[transform]\nsource = '''\ndef transform(df):\n    return df{tail}\n'''\n"
        )
        for tail in ("", ".copy()")
    ]
    assert carried_outputs(transformed[0], transformed[0]) == {"n", "total"}
    assert carried_outputs(transformed[0], transformed[1]) == frozenset()
    assert carried_outputs(parse_spec(base), transformed[0]) == frozenset()


def test_the_build_covers_every_key_of_every_cut_in_one_new_partition() -> None:
    rng = random.Random(17)
    before = offsets(rows_of(rng, 500, 200), Routing(generation=0, partitions=5), OLD_FIRST)
    cuts = cut_checkpoints(SPEC, before, rng)
    routing = Routing(generation=1, partitions=7)
    built = build(SPEC, SPEC, cuts, routing, NEW_FIRST, 1, BIG, SetSketches())
    keys = [list(decode_spec_checkpoint(b.checkpoint).state.values) for b in built.values()]
    flat = list(itertools.chain.from_iterable(keys))
    assert len(flat) == len(set(flat)) == len({r[1] for log in before.values() for r in log})


def test_the_oracle_computes_each_output_since_it_last_started_empty() -> None:
    from pipeline.spec.oracle import empty_output, output_starts

    a = parse_spec(spec_text("k STRING, v BIGINT", ("n", "count", ""), ("total", "sum", "v")))
    b = parse_spec(
        spec_text(
            "k STRING, v BIGINT", ("n", "count", ""), ("total", "sum", "v"), ("m", "max", "v")
        )
    )
    c = parse_spec(
        spec_text(
            "k STRING, v BIGINT", ("n", "count", ""), ("total", "min", "v"), ("m", "max", "v")
        )
    )
    assert output_starts([a]) == {"n": 0, "total": 0}
    assert output_starts([a, b, b, c]) == {"n": 0, "total": 3, "m": 1}
    empty = [empty_output(x) for x in SPEC.aggregations]
    assert empty == [0, None, None, None, None, None, None, 0]


def test_an_earlier_version_s_rows_take_a_later_version_s_columns() -> None:
    import pyarrow as pa

    from pipeline.spec.oracle import in_columns
    from pipeline.spec.run import arrow_schema

    before = pa.table(
        {"k": ["a", "b"], "v": pa.array([1, 2], pa.int64()), "offset": pa.array([0, 1])}
    )
    later = spec_text("k STRING, v DOUBLE, w STRING", ("n", "count", ""))
    after = arrow_schema(parse_spec(later).schema)
    got = in_columns(before, after)
    assert got.schema == after
    assert got.to_pylist() == [
        {"k": "a", "v": None, "w": None, "offset": 0},
        {"k": "b", "v": None, "w": None, "offset": 1},
    ]
