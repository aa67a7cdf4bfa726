"""The Spark Connect driver's heap over many `arrow` batches: flat with the plan cache off.

One local Spark Connect server per case (driver 1 GiB, as `ripple up` starts it); one
Aggregator session sends `batches` Arrow batches of `ROWS` rows (about 2.4 MB each, over the
1 MiB local-relation threshold, so they travel as chunked artifacts as real batches do) and
collects the aggregates, as the worker's `arrow` path does. The heap is read with OpenJDK's
`jcmd <pid> GC.run` (a full collection) then `jcmd <pid> GC.heap_info` ("used"), after a
warm-up of `WARMUP` batches and again at the end. `growth` = end / after warm-up. The
worker's way renews its session every 50 arrow batches (``ARROW_BATCHES_PER_SESSION_MAX``):
Connect keeps every local relation over 1 MiB per session, plan cache or not. Baselines:
one session for every batch (cache off), and Spark's default cache on.
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
# Quick mode checks that the benchmark runs: fewer batches, sessions renewed as often, so
# it still crosses renewals the way the worker's sessions do.
QUICK_BATCHES = 20
QUICK_WARMUP = 5
QUICK_BATCHES_PER_SESSION = 8
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


def _case(
    root: str,
    batches: int,
    plan_cache: bool,
    renew: bool,
    warmup: int = WARMUP,
    batches_per_session: int | None = None,
) -> dict[str, float]:
    server = SparkConnectServer(
        root, extra_conf={"spark.connect.session.planCache.enabled": str(plan_cache).lower()}
    )
    url = server.start()
    agg = Aggregator(url, own_session=True)
    # The Aggregator turns the cache off for its session; the baseline turns it back on.
    agg.spark.conf.set(PLAN_CACHE_CONF, str(plan_cache).lower())
    if not renew:
        agg.arrow_batches_per_session_max = batches + 1
    elif batches_per_session is not None:
        agg.arrow_batches_per_session_max = batches_per_session
    try:
        assert server.pid is not None
        tables = [_batch(n) for n in range(4)]  # distinct contents, built once
        started = 0.0
        warm = 0.0
        for n in range(batches):
            if n == warmup:
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
        "batches_per_s": (batches - warmup) / elapsed if elapsed else 0.0,
        "sessions_renewed": agg.sessions_renewed,
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    """Quick: only what the worker does (cache off, sessions renewed), over `QUICK_BATCHES`
    batches with a new session every `QUICK_BATCHES_PER_SESSION`. Full: 500 batches with
    the worker's renewal every 50 arrow batches, and the two baselines: one session for all
    500 with the cache off, 150 with Spark's default (on)."""
    if quick:
        with scratch("driver-heap") as root:
            case = _case(
                str(root / "w"),
                QUICK_BATCHES,
                plan_cache=False,
                renew=True,
                warmup=QUICK_WARMUP,
                batches_per_session=QUICK_BATCHES_PER_SESSION,
            )
            return {"worker_default": case}
    with scratch("driver-heap") as root:
        return {
            "worker_default": _case(str(root / "w"), 500, plan_cache=False, renew=True),
            "one_session": _case(str(root / "off"), 500, plan_cache=False, renew=False),
            "plan_cache_on": _case(str(root / "on"), 150, plan_cache=True, renew=False),
        }
