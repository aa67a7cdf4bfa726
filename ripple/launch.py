"""The command lines that start Ripple's own processes: a coordinator node and a pipeline
worker.

`ripple up`, the test rigs and the benchmarks all start their children with these, so each
flag is spelled in one place. A child runs `ripple.cli` on this interpreter
(`sys.executable`), so it runs the same install as the process that starts it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["coordinator_argv", "worker_argv"]


def coordinator_argv(config_path: str | Path, node_id: str) -> list[str]:
    """`ripple coordinator`: node `node_id` of the cluster file at `config_path`."""
    return [
        sys.executable,
        "-m",
        "ripple.cli",
        "coordinator",
        "--config",
        str(config_path),
        "--node-id",
        node_id,
    ]


def worker_argv(
    *,
    worker_id: str,
    listen: str,
    store: str,
    spark_remote: str,
    coordinators: Sequence[str],
    batch_interval_s: float | None = None,
    max_keys_per_partition: int | None = None,
    s3_endpoint: str | None = None,
    state_dir: str | Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """`ripple worker` serving on `listen` (HOST:PORT). A setting left None is the worker's
    default; `extra` are further `ripple worker` flags, placed after the named ones so a
    flag given there twice takes its last value."""
    argv = [
        sys.executable,
        "-m",
        "ripple.cli",
        "worker",
        "--worker-id",
        worker_id,
        "--listen",
        listen,
        "--store",
        store,
        "--spark-remote",
        spark_remote,
    ]
    if batch_interval_s is not None:
        argv += ["--batch-interval-s", str(batch_interval_s)]
    if max_keys_per_partition is not None:
        argv += ["--max-keys-per-partition", str(max_keys_per_partition)]
    if s3_endpoint:
        argv += ["--s3-endpoint", s3_endpoint]
    if state_dir is not None:
        argv += ["--state-dir", str(state_dir)]
    argv += extra
    for url in coordinators:
        argv += ["--coordinator", url]
    return argv
