"""The baseline the pipeline benchmarks compare the workers against: one Spark batch job over
the rig's source log (all of it, or what was appended since a round began), timed.

Each timing warms its Spark session with a small job first, so the job and the workers
both run on a session that has done work. A job must count every row produced; the caller
checks (`bench.pipeline.batch_rate`).
"""

from __future__ import annotations

import time

import pyarrow as pa

from pipeline.aggregate import Aggregator, stage
from testkit.pipeline_rig import PARTITIONS, PipelineRig

__all__ = ["batch_job_arrow_s", "batch_job_s", "ends", "input_paths"]

WARM_ROWS = 1000
COLUMNS = ["key", "value", "offset"]


def ends(rig: PipelineRig) -> dict[int, int]:
    """Each partition's end offset now: where the next round's input will begin."""
    return {p: rig.source.end_offset(p) for p in range(PARTITIONS)}


def input_paths(rig: PipelineRig, since: dict[int, int] | None = None) -> list[str]:
    """Every segment's file, or (given `since`, from `ends`) those appended since."""
    staging = str(rig.cluster.root / "staging")
    return [
        stage(rig.store, seg, staging)
        for p in range(PARTITIONS)
        for seg in rig.source.segments(p, (since or {}).get(p, 0))
    ]


def batch_job_arrow_s(rig: PipelineRig, since: dict[int, int] | None = None) -> tuple[float, int]:
    """Seconds for reading every segment (or those appended `since`) here (pyarrow,
    through the store) and one Aggregator.batch_job_table over the rows: the batch job
    on a Spark whose executors cannot see the store; and the row count."""
    agg = Aggregator(rig.spark)
    try:
        warm = rig.source.read(0, 0).slice(0, WARM_ROWS).select(COLUMNS)
        agg.batch_job_table(warm)
        t0 = time.perf_counter()
        table = pa.concat_tables(
            rig.source.read(p, (since or {}).get(p, 0)).select(COLUMNS) for p in range(PARTITIONS)
        )
        out = agg.batch_job_table(table)
        elapsed = time.perf_counter() - t0
    finally:
        agg.close()
    return elapsed, sum(v.count for v in out.values())


def batch_job_s(rig: PipelineRig, since: dict[int, int] | None = None) -> tuple[float, int]:
    """Seconds for one Aggregator.batch_job over every input file (or those appended
    `since`), and the row count."""
    paths = input_paths(rig, since)
    agg = Aggregator(rig.spark)
    try:
        agg.batch_job(paths[:1])
        t0 = time.perf_counter()
        out = agg.batch_job(paths)
        elapsed = time.perf_counter() - t0
    finally:
        agg.close()
    return elapsed, sum(v.count for v in out.values())
