"""Pipeline throughput on a Spark standalone cluster whose executors share no disk with the
workers.

The cluster is testkit/spark_cluster.py's: a Master, one Worker (1 core, 512 MiB executor)
in its own mount namespace with a tmpfs over this run's directory (so over its store), and
a Spark Connect server submitted to the Master (1 GiB driver). Three `ripple worker`s on the
`arrow` data path (they read their segments and send the rows through Spark Connect; nothing
passes through a disk), a local-directory store, the rig of testkit/pipeline_rig.py
otherwise.

After one round of each side, not counted (cold JVMs), `REPEATS` rounds (one in quick mode) of:
`backlog`: workers paused (SIGSTOP), `rows` records appended, workers resumed, timed until
every owner has processed the whole log, as in bench/pipeline.py. Baseline: one batch job on
the same Connect server over the round's rows; its executors cannot read the store either,
so it is timed from reading the segments here (pyarrow) through `batch_job_table` (one Arrow
local relation, one job). No all-input baseline here: one local relation of every row so far
outgrows the 1 GiB driver (`Java heap space` at 2M rows).
Needs `unshare --mount` (root, or user namespaces); where it is not permitted the benchmark
fails saying so.
"""

from __future__ import annotations

from bench.batch_job import batch_job_arrow_s, ends
from bench.harness import pipeline_rig, scratch, summary
from bench.pipeline import (
    SETTINGS,
    backlog_rows_per_s,
    baseline_row,
    batch_rate,
    rate_row,
    start_three_workers,
)
from testkit.spark_cluster import SparkCluster, unshare_available

REPEATS = 3
QUICK_REPEATS = 1


def run(quick: bool) -> dict[str, dict[str, float]]:
    why = unshare_available()
    if why is not None:
        raise RuntimeError(f"no cluster fixture here: {why}")
    rows_per_round, chunk = (50_000, 10_000) if quick else (500_000, 50_000)
    backlog: list[float] = []
    batch: list[float] = []
    with scratch("pipeline-cluster") as root:
        # Everything this run writes (store, staging, the cluster's own files) is under root.
        spark = SparkCluster(root / "spark-cluster", [root])
        worker_args = ("--data-path", "arrow", "--staging-dir", str(root / "stage"))
        with pipeline_rig(root, SETTINGS, spark=spark, worker_args=worker_args) as rig:
            start_three_workers(rig)
            # A first round of each, not counted: the JVMs (driver, executor) start cold, and
            # the rounds after it are the steady state both sides are compared in.
            backlog_rows_per_s(rig, rows_per_round, chunk, seed=299)
            batch_job_arrow_s(rig)
            for r in range(QUICK_REPEATS if quick else REPEATS):
                since = ends(rig)
                backlog.append(backlog_rows_per_s(rig, rows_per_round, chunk, seed=300 + r))
                batch.append(batch_rate(batch_job_arrow_s(rig, since), rows_per_round))
    base = summary(batch)["median"]
    return {
        "backlog_3_workers_arrow": rate_row(rows_per_round, backlog, base),
        "batch_job_arrow_same_input": baseline_row(batch),
    }
