"""The Spark Connect driver's heap over many `arrow` batches: flat with the plan cache off.

One local Spark Connect server per case (driver 1 GiB, as `ripple up` starts it); one
Aggregator session sends `batches` Arrow batches of `ROWS` rows (about 2.4 MB each, over the
1 MiB local-relation threshold, so they travel as chunked artifacts as real batches do) and
collects the aggregates, as the worker's `arrow` path does. The heap is read with OpenJDK's
`jcmd <pid> GC.run` (a full collection) then `jcmd <pid> GC.heap_info` ("used"), after a
warm-up of `WARMUP` batches and again at the end. `growth` = end / after warm-up. Baseline
row: the same with `spark.connect.session.planCache.enabled=true` (Spark's default).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pyarrow as pa

from bench.harness import scratch
from pipeline.aggregate import PLAN_CACHE_CONF, Aggregator
from pipeline.spark_server import SparkConnectServer

ROWS = 100_000
WARMUP = 20
JCMD_TIMEOUT_S = 60.0


def _heap_used_mb(pid: int) -> float:
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        raise RuntimeError("jcmd (OpenJDK) is not on PATH")
    subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=JCMD_TIMEOUT_S)
    out = subprocess.run(
        [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=JCMD_TIMEOUT_S
    ).stdout
    match = re.search(r"used (\d+)K", out)
    if match is None:
        raise RuntimeError(f"no heap figure in jcmd output: {out[:300]}")
    return int(match.group(1)) / 1024


def _batch(n: int) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([f"SYM{(i * 7 + n) % 500:04d}" for i in range(ROWS)], pa.string()),
            "value": pa.array([float(i % 977) / 64 for i in range(ROWS)], pa.float64()),
            "offset": pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64()),
            "partition": pa.array([i % 8 for i in range(ROWS)], pa.int32()),
        }
    )


def _case(root: str, batches: int, plan_cache: bool) -> dict[str, float]:
    server = SparkConnectServer(
        root, extra_conf={"spark.connect.session.planCache.enabled": str(plan_cache).lower()}
    )
    url = server.start()
    agg = Aggregator(url, own_session=True)
    # The Aggregator turns the cache off for its session; the baseline turns it back on.
    agg.spark.conf.set(PLAN_CACHE_CONF, str(plan_cache).lower())
    try:
        assert server.pid is not None
        tables = [_batch(n) for n in range(4)]  # distinct contents, built once
        started = 0.0
        warm = 0.0
        for n in range(batches):
            if n == WARMUP:
                warm = _heap_used_mb(server.pid)
                started = time.monotonic()
            table = tables[n % 4].set_column(
                2, "offset", pa.array(range(n * ROWS, (n + 1) * ROWS), pa.int64())
            )
            agg.aggregate_table(table)
        elapsed = time.monotonic() - started
        end = _heap_used_mb(server.pid)
    finally:
        agg.close()
        server.stop()
    return {
        "batches": batches,
        "mb_per_batch": tables[0].nbytes / 1e6,
        "heap_after_warmup_mb": warm,
        "heap_end_mb": end,
        "growth": end / warm if warm else 0.0,
        "batches_per_s": (batches - WARMUP) / elapsed if elapsed else 0.0,
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    batches = 100 if quick else 500
    with scratch("driver-heap") as root:
        off = _case(str(root / "off"), batches, plan_cache=False)
        on = _case(str(root / "on"), batches if quick else 150, plan_cache=True)
    return {"plan_cache_off": off, "plan_cache_on": on}
