"""A spec run as one Spark batch job (the equality oracle), and micro-batch by micro-batch.

Owns both evaluations of a spec over rows the caller holds (a pyarrow table of the record's
columns and `offset`). Invariant: `batch_job` computes each output with Spark's own aggregate
over all the rows in one groupBy (count, sum, min, max, min_by/max_by on the offset, an HLL
sketch's estimate; a mean as that sum over that count), independently of the merge code;
`Incremental` aggregates each batch on Spark, merges the partial states, and must give the
same outputs, exactly, for any split of the rows into batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.spec.aggregations import (
    KeyState,
    Output,
    SketchOps,
    finals,
    merge_states,
    outputs_of,
)
from pipeline.spec.frames import spec_rows
from pipeline.spec.sketches import SparkSketches, canonical
from shared.spec.model import AggFn, PipelineSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import SparkSession

__all__ = ["Incremental", "Outputs", "batch_job", "batch_partials"]

OFFSET = "offset"
Outputs = dict[Any, dict[str, Any]]  # key -> output name -> value


def _whole(out: Output) -> list[SparkColumn]:
    """The output over all the rows at once, as Spark computes it (mean: its sum and count)."""
    from pyspark.sql import functions as F

    fn, col, alias = out.spec.fn, out.spec.column, out.part
    if fn is AggFn.COUNT:
        return [F.count(F.lit(1) if col is None else F.col(col)).alias(alias("v"))]
    assert col is not None
    by_fn = {
        AggFn.SUM: F.sum(col),
        AggFn.MIN: F.min(col),
        AggFn.MAX: F.max(col),
        AggFn.FIRST: F.min_by(col, OFFSET),
        AggFn.LAST: F.max_by(col, OFFSET),
        AggFn.APPROX_DISTINCT: F.hll_sketch_estimate(
            canonical(F.hll_sketch_agg(col, out.spec.lg_config_k))
        ),
    }
    if fn is AggFn.MEAN:
        return [F.sum(col).alias(alias("sum")), F.count(col).alias(alias("n"))]
    return [by_fn[fn].alias(alias("v"))]


def _value(out: Output, row: dict[str, Any]) -> Any:
    if out.spec.fn is AggFn.MEAN:
        return out.mean(row[out.part("sum")], int(row[out.part("n")]))
    return row[out.part("v")]


def batch_job(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> Outputs:
    """The spec over every row of `table` as one Spark batch job: the equality oracle."""
    if table.num_rows == 0:
        return {}
    outputs = outputs_of(spec)
    df = spec_rows(spark, spec, table)
    columns = [c for out in outputs for c in _whole(out)]
    rows: list[dict[str, Any]] = df.groupBy(spec.key).agg(*columns).toArrow().to_pylist()
    return {r[spec.key]: {o.spec.name: _value(o, r) for o in outputs} for r in rows}


def batch_partials(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> dict[Any, KeyState]:
    """One micro-batch's partial state per key: one Spark job."""
    outputs = outputs_of(spec)
    df = spec_rows(spark, spec, table)
    columns = [c for out in outputs for c in out.partials()]
    rows: list[dict[str, Any]] = df.groupBy(spec.key).agg(*columns).toArrow().to_pylist()
    return {r[spec.key]: {o.spec.name: o.state_of_row(r) for o in outputs} for r in rows}


class Incremental:
    """The spec applied batch by batch, its state merged as a worker's would be."""

    def __init__(
        self, spark: SparkSession, spec: PipelineSpec, sketches: SketchOps | None = None
    ) -> None:
        self.spark = spark
        self.spec = spec
        self.outputs = outputs_of(spec)
        self.sketches = sketches if sketches is not None else SparkSketches(spark)
        self.state: dict[Any, KeyState] = {}

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        batch = batch_partials(self.spark, self.spec, table)
        self.state = merge_states(self.outputs, self.state, batch, self.sketches)

    def results(self) -> Outputs:
        return finals(self.outputs, self.state, self.sketches)
