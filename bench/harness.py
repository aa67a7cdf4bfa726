"""Shared plumbing of the process benchmarks: temp dirs, the clusters they compare, the
pipeline rig with its Spark, child runs, statistics and the wrk client.

Every child process is a `testkit.process.Proc` (tracked by PID, ended by that PID:
SIGTERM, then SIGKILL after a bound; never by name). Ripple's clusters are
`testkit.cluster.Cluster`, the same three real `ripple coordinator` processes the
integration tests use; the baseline is `raw_cluster`, three `bench.raw_node` processes on
the same `testkit.nodes.NodeCluster`. Every wait here is bounded.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from bench.stats import percentile
from pipeline.spark_server import SparkConnectServer
from shared.ports import free_ports
from testkit.nodes import Healths, NodeCluster, NodeProgram
from testkit.pipeline_rig import PipelineRig
from testkit.process import python_argv

__all__ = [
    "CATCH_UP_TIMEOUT_S",
    "caught_up_s",
    "paused",
    "percentile",
    "pipeline_rig",
    "rate_columns",
    "raw_cluster",
    "register_workers",
    "run_json",
    "scratch",
    "summary",
    "wrk",
    "wrk_duration_s",
]

# Absolute: the scripts find report.lua beside them by their own path.
WRK_SCRIPTS = Path(__file__).resolve().parent / "wrk"
WRK_TIMEOUT_S = 10.0  # per request; a slower answer counts as an error

CHILD_TIMEOUT_S = 600.0
# After `paused`: longer than the longest election timeout (raft_max_timeout_s, 0.6 s), so an
# election the pause set off is over before the next run resolves its leader.
RESUME_SETTLE_S = 1.0
# The pipeline benchmarks move more rows than the tests: a longer bound on catching up.
CATCH_UP_TIMEOUT_S = 180.0
CAUGHT_UP_POLL_S = 0.05


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temp dir removed on exit, whatever happened."""
    root = Path(tempfile.mkdtemp(prefix=f"ripple-bench-{prefix}-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def paused(clusters: Sequence[NodeCluster]) -> Iterator[None]:
    """Every process of `clusters` stopped (SIGSTOP) for the block and continued after, even
    on error: a run measures its own cluster, not the idle ones beside it, which still take
    their share of the cores. A continued cluster elects again; `RESUME_SETTLE_S`. Nothing
    is stopped when `clusters` is empty."""
    procs = [p for c in clusters for p in c.procs.values() if p.alive()]
    for proc in procs:
        proc.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for proc in procs:
            proc.signal(signal.SIGCONT)
        time.sleep(RESUME_SETTLE_S)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values) if values else 0.0,
        "min": min(values, default=0.0),
        "max": max(values, default=0.0),
    }


