"""Each output a spec names as mergeable state: its per-batch Spark partials, merge and final.

Owns, per `AggFn`: the Spark expressions that aggregate one micro-batch per key (`partials`),
the Python state read from their row (`state_of_row`), the merge of two states, and the output
(`final`). Invariant: for every fn, `merge` is associative and commutative with `None` as its
identity, and merging the partials of any split of the rows into batches gives the state
those expressions compute over all the rows at once; so `final` of it is the one-batch result,
exactly. Sketches are the exception that needs Spark to merge: `merge_states` leaves their
unions to a `SketchOps` (pipeline.spec.sketches), all of one merge in one call.

State per fn: count -> int; sum, min, max -> value or None (no non-null value yet); mean ->
(sum, count); first, last -> (offset, value); approx_distinct -> the sketch's bytes. `None`
is every output's state of no rows yet (a spec update's new output at the cut).
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from shared.spec.ddl import ColumnType, TypeKind
from shared.spec.model import AggFn, AggregationSpec, PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn

__all__ = [
    "AggregationError",
    "KeyState",
    "Output",
    "SketchOps",
    "finals",
    "merge_states",
    "outputs_of",
]

OFFSET = "offset"
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1
DECIMAL_PRECISION_MAX = 38
# Wide enough that adding two DECIMAL(38,s) values or dividing one by a count never rounds
# before the one rounding `final` does on purpose.
_EXACT = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
MEAN_EXTRA_SCALE = 4  # a DECIMAL(p,s) mean has scale s+4, as Spark's avg

KeyState = dict[str, Any]  # output name -> its state


class AggregationError(Exception):
    """A merged state left the range its one-batch result would have (an overflow)."""


class SketchOps(Protocol):
    """HLL sketch operations (Spark's, DataSketches' format): merged and read in bulk."""

    def union(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[bytes]: ...

    def estimate(self, sketches: Sequence[bytes]) -> list[int]: ...


def _sum_type(column: ColumnType) -> ColumnType:
    """Spark's sum type: BIGINT for integers, DECIMAL(min(38, p+10), s) for decimals."""
    if column.kind is TypeKind.DECIMAL:
        precision = min(DECIMAL_PRECISION_MAX, column.precision + 10)
        return ColumnType(kind=TypeKind.DECIMAL, precision=precision, scale=column.scale)
    return ColumnType(kind=TypeKind.BIGINT)


def _add(a: Any, b: Any, result: ColumnType, name: str) -> Any:
    """a + b exactly, refused past `result`'s range as Spark (ANSI) refuses the overflow."""
    if result.kind is TypeKind.DECIMAL:
        total = _EXACT.add(a, b)
        if abs(total) >= decimal.Decimal(10) ** (result.precision - result.scale):
            raise AggregationError(f"{name}: the sum overflows {result.ddl}")
        return total
    total = a + b
    if not BIGINT_MIN <= total <= BIGINT_MAX:
        raise AggregationError(f"{name}: the sum overflows BIGINT")
    return total


def _order_key(value: Any) -> Any:
    """Spark's order for min and max: a NaN is larger than every other double."""
    if isinstance(value, float):
        return (math.isnan(value), 0.0 if math.isnan(value) else value)
    return value


