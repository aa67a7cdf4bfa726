"""A spec's rows on Spark: the record rows given, then its transform applied to them.

Owns how a spec's transform runs on Spark Connect (`mapInPandas` over pandas batches: the
Connect route for Python code) and the row schemas on both sides of it. Invariant: the frame
the aggregations read has exactly the spec's aggregated columns plus `offset`, in that order,
typed as the spec says: a transform output lacking a column fails the job, naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from shared.spec.ddl import Schema
from shared.spec.model import PipelineSpec
from shared.spec.transform import TransformFn, load_transform

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["pandas_runner", "rows_ddl", "spec_rows", "transformed"]

OFFSET_DDL = "offset BIGINT"


def rows_ddl(schema: Schema) -> str:
    return f"{schema.ddl}, {OFFSET_DDL}"


def pandas_runner(
    fn: TransformFn, columns: list[str]
) -> Any:  # Callable[[Iterator[pandas.DataFrame]], Iterator[pandas.DataFrame]]
    """`fn` over each batch, its output cut to `columns` in that order (mapInPandas's shape)."""

    # A closure, so cloudpickle ships it to Spark's Python workers by value with the
    # transform it holds: they need not import this package, nor find the owner's code.
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            out = fn(batch)
            missing = [c for c in columns if c not in out.columns]
            if missing:
                raise ValueError(f"the transform's output lacks the columns {missing}")
            yield out[columns]

    return run


def transformed(df: DataFrame, spec: PipelineSpec) -> DataFrame:
    """`df` (the record columns and offset) through the spec's transform, if it has one."""
    if spec.transform is None:
        return df
    t = spec.transform
    fn = load_transform(t.source, t.function)
    columns = [*t.output.names, "offset"]
    return df.mapInPandas(pandas_runner(fn, columns), schema=rows_ddl(t.output))


def spec_rows(spark: SparkSession, spec: PipelineSpec, table: pa.Table) -> DataFrame:
    """The rows of `table` (record columns and offset) as the spec's aggregations read them."""
    df = spark.createDataFrame(table, schema=rows_ddl(spec.schema))
    return transformed(df, spec)
