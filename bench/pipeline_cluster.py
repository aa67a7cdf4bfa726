"""Pipeline throughput on a Spark standalone cluster whose executors share no disk with the
workers (issue 12: "on the cluster fixture too").

The cluster is tests/spark_cluster.py's: a Master, one Worker (1 core, 512 MiB executor) in
its own mount namespace with tmpfs over the temp directories (so over this run's store), and
a Spark Connect server submitted to the Master (1 GiB driver). Three `ripple worker`s on the
`arrow` data path (they read their segments and send the rows through Spark Connect; nothing
passes through a disk), a local-directory store, the rig of bench/rig.py otherwise.

`backlog`: workers paused (SIGSTOP), `rows` records appended, workers resumed, timed until
every owner has processed the whole log, as in bench/pipeline.py. Baseline: one batch job on
the same Connect server over the round's rows (and, for `ratio_vs_all_input`, over every
row so far); its executors cannot read the store either, so it is timed from reading the
segments here (pyarrow) through `batch_job_table` (one Arrow local relation, one job).
Needs `unshare --mount` (root, or user namespaces); where it is not permitted the benchmark
fails saying so.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.harness import scratch, summary
from bench.pipeline import (
    SETTINGS,
    backlog_rows_per_s,
    baseline_row,
    batch_rate,
    rate_row,
    start_three_workers,
)
from bench.rig import Rig
from tests.spark_cluster import SparkCluster, unshare_available

REPEATS = 2


def run(quick: bool) -> dict[str, dict[str, float]]:
    why = unshare_available()
    if why is not None:
        raise RuntimeError(f"no cluster fixture here: {why}")
    rows_per_round, chunk = (100_000, 10_000) if quick else (500_000, 50_000)
    backlog: list[float] = []
    batch: list[float] = []
    batch_all: list[float] = []
    with scratch("pipeline-cluster") as root:
        spark = SparkCluster(root / "spark-cluster", [Path(tempfile.gettempdir()), root])
        rig = Rig(
            root,
            SETTINGS,
            spark=spark,
            worker_args=("--data-path", "arrow", "--staging-dir", str(root / "stage")),
        )
        try:
            start_three_workers(rig)
            total = 0
            for r in range(REPEATS):
                since = rig.ends()
                backlog.append(backlog_rows_per_s(rig, rows_per_round, chunk, seed=300 + r))
                total += rows_per_round
                batch.append(batch_rate(rig.batch_job_arrow_s(since), rows_per_round))
                batch_all.append(batch_rate(rig.batch_job_arrow_s(), total))
        finally:
            rig.close()
    base, base_all = summary(batch)["median"], summary(batch_all)["median"]
    return {
        "backlog_3_workers_arrow": rate_row(rows_per_round, backlog, base, base_all),
        "batch_job_arrow_same_input": baseline_row(batch, base_all),
        "batch_job_arrow_all_input": baseline_row(batch_all, base_all, base=base),
    }