def _nullable(merge: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def merged(a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return merge(a, b)

    return merged


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """One named output of a spec, bound to the type of the column it reads."""

    spec: AggregationSpec
    column_type: ColumnType | None
    index: int  # its place in the spec: names its partial columns, apart from every other's

    def part(self, name: str) -> str:
        return f"__a{self.index}_{name}"

    def partials(self) -> list[SparkColumn]:
        """The Spark aggregate expressions over one batch, grouped by the key."""
        from pyspark.sql import functions as F

        fn, col = self.spec.fn, self.spec.column
        if fn is AggFn.COUNT:
            counted = F.lit(1) if col is None else F.col(col)
            return [F.count(counted).alias(self.part("n"))]
        assert col is not None  # the parser requires a column for every other fn
        if fn is AggFn.SUM:
            return [F.sum(col).alias(self.part("sum"))]
        if fn is AggFn.MIN:
            return [F.min(col).alias(self.part("v"))]
        if fn is AggFn.MAX:
            return [F.max(col).alias(self.part("v"))]
        if fn is AggFn.MEAN:
            return [F.sum(col).alias(self.part("sum")), F.count(col).alias(self.part("n"))]
        if fn is AggFn.FIRST:
            return [
                F.min(OFFSET).alias(self.part("o")),
                F.min_by(col, OFFSET).alias(self.part("v")),
            ]
        if fn is AggFn.LAST:
            return [
                F.max(OFFSET).alias(self.part("o")),
                F.max_by(col, OFFSET).alias(self.part("v")),
            ]
        return [F.hll_sketch_agg(col, self.spec.lg_config_k).alias(self.part("sketch"))]

    def state_of_row(self, row: Mapping[str, Any]) -> Any:
        """The state from a `partials` row, as pyarrow's to_pylist gives it."""
        fn = self.spec.fn
        if fn is AggFn.COUNT:
            return int(row[self.part("n")])
        if fn is AggFn.SUM:
            return row[self.part("sum")]
        if fn is AggFn.MEAN:
            return (row[self.part("sum")], int(row[self.part("n")]))
        if fn in (AggFn.FIRST, AggFn.LAST):
            return (int(row[self.part("o")]), row[self.part("v")])
        if fn is AggFn.APPROX_DISTINCT:
            return bytes(row[self.part("sketch")])
        return row[self.part("v")]

    def merge(self, a: Any, b: Any) -> Any:
        """The state of both batches' rows; `None` is the identity. Not for sketches."""
        return _nullable(self._merge)(a, b)

    def _merge(self, a: Any, b: Any) -> Any:
        fn, name = self.spec.fn, self.spec.name
        if fn is AggFn.COUNT:
            return a + b
        if fn is AggFn.SUM:
            return _add(a, b, self._sum_type(), name)
        if fn is AggFn.MEAN:  # a batch whose values are all null has a null sum
            total = _nullable(lambda x, y: _add(x, y, self._sum_type(), name))(a[0], b[0])
            return (total, a[1] + b[1])
        if fn is AggFn.MIN:
            return b if _order_key(b) < _order_key(a) else a
        if fn is AggFn.MAX:
            return b if _order_key(b) > _order_key(a) else a
        # Offsets are unique across batches (each row is in exactly one), so no tie.
        if fn is AggFn.FIRST:
            return a if a[0] < b[0] else b
        if fn is AggFn.LAST:
            return a if a[0] > b[0] else b
        raise AssertionError("sketches merge through SketchOps")

    def _sum_type(self) -> ColumnType:
        assert self.column_type is not None
        return _sum_type(self.column_type)

    def final(self, state: Any) -> Any:
        """The output from a merged state (sketch estimates are read by `finals`)."""
        fn = self.spec.fn
        if fn is AggFn.COUNT:
            return 0 if state is None else state
        if state is None:
            return None
        if fn is AggFn.MEAN:
            return self.mean(*state)
        if fn in (AggFn.FIRST, AggFn.LAST):
            return state[1]
        return state

    def mean(self, total: Any, count: int) -> Any:
        """sum / count: a float for integers (Python's correctly rounded int division), a
        DECIMAL(p,s)'s rounded half up at scale s+4."""
        if count == 0 or total is None:
            return None
        assert self.column_type is not None
        if self.column_type.kind is TypeKind.DECIMAL:
            quantum = decimal.Decimal(1).scaleb(-(self.column_type.scale + MEAN_EXTRA_SCALE))
            return _EXACT.divide(total, count).quantize(quantum, context=_EXACT)
        return total / count


def outputs_of(spec: PipelineSpec) -> tuple[Output, ...]:
    schema = spec.aggregated
    out = []
    for i, agg in enumerate(spec.aggregations):
        column = None if agg.column is None else schema.column(agg.column)
        out.append(Output(spec=agg, column_type=None if column is None else column.type, index=i))
    return tuple(out)


def merge_states(
    outputs: Sequence[Output],
    state: Mapping[Any, KeyState],
    batch: Mapping[Any, KeyState],
    sketches: SketchOps,
) -> dict[Any, KeyState]:
    """`state` with one batch's partial states merged in; every sketch union in one call."""
    merged = {key: dict(values) for key, values in state.items()}
    pending: list[tuple[Any, str, bytes, bytes]] = []
    for key, values in batch.items():
        old = merged.get(key)
        if old is None:
            merged[key] = dict(values)
            continue
        for out in outputs:
            name = out.spec.name
            if out.spec.fn is AggFn.APPROX_DISTINCT:
                if old[name] is None or values[name] is None:  # no rows yet: the identity
                    old[name] = values[name] if old[name] is None else old[name]
                else:
                    pending.append((key, name, old[name], values[name]))
            else:
                old[name] = out.merge(old[name], values[name])
    if pending:
        unions = sketches.union([(a, b) for _, _, a, b in pending])
        for (key, name, _, _), sketch in zip(pending, unions, strict=True):
            merged[key][name] = sketch
    return merged


def finals(
    outputs: Sequence[Output], state: Mapping[Any, KeyState], sketches: SketchOps
) -> dict[Any, dict[str, Any]]:
    """Every key's outputs, in the spec's order; every sketch estimated in one call."""
    # A sketch of no rows yet (an output a spec update added) estimates 0, as an empty
    # sketch does, without asking Spark.
    wanted = [
        (key, o.spec.name)
        for key, values in state.items()
        for o in outputs
        if o.spec.fn is AggFn.APPROX_DISTINCT and values[o.spec.name] is not None
    ]
    estimates = dict(
        zip(
            wanted,
            sketches.estimate([state[k][n] for k, n in wanted]) if wanted else [],
            strict=True,
        )
    )
    return {
        key: {
            o.spec.name: estimates.get((key, o.spec.name), 0)
            if o.spec.fn is AggFn.APPROX_DISTINCT
            else o.final(values[o.spec.name])
            for o in outputs
        }
        for key, values in state.items()
    }