def rate_columns(runs: Sequence[dict[str, Any]], unit: str, base_per_s: float) -> dict[str, float]:
    """The columns of repeated load runs (each with `ops_per_s`, `p50_ms`, `p99_ms`,
    `errors`): median, min and max rate as `{unit}_per_s`, the median run's latencies,
    errors summed, and the ratio of the median rate to `base_per_s`."""
    per_s = [r["ops_per_s"] for r in runs]
    med = sorted(runs, key=lambda r: float(r["ops_per_s"]))[len(runs) // 2]
    median = statistics.median(per_s)
    return {
        f"{unit}_per_s": median,
        f"min_{unit}_per_s": min(per_s),
        f"max_{unit}_per_s": max(per_s),
        "p50_ms": med["p50_ms"],
        "p99_ms": med["p99_ms"],
        "errors": sum(r["errors"] for r in runs),
        "ratio": median / base_per_s if base_per_s else 0.0,
    }


def register_workers(url: str, workers: int, out: Path, address: str | None = None) -> Any:
    """Register `workers` workers at `url` through the real API, from `bench.load` in its
    own process, and write their "worker_id incarnation token" lines to `out`; `address` is
    where they say they listen (default: a port nothing answers)."""
    argv = ["-m", "bench.load", "register", "--url", url, "--workers", str(workers)]
    argv += ["--out", str(out)] + (["--address", address] if address else [])
    return run_json(argv)


def run_json(args: Sequence[str], timeout_s: float = CHILD_TIMEOUT_S) -> Any:
    """Run `python <args>` to completion (bounded) and parse the last stdout line as JSON.

    `subprocess.run` tracks the child by PID and kills exactly it on timeout.
    """
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_ready(healths: Healths) -> str | None:
    """A raw node names no leader: agreed is exactly one node ready to lead."""
    ready = [n for n, h in healths.items() if h["ready"]]
    return ready[0] if len(ready) == 1 else None


def raw_cluster(root: Path, nodes: int = 3) -> NodeCluster:
    """`nodes` `bench.raw_node` processes (ids raw0, raw1, ...): the bare-pysyncobj baseline,
    with the coordinator's Raft timeouts. A write is `POST /write`."""
    ports = free_ports(2 * nodes)
    rafts = [f"127.0.0.1:{ports[2 * i]}" for i in range(nodes)]
    https = [f"127.0.0.1:{ports[2 * i + 1]}" for i in range(nodes)]
    ids = [f"raw{i}" for i in range(nodes)]

    def argv(node_id: str) -> list[str]:
        return python_argv(
            "-m",
            "bench.raw_node",
            "--index",
            str(ids.index(node_id)),
            "--raft",
            ",".join(rafts),
            "--http",
            ",".join(https),
            "--dir",
            str(root / "raw"),
        )

    program = NodeProgram(argv=argv, health_path="/health", agreed_leader=_one_ready)
    return NodeCluster(root, program, {n: f"http://{h}" for n, h in zip(ids, https, strict=True)})


class SparkLike(Protocol):
    def start(self) -> str: ...

    def stop(self) -> None: ...


@contextlib.contextmanager
def pipeline_rig(
    root: Path,
    settings: dict[str, Any] | None = None,
    *,
    spark: SparkLike | None = None,
    worker_args: tuple[str, ...] = (),
) -> Iterator[PipelineRig]:
    """A started `PipelineRig` (coordinators ready, no worker yet) on a local-directory store
    under `root`, with its own Spark: a local Spark Connect server unless given another
    (say `testkit.spark_cluster`'s). Everything is stopped on the way out."""
    server: SparkLike = spark or SparkConnectServer(str(root / "spark"))
    try:
        url = server.start()
        rig = PipelineRig(
            root, f"file://{root / 'store'}", url, settings=settings, worker_args=worker_args
        )
        try:
            rig.start()
            yield rig
        finally:
            rig.stop()
    finally:
        server.stop()


def caught_up_s(rig: PipelineRig, timeout_s: float = CATCH_UP_TIMEOUT_S) -> float:
    """Seconds until every partition's owner has processed the whole source log."""
    t0 = time.monotonic()
    rig.wait_caught_up(timeout_s, CAUGHT_UP_POLL_S)
    return time.monotonic() - t0


def wrk_duration_s(quick: bool) -> float:
    """How long one wrk run of the write-path benchmarks (writes, checkpoints) lasts."""
    return 1.0 if quick else 3.0


def wrk(url: str, script: str, duration_s: float, connections: int, *args: str) -> dict[str, Any]:
    """One run of `wrk` (Debian's package; one thread, `connections` connections) with a
    script of bench/wrk, which prints a JSON line (report.lua); `args` go to its `init`.
    Non-2xx answers and socket errors are `errors`; ops_per_s counts the 2xx only."""
    argv = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, int(duration_s))}s",
        "--timeout",
        f"{int(WRK_TIMEOUT_S)}s",
        "-s",
        str(WRK_SCRIPTS / script),
        url,
    ]
    if args:
        argv += ["--", *args]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=duration_s + CHILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    out = json.loads(lines[-1])
    seconds = out["duration_us"] / 1e6
    ok = out["requests"] - out["status_errors"]
    return {
        "ops_per_s": ok / seconds if seconds else 0.0,
        "p50_ms": out["p50_us"] / 1000,
        "p99_ms": out["p99_us"] / 1000,
        "errors": out["status_errors"] + out["socket_errors"],
    }
