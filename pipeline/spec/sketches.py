"""HLL sketch unions and estimates on Spark: the one merge a spec's state cannot do in Python.

Owns the Spark calls behind `aggregations.SketchOps`. Invariant: a sketch is only ever built,
merged and read by Spark's own functions (hll_sketch_agg, hll_union, hll_sketch_estimate, of
Apache DataSketches), so a union of per-batch sketches is the sketch Spark's own aggregate
would merge to, and its estimate is that aggregate's estimate. Each call is one Spark job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkSketches"]


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
        out = df.select("i", F.hll_sketch_estimate("s").alias("e")).toArrow().to_pylist()
        return [int(r["e"]) for r in sorted(out, key=_by_index)]


def _by_index(row: dict[str, Any]) -> int:
    return int(row["i"])
