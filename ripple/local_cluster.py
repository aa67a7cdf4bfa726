"""`ripple up`: a local cluster on this machine, run in the foreground until Ctrl-C.

Owns the local cluster file (`<data-dir>/cluster.toml`: free 127.0.0.1 ports, a generated
cluster secret, admin token and join token; mode 0600 from its first byte) and the start-up
order: three coordinators, a ready leader, then one Spark Connect server and the workers.
Every process it starts is a child of `ripple.supervisor.Children`, stopped by PID on
Ctrl-C, SIGTERM or any failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

from coordinator.client import CoordinatorClient
from coordinator.config import ClusterConfig, NodeSpec
from coordinator.config_file import load_config, render_toml
from coordinator.config_rules import validate as validate_config
from ripple.launch import coordinator_argv, worker_argv
from ripple.supervisor import Children
from ripple.tables import render_status
from shared.clock import monotonic_s
from shared.errors import ClientError, RippleError
from shared.ports import free_ports

__all__ = ["cluster_file", "up", "up_config", "write_private"]

# The most recorded pipelines' partitions each `ripple up` worker takes.
UP_WORKER_SLOTS = 64

UP_READY_TIMEOUT_S = 60.0
NODES = 3


def cluster_file(data_dir: str) -> Path:
    return Path(data_dir) / "cluster.toml"


def up_config(data_dir: str, nodes: int, overrides: dict[str, Any]) -> Path:
    """Write (or reuse) the local cluster file with a generated secret and admin token."""
    import secrets

    path = cluster_file(data_dir)
    if path.exists():
        return path
    ports = free_ports(2 * nodes)
    specs = tuple(
        NodeSpec(
            id=f"n{i + 1}", raft=f"127.0.0.1:{ports[2 * i]}", http=f"127.0.0.1:{ports[2 * i + 1]}"
        )
        for i in range(nodes)
    )
    config = ClusterConfig(
        cluster_secret=secrets.token_urlsafe(32),
        admin_token=secrets.token_urlsafe(24),
        join_token=secrets.token_urlsafe(24),
        data_dir=str(Path(data_dir).resolve()),
        # What the local workers get as --store: checkpoint references are checked against it.
        store=f"file://{(Path(data_dir) / 'store').resolve()}",
        nodes=specs,
        **overrides,
    )
    validate_config(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, render_toml(config))
    return path


def write_private(path: Path, text: str) -> None:
    """Write a secrets-bearing file that is 0600 from its first byte: created under a
    temporary name with the mode given to open(2) (a write then chmod left it world-readable
    for a moment), then renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


async def _wait_ready(urls: list[str], timeout_s: float) -> dict[str, Any]:
    async with CoordinatorClient(urls, deadline_s=2.0, timeout_s=2.0) as client:
        deadline = monotonic_s(client.clock) + timeout_s
        while monotonic_s(client.clock) < deadline:
            try:
                health = await client.get("/v1/health")
                if health.get("leader_id") and health["cluster"]["total_partitions"] > 0:
                    return health
            except ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RippleError(f"cluster not ready within {timeout_s} s", code="timeout")


def up(data_dir: str, workers: int, partitions: int | None, demo: bool) -> int:
    """Start the local cluster, print where everything is, run the demo if asked, then
    watch the children until Ctrl-C or SIGTERM; every child is stopped on the way out."""
    overrides: dict[str, Any] = {}
    if partitions is not None:
        overrides["total_partitions"] = partitions
    if workers > 0:
        # Wait for every local worker before the first assignment, so it starts balanced.
        overrides["min_cluster_size"] = workers
    path = up_config(data_dir, NODES, overrides)
    config = load_config(path)  # RIPPLE_* env applies here as in the coordinators it starts
    children = Children(Path(config.data_dir) / "logs")
    stop = {"now": False}

    def on_signal(_sig: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for n in config.nodes:
            children.start(n.id, coordinator_argv(path, n.id))
        urls = [n.url for n in config.nodes]
        health = asyncio.run(_wait_ready(urls, UP_READY_TIMEOUT_S))
        spark_url = None
        if workers > 0:
            spark_url = _start_pipeline(workers, config, children, urls)
        print(
            f"Ripple is up ({len(config.nodes)} coordinators, {workers} workers). "
            f"Cluster file: {path}"
        )
        pids = children.pids()
        for n in config.nodes:
            print(f"  {n.id}  {n.url}  (raft {n.raft}, pid {pids[n.id]})")
        print(f"leader: {health['leader_id']}   logs: {children.log_dir}")
        print(f"dashboard: {config.nodes[0].url}/ui (any node serves it)")
        started = [f"{name} pid {pid}" for name, pid in pids.items() if name.startswith("w")]
        if started:
            print("workers: " + ", ".join(started))
        if spark_url is not None:
            print(f"spark connect: {spark_url}   store: {config.store}")
            print(
                f"try: ripple produce --generate 10000 --data-dir {data_dir}  then  "
                f"ripple get SYM0001 --data-dir {data_dir}"
            )
        status = asyncio.run(_fetch_status(urls))
        print(render_status(status))
        print("Ctrl-C stops every process started here.")
        sys.stdout.flush()
        if demo and spark_url is not None:
            from ripple.demo import run_demo

            procs = {name: proc for name, proc in children.procs if name.startswith("w")}
            try:
                asyncio.run(run_demo(config, urls, spark_url, procs))
            except (RippleError, TimeoutError) as exc:
                print(f"[demo] stopped: {exc}")
            sys.stdout.flush()
            # The Spark Connect client the demo used may have replaced our handlers.
            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)
        children.watch(lambda: stop["now"])
    finally:
        children.stop_all()
        print("stopped.")
    return 0


def _start_pipeline(
    workers: int, config: ClusterConfig, children: Children, urls: list[str]
) -> str:
    """One local Spark Connect server shared by every worker, then the workers."""
    from pipeline.spark_server import SparkConnectServer

    spark = SparkConnectServer(str(children.log_dir))
    children.spark = spark
    spark_url = str(spark.start())
    store = config.store or f"file://{(Path(config.data_dir) / 'store').resolve()}"
    ports = free_ports(workers)
    for i in range(workers):
        argv = worker_argv(
            worker_id=f"w{i + 1}",
            listen=f"127.0.0.1:{ports[i]}",
            store=store,
            spark_remote=spark_url,
            coordinators=urls,
            max_keys_per_partition=config.max_keys_per_partition,
            # Kept across `ripple up` runs: a worker started again rejoins as itself.
            state_dir=Path(config.data_dir) / "workers" / f"w{i + 1}",
            # Every local worker runs the recorded pipelines too (a pool of no labels).
            extra=["--slots", str(UP_WORKER_SLOTS)],
        )
        env = {"PYSPARK_PYTHON": sys.executable, "RIPPLE_JOIN_TOKEN": config.join_token}
        # SIGINT: a worker stops without draining (the whole local cluster is going down).
        children.start(f"w{i + 1}", argv, env=env, stop_signal=signal.SIGINT)
    return spark_url


async def _fetch_status(urls: list[str]) -> dict[str, Any]:
    async with CoordinatorClient(urls) as client:
        return await client.get("/v1/status")
