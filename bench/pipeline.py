"""Pipeline throughput: rows per second through three workers, against one Spark batch job
over the same Parquet input on the same Spark Connect server.

Rig as in testkit.pipeline_rig (three coordinators, three workers, one local Spark Connect
server, local store, 8 partitions), with liveness timeouts long enough that a paused worker is not
declared dead. Each round has two measures on new input:

- `backlog` (the comparison with the batch job): the three workers are paused (SIGSTOP),
  the producer appends `rows` records, the workers are resumed (SIGCONT), and the clock runs
  from the resume until every partition's owner has processed the whole log. The input is
  all there when the clock starts, as it is for the batch job: this is what the workers cost
  to process it (their micro-batches at 0.2 s intervals, larger when behind, and the
  coordinator's view of offsets).
- `streaming`: the workers run while the producer appends `rows` records in chunks
  (`chunk` rows per produce call, one Parquet segment per partition per call, like a stream
  of arrivals); the clock runs from the first append until caught up, so it includes the
  appending (`produce_rows_per_s` beside it: the streaming figure cannot exceed it).

Baseline (`batch_job_same_input`, the ratios' denominator): one `Aggregator.batch_job` over
the round's backlog input (the segments appended for it, the rows the workers have just
processed), timed after a warm-up job on a new session, right after the workers' round.
`batch_job_all_input` (and `ratio_vs_all_input`) is one job over every segment appended so
far, compared by rate: it spreads the job's fixed costs over up to `2 * REPEATS` rounds of
input, so its rate is higher than over one round's. Repeated `REPEATS` times (once in quick
mode).
"""

from __future__ import annotations

import signal
import time

from bench.batch_job import batch_job_s, ends
from bench.harness import caught_up_s, pipeline_rig, scratch, summary
from pipeline.source import generate
from testkit.pipeline_rig import SETTINGS as RIG_SETTINGS
from testkit.pipeline_rig import PipelineRig

KEYS = 500
REPEATS = 3
QUICK_REPEATS = 1
# The rig's, with liveness long enough for a pause of the workers (seconds) to go unnoticed.
SETTINGS = {
    **RIG_SETTINGS,
    "lease_s": 30.0,
    "suspect_after_s": 30.0,
    "heartbeat_timeout_s": 60.0,
}


def produce_s(rig: PipelineRig, rows: int, chunk: int, seed: int) -> float:
    """Append `rows` generated records over `KEYS` keys, `chunk` per produce call (one
    segment per partition per call): the seconds it took."""
    data = generate(rows, KEYS, seed=seed)
    t0 = time.monotonic()
    for start in range(0, len(data), chunk):
        rig.producer.produce(data[start : start + chunk])
    return time.monotonic() - t0


def start_three_workers(rig: PipelineRig) -> None:
    """Workers w1-w3, caught up on the (empty) log."""
    for wid in ("w1", "w2", "w3"):
        rig.start_worker(wid)
    caught_up_s(rig)


def backlog_rows_per_s(rig: PipelineRig, rows: int, chunk: int, seed: int) -> float:
    """Pause the workers (SIGSTOP), append `rows`, resume them (SIGCONT): rows per second
    from the resume until every owner has processed the whole log."""
    for proc in rig.workers.values():
        proc.signal(signal.SIGSTOP)
    try:
        produce_s(rig, rows, chunk, seed)
    finally:
        for proc in rig.workers.values():
            proc.signal(signal.SIGCONT)
    return rows / caught_up_s(rig)


def run(quick: bool) -> dict[str, dict[str, float]]:
    rows_per_round, chunk = (50_000, 10_000) if quick else (1_000_000, 50_000)
    streaming: list[float] = []
    backlog: list[float] = []
    produce_times: list[float] = []
    batch: list[float] = []
    batch_all: list[float] = []
    with scratch("pipeline") as root, pipeline_rig(root, SETTINGS) as rig:
        start_three_workers(rig)
        total = 0
        for r in range(QUICK_REPEATS if quick else REPEATS):
            t0 = time.monotonic()
            produce_times.append(produce_s(rig, rows_per_round, chunk, seed=100 + r))
            caught_up_s(rig)
            streaming.append(rows_per_round / (time.monotonic() - t0))

            since = ends(rig)
            backlog.append(backlog_rows_per_s(rig, rows_per_round, chunk, seed=200 + r))
            total += 2 * rows_per_round
            batch.append(batch_rate(batch_job_s(rig, since), rows_per_round))
            batch_all.append(batch_rate(batch_job_s(rig), total))
    base, base_all = summary(batch)["median"], summary(batch_all)["median"]
    return {
        "backlog_3_workers": rate_row(rows_per_round, backlog, base, base_all),
        "streaming_3_workers": rate_row(
            rows_per_round,
            streaming,
            base,
            base_all,
            produce_rows_per_s=rows_per_round / summary(produce_times)["median"],
        ),
        "batch_job_same_input": baseline_row(batch, base_all),
        "batch_job_all_input": baseline_row(batch_all, base_all, base=base),
    }


def batch_rate(measured: tuple[float, int], total: int) -> float:
    """Rows/s of a batch job that took `measured` = (seconds, rows counted); it must have
    counted every row produced."""
    elapsed, counted = measured
    if counted != total:
        raise RuntimeError(f"batch job counted {counted} rows, produced {total}")
    return counted / elapsed


def rate_row(
    rows: int, values: list[float], base: float, base_all: float = 0.0, **extra: float
) -> dict[str, float]:
    """One measured case: median, min and max rows/s over the rounds, against `base` (the
    batch job over the same input) and `base_all` (over everything so far)."""
    s = summary(values)
    return {
        "rows": rows,
        "rows_per_s": s["median"],
        "min_rows_per_s": s["min"],
        "max_rows_per_s": s["max"],
        **extra,
        "baseline_rows_per_s": base,
        "ratio": s["median"] / base if base else 0.0,
        **({"ratio_vs_all_input": s["median"] / base_all} if base_all else {}),
    }


def baseline_row(batch: list[float], base_all: float = 0.0, base: float = 0.0) -> dict[str, float]:
    """A batch job's row: its rates, against the same-input baseline (itself unless
    `base` is given) and the all-input one."""
    row = rate_row(0, batch, base or summary(batch)["median"], base_all)
    del row["rows"]
    return row
