"""A spec's states merge exactly: any split of the rows merges to the state over all of them.

The partials here are computed in Python the way Spark's aggregates compute them (count, sum,
min, max, sum and count, min_by/max_by on the offset); the Spark side is
tests/integration/test_pipeline_spec_spark.py. Sketch unions go through a fake `SketchOps`.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.spec.aggregations import (
    AggregationError,
    Output,
    finals,
    merge_states,
    outputs_of,
)
from shared.spec.ddl import ColumnType, TypeKind
from shared.spec.model import AggFn, AggregationSpec
from shared.spec.parse import parse_spec

BIGINT = ColumnType(kind=TypeKind.BIGINT)
DEC = ColumnType(kind=TypeKind.DECIMAL, precision=12, scale=2)
DOUBLE = ColumnType(kind=TypeKind.DOUBLE)


def output(fn: AggFn, column_type: ColumnType | None = BIGINT) -> Output:
    spec = AggregationSpec(name="o", fn=fn, column=None if column_type is None else "v")
    return Output(spec=spec, column_type=column_type, index=0)


def partial(fn: AggFn, rows: list[tuple[int, Any]]) -> Any:
    """What Spark's partial aggregate gives for one batch of (offset, value) rows."""
    values = [v for _, v in rows if v is not None]
    if fn is AggFn.COUNT:
        return len(values)
    if fn is AggFn.SUM:
        return sum(values) if values else None
    if fn is AggFn.MEAN:
        return (sum(values) if values else None, len(values))
    if fn is AggFn.MIN:
        return min(values) if values else None
    if fn is AggFn.MAX:
        return max(values) if values else None
    if fn is AggFn.FIRST:
        return min(rows, key=lambda r: r[0])
    return max(rows, key=lambda r: r[0])


MERGED_FNS = [AggFn.COUNT, AggFn.SUM, AggFn.MEAN, AggFn.MIN, AggFn.MAX, AggFn.FIRST, AggFn.LAST]


@given(
    fn=st.sampled_from(MERGED_FNS),
    values=st.lists(st.one_of(st.none(), st.integers(-(10**6), 10**6)), min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_any_split_merges_to_the_whole(
    fn: AggFn, values: list[int | None], cuts: list[int], order: Any
) -> None:
    out = output(fn)
    rows = list(enumerate(values))
    order.shuffle(rows)  # a batch need not be an offset range: any split must do
    bounds = sorted({0, len(rows), *(c for c in cuts if c < len(rows))})
    batches = [rows[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    partials = [partial(fn, b) for b in batches]
    order.shuffle(partials)  # and in any order
    state = None
    for p in partials:
        state = out.merge(state, p)
    assert state == partial(fn, rows)
    assert out.final(state) == out.final(partial(fn, rows))


def test_sums_refuse_the_overflow_spark_refuses() -> None:
    big = output(AggFn.SUM)
    assert big.merge(2**62, 2**62 - 1) == 2**63 - 1
    with pytest.raises(AggregationError):
        big.merge(2**62, 2**62)
    dec = output(AggFn.SUM, DEC)  # Spark sums DECIMAL(12,2) as DECIMAL(22,2)
    top = Decimal("99999999999999999999.99")
    assert dec.merge(top - 1, Decimal("1.00")) == top
    with pytest.raises(AggregationError):
        dec.merge(top, Decimal("0.01"))
    # Exact past the default decimal context's 28 digits.
    wide = output(AggFn.SUM, ColumnType(kind=TypeKind.DECIMAL, precision=38, scale=10))
    a = Decimal("1234567890123456789012345678.0000000001")
    assert wide.merge(a, a) == Decimal("2469135780246913578024691356.0000000002")


def test_a_nan_orders_above_every_double_as_in_spark() -> None:
    nan = float("nan")
    high, low = output(AggFn.MAX, DOUBLE), output(AggFn.MIN, DOUBLE)
    assert math.isnan(high.merge(nan, 1.0)) and math.isnan(high.merge(1.0, nan))
    assert low.merge(nan, 1.0) == 1.0 and low.merge(1.0, nan) == 1.0


def test_a_mean_is_the_exact_sum_over_the_count() -> None:
    assert output(AggFn.MEAN).final((7, 2)) == 3.5
    assert output(AggFn.MEAN, DEC).final((Decimal("2.00"), 3)) == Decimal("0.666667")
    assert output(AggFn.MEAN, DEC).final((Decimal("0.01"), 8)) == Decimal("0.001250")
    assert output(AggFn.MEAN, DEC).final((None, 0)) is None
    assert output(AggFn.COUNT, None).final(None) == 0


class SetSketches:
    """A fake SketchOps: a "sketch" is a JSON list of the distinct values; exact."""

    def __init__(self) -> None:
        self.union_calls = 0

    def union(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        self.union_calls += 1
        return [
            json.dumps(sorted(set(json.loads(a)) | set(json.loads(b)))).encode() for a, b in pairs
        ]

    def estimate(self, sketches: Sequence[bytes]) -> list[int]:
        return [len(json.loads(s)) for s in sketches]


def sketch(*values: str) -> bytes:
    return json.dumps(sorted(values)).encode()


def test_merge_states_unions_every_sketch_in_one_call_and_keeps_the_spec_order() -> None:
    spec = parse_spec(
        '[schema]\nddl = "k STRING, c STRING, n BIGINT"\nkey = "k"\n'
        '[[aggregations]]\nname = "cs"\nfn = "approx_distinct"\ncolumn = "c"\n'
        '[[aggregations]]\nname = "total"\nfn = "sum"\ncolumn = "n"\n'
        '[[aggregations]]\nname = "cs2"\nfn = "approx_distinct"\ncolumn = "c"\n'
    )
    outputs = outputs_of(spec)
    ops = SetSketches()
    state = {"a": {"cs": sketch("x"), "total": 1, "cs2": sketch("y")}}
    batch = {
        "a": {"cs": sketch("x", "z"), "total": 2, "cs2": sketch("w")},
        "b": {"cs": sketch("q"), "total": None, "cs2": sketch()},
    }
    merged = merge_states(outputs, state, batch, ops)
    assert ops.union_calls == 1
    assert state["a"]["total"] == 1  # the old state is not changed in place
    assert finals(outputs, merged, ops) == {
        "a": {"cs": 2, "total": 3, "cs2": 2},
        "b": {"cs": 1, "total": None, "cs2": 0},
    }
    assert list(finals(outputs, merged, ops)["a"]) == ["cs", "total", "cs2"]
