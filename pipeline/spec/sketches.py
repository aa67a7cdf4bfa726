"""HLL sketch unions and estimates on Spark: the one merge a spec's state cannot do in Python.

Owns the Spark calls behind `aggregations.SketchOps`. Invariant: a sketch is only ever built,
merged and read by Spark's own functions (hll_sketch_agg, hll_union, hll_sketch_estimate, of
Apache DataSketches), so a union of per-batch sketches is the sketch Spark's own aggregate
would merge to. An estimate is always read from the sketch's union with itself
(`canonical`): a sketch built by one task in one pass keeps an estimator that depends on the
order its values came in, while a union's depends on its registers only, that is on the set
of values; so the estimate does not depend on how the rows were split into batches or
Spark tasks. Each call is one Spark job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import SparkSession

__all__ = ["SparkSketches", "canonical"]


class SparkSketches:
    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def union(self, pairs: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        from pyspark.sql import functions as F

        if not pairs:
            return []
        rows = [(i, a, b) for i, (a, b) in enumerate(pairs)]
        df = self.spark.createDataFrame(rows, "i INT, a BINARY, b BINARY")
        out = df.select("i", F.hll_union("a", "b").alias("u")).toArrow().to_pylist()
        return [bytes(r["u"]) for r in sorted(out, key=_by_index)]

    def estimate(self, sketches: Sequence[bytes]) -> list[int]:
        from pyspark.sql import functions as F

        if not sketches:
            return []
        df = self.spark.createDataFrame(list(enumerate(sketches)), "i INT, s BINARY")
        estimated = F.hll_sketch_estimate(canonical(F.col("s"))).alias("e")
        out = df.select("i", estimated).toArrow().to_pylist()
        return [int(r["e"]) for r in sorted(out, key=_by_index)]


def canonical(sketch: SparkColumn) -> SparkColumn:
    """`sketch` unioned with itself: the same registers, read by the union's estimator."""
    from pyspark.sql import functions as F

    return F.hll_union(sketch, sketch)


def _by_index(row: dict[str, Any]) -> int:
    return int(row["i"])
