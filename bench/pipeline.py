"""Pipeline throughput: rows per second end to end through three workers, against one Spark
batch job over the same Parquet input on the same Spark Connect server.

Rig as in bench.rig (three coordinators, three workers, one local Spark Connect server,
local store, 8 partitions). Three workers are started and caught up on empty input; then
the producer appends `rows` records in chunks (`chunk` rows per produce call, one Parquet
segment per partition per call, like a stream of arrivals). `rows_per_s` = rows / the time
from the first append to every partition's owner having processed the whole log (so it
includes appending, the workers' micro-batches at 0.2 s intervals, and the coordinator's
view of offsets). Baseline: `Aggregator.batch_job` over every segment file, one job, timed
after a warm-up job on the same session. Repeated `REPEATS` times (new input each time).
"""

from __future__ import annotations

import time

from bench.harness import scratch, summary
from bench.rig import Rig
from pipeline.source import generate

KEYS = 500
REPEATS = 3


def run(quick: bool) -> dict[str, dict[str, float]]:
    rows_per_round, chunk = (100_000, 10_000) if quick else (1_000_000, 50_000)
    e2e: list[float] = []
    produce_s: list[float] = []
    batch: list[float] = []
    with scratch("pipeline") as root:
        rig = Rig(root)
        try:
            rig.start()
            for wid in ("w1", "w2", "w3"):
                rig.start_worker(wid)
            rig.wait_caught_up()
            total = 0
            for r in range(REPEATS):
                data = generate(rows_per_round, KEYS, seed=100 + r)
                t0 = time.monotonic()
                for start in range(0, len(data), chunk):
                    rig.producer.produce(data[start : start + chunk])
                produce_s.append(time.monotonic() - t0)
                rig.wait_caught_up()
                e2e.append(rows_per_round / (time.monotonic() - t0))
                total += rows_per_round
                # The baseline reads everything appended so far: the same files the
                # workers have read, so compare its rate, not its time.
                elapsed, counted = rig.batch_job_s()
                if counted != total:
                    raise RuntimeError(f"batch job counted {counted} rows, produced {total}")
                batch.append(counted / elapsed)
        finally:
            rig.close()
    s, b = summary(e2e), summary(batch)
    return {
        "workers_3": {
            "rows": rows_per_round,
            "rows_per_s": s["median"],
            "min_rows_per_s": s["min"],
            "max_rows_per_s": s["max"],
            "produce_rows_per_s": rows_per_round / summary(produce_s)["median"],
            "baseline_rows_per_s": b["median"],
            "ratio": s["median"] / b["median"] if b["median"] else 0.0,
        },
        "batch_job": {
            "rows_per_s": b["median"],
            "min_rows_per_s": b["min"],
            "max_rows_per_s": b["max"],
            "baseline_rows_per_s": b["median"],
            "ratio": 1.0,
        },
    }
