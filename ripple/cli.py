"""The `ripple` command.

  ripple coordinator --config FILE --node-id ID     run one coordinator node (foreground)
  ripple up [--data-dir DIR] [--workers N]          a local cluster; Ctrl-C stops it all
  ripple status|partitions|workers|migrations       read from any node
  ripple reassign [--dry-run] [--move P:WORKER]     admin: balance or explicit moves
  ripple drain WORKER                               admin: move a worker's partitions away
  ripple worker --coordinator URL ... --store URI   run one pipeline worker
  ripple produce --file F | --generate N            append records to the source log
  ripple get KEY                                    a key's state from its owning worker

Every subcommand that talks to the coordinators takes `--coordinator URL` (repeatable;
`--url` is the same flag). URLs and the admin token default to `RIPPLE_URL` (comma-separated)
/ `RIPPLE_ADMIN_TOKEN`, else to the cluster file `ripple up` writes (`<data-dir>/cluster.toml`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.client import CoordinatorClient
from coordinator.config import (
    SCALAR_KEYS,
    ClusterConfig,
    NodeSpec,
    check_bind,
    load_config,
    render_toml,
)
from shared.errors import ClientError, ConfigError, RippleError
from shared.ports import free_ports

log = logging.getLogger("ripple")

UP_READY_TIMEOUT_S = 60.0
CHILD_STOP_TIMEOUT_S = 10.0
WATCH_MAX_S = 3600.0
WATCH_EVERY_S = 0.5
DEFAULT_DATA_DIR = "./ripple-data"


# -- helpers ---------------------------------------------------------------------------------


def _cluster_file(data_dir: str) -> Path:
    return Path(data_dir) / "cluster.toml"


def _urls(args: argparse.Namespace) -> list[str]:
    if args.coordinator:
        return list(args.coordinator)
    env = os.environ.get("RIPPLE_URL")
    if env:
        return [u for u in env.split(",") if u]
    data_dir = getattr(args, "data_dir", None)  # `ripple worker` has no cluster file
    path = _cluster_file(data_dir) if data_dir else None
    if path is not None and path.exists():
        cfg = load_config(path, env={}, validate=False)
        return [n.url for n in cfg.nodes]
    raise RippleError(
        "no coordinator URL: pass --coordinator URL, set RIPPLE_URL, or run `ripple up` first",
        code="usage",
        status=2,
        field="coordinator",
    )


def _tls_ca(args: argparse.Namespace) -> str | None:
    """The CA bundle https:// coordinators are verified against: --tls-ca (RIPPLE_TLS_CA),
    else the local cluster file's tls_ca, else the system's roots (None)."""
    if getattr(args, "tls_ca", None):
        return str(args.tls_ca)
    data_dir = getattr(args, "data_dir", None)
    path = _cluster_file(data_dir) if data_dir else None
    if path is not None and path.exists():
        return load_config(path, env={}, validate=False).tls_ca or None
    return None


def _client(args: argparse.Namespace, token: str | None = None) -> CoordinatorClient:
    return CoordinatorClient(_urls(args), token=token, ca_file=_tls_ca(args))


def _admin_token(args: argparse.Namespace) -> str:
    token = getattr(args, "admin_token", None) or os.environ.get("RIPPLE_ADMIN_TOKEN")
    if token:
        return str(token)
    path = _cluster_file(args.data_dir)
    if path.exists():
        return load_config(path, env={}, validate=False).admin_token
    raise RippleError(
        "admin token needed: --admin-token or RIPPLE_ADMIN_TOKEN", code="usage", status=2
    )


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[("-" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _print(obj: dict[str, Any], as_json: bool, render: Any) -> None:
    if as_json:
        print(json.dumps(obj, indent=2, sort_keys=True))
    else:
        print(render(obj))


# -- read commands ---------------------------------------------------------------------------


def render_status(s: dict[str, Any]) -> str:
    c = s["cluster"]
    lines = [
        f"node {s['node_id']} ({s['role']}), leader {s['leader_id']}, term {s['term']}, "
        f"applied {s['applied_index']}{' (stale)' if s['stale'] else ''}",
        f"workers: {c['active_workers']} active / {c['total_workers']} total   "
        f"partitions: {c['total_partitions']}   generation: {c['generation']}   "
        f"migrations in flight: {s['migrations_in_flight']}",
        "partitions by status: "
        + ", ".join(f"{k}={v}" for k, v in sorted(s["partitions_by_status"].items())),
    ]
    return "\n".join(lines)


def render_partitions(s: dict[str, Any]) -> str:
    rows = [
        [
            p["partition"],
            p["owner"],
            p["epoch"],
            p["status"],
            p.get("migration"),
            None if p["checkpoint"] is None else p["checkpoint"]["offset"],
            _failing_cell(p.get("failing")),
            None if not p.get("stuck") else p["stuck"][:80],
        ]
        for p in s["partitions"]
    ]
    return _table(
        rows,
        ["PARTITION", "OWNER", "EPOCH", "STATUS", "MIGRATION", "CKPT_OFFSET", "FAILING", "STUCK"],
    )


def _failing_cell(failing: dict[str, Any] | None) -> str | None:
    """ "3x: <error>" for a partition whose batches keep failing (error cut to fit a row)."""
    return None if not failing else f"{failing['failures']}x: {failing['error'][:60]}"


def render_workers(s: dict[str, Any]) -> str:
    rows = [
        [
            w["worker_id"],
            w["state"],
            w["incarnation"],
            w["partitions"],
            w.get("liveness"),
            w.get("load"),
            w.get("failing_partitions"),
            w["address"],
        ]
        for w in s["workers"]
    ]
    return _table(
        rows, ["WORKER", "STATE", "INC", "PARTITIONS", "LIVENESS", "LOAD", "FAILING", "ADDRESS"]
    )


def render_migrations(s: dict[str, Any]) -> str:
    rows = [
        [x["id"], x["partition"], x["source"], x["target"], x["phase"], x["reason"], x.get("note")]
        for x in s["migrations"]
    ]
    return f"in flight: {s['in_flight']}\n" + _table(
        rows, ["ID", "PARTITION", "FROM", "TO", "PHASE", "REASON", "NOTE"]
    )


async def _read(args: argparse.Namespace, path: str, render: Any) -> int:
    async with _client(args) as client:
        body = await client.get(path, consistent=args.consistent)
    _print(body, args.json, render)
    return 0


async def cmd_migrations(args: argparse.Namespace) -> int:
    if not args.watch:
        return await _read(args, "/v1/migrations", render_migrations)
    deadline = time.monotonic() + WATCH_MAX_S
    async with _client(args) as client:
        total = None
        while time.monotonic() < deadline:
            body = await client.get("/v1/migrations")
            left = body["in_flight"]
            total = max(total or 0, left)
            done = (total - left) if total else 0
            width = 30
            filled = width if not total else int(width * done / total)
            print(
                f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total or 0} done, "
                f"{left} in flight",
                end="",
                flush=True,
            )
            if left == 0:
                print()
                return 0
            await asyncio.sleep(WATCH_EVERY_S)
    print()
    return 1


async def cmd_reassign(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {"dry_run": args.dry_run}
    if args.move:
        moves = []
        for spec in args.move:
            part, _, worker = spec.partition(":")
            if not part.isdigit() or not worker:
                raise RippleError(
                    f"--move wants PARTITION:WORKER, got {spec!r}", code="usage", status=2
                )
            moves.append({"partition": int(part), "to": worker})
        payload["moves"] = moves
    else:
        payload["strategy"] = "balance"
    async with _client(args, token=_admin_token(args)) as client:
        body = await client.post("/v1/admin/reassign", payload)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        rows = [[x.get("id"), x["partition"], x["from"], x["to"]] for x in body["migrations"]]
        print(("dry run: " if body["dry_run"] else "") + f"{len(rows)} moves")
        if rows:
            print(_table(rows, ["ID", "PARTITION", "FROM", "TO"]))
    return 0


async def cmd_drain(args: argparse.Namespace) -> int:
    async with _client(args, token=_admin_token(args)) as client:
        body = await client.post(f"/v1/workers/{args.worker}/drain", {})
    print(f"{body['worker_id']}: {body['state']}, {len(body['migrations'])} migrations planned")
    return 0


# -- pipeline ---------------------------------------------------------------------------------


def _store_uri(args: argparse.Namespace) -> str:
    if args.store:
        return str(args.store)
    return f"file://{(Path(args.data_dir) / 'store').resolve()}"


async def _total_partitions(args: argparse.Namespace) -> int:
    if getattr(args, "partitions", None):
        return int(args.partitions)
    async with _client(args) as client:
        return int((await client.get("/v1/health"))["cluster"]["total_partitions"])


def cmd_produce(args: argparse.Namespace) -> int:
    from pipeline.source import Producer, generate, load_jsonl
    from pipeline.store import open_store

    if (args.file is None) == (args.generate is None):
        raise RippleError("give exactly one of --file or --generate", code="usage", status=2)
    total = asyncio.run(_total_partitions(args))
    store = open_store(_store_uri(args), args.s3_endpoint)
    records = (
        list(load_jsonl(args.file))
        if args.file is not None
        else generate(args.generate, args.keys, args.seed)
    )
    firsts = Producer(store, total).produce(records)
    print(
        f"produced {len(records)} records into {len(firsts)} partitions of {total} "
        f"({_store_uri(args)})"
    )
    return 0


async def cmd_get(args: argparse.Namespace) -> int:
    from coordinator.client import KeyRouter

    async with _client(args) as client:
        body = await KeyRouter(client).get(args.key)
    if args.json:
        print(json.dumps(body, sort_keys=True))
    else:
        print(
            _table(
                [
                    [
                        body[k]
                        for k in (
                            "key",
                            "count",
                            "sum",
                            "min",
                            "max",
                            "last",
                            "partition",
                            "epoch",
                            "offset",
                        )
                    ]
                ],
                ["KEY", "COUNT", "SUM", "MIN", "MAX", "LAST", "PARTITION", "EPOCH", "OFFSET"],
            )
        )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from pipeline.aggregate import identity, load_transform
    from pipeline.store import open_store
    from pipeline.worker import WorkerSettings, run_worker

    if not args.spark_remote:
        raise RippleError(
            "--spark-remote sc://HOST:PORT is required (ripple up starts a local "
            "Spark Connect server and passes it)",
            code="usage",
            status=2,
        )
    check_bind(args.listen, "listen", allow_wildcard=args.allow_wildcard_bind)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together", field="tls_cert")
    settings = WorkerSettings(
        coordinators=tuple(_urls(args)),
        worker_id=args.worker_id,
        listen=args.listen,
        spark_remote=args.spark_remote,
        advertise=args.advertise,
        batch_interval_s=args.batch_interval_s,
        max_keys_per_partition=args.max_keys_per_partition,
        staging_dir=args.staging_dir,
        join_token=args.join_token,
        data_path=args.data_path,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=_tls_ca(args),
    )
    transform = load_transform(args.transform) if args.transform else identity
    return run_worker(settings, open_store(args.store, args.s3_endpoint), transform)


# -- processes -------------------------------------------------------------------------------


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator.service.server import run

    overrides = {k: getattr(args, k) for k in SCALAR_KEYS if getattr(args, k, None) is not None}
    config = load_config(args.config, overrides=overrides)
    config.node(args.node_id)
    run(config, args.node_id)
    return 0


def up_config(data_dir: str, nodes: int, overrides: dict[str, Any]) -> Path:
    """Write (or reuse) the local cluster file with a generated secret and admin token."""
    import secrets

    path = _cluster_file(data_dir)
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
    config.validate()
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


class Children:
    """Processes started by `ripple up`, tracked and stopped by PID only."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stop_signals: dict[int, int] = {}
        self.spark: Any = None  # pipeline.spark_server.SparkConnectServer, stopped by PID

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        out.close()
        self.procs.append((name, proc))
        self.stop_signals[proc.pid] = stop_signal

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(self.stop_signals.get(proc.pid, signal.SIGTERM))
        deadline = time.monotonic() + CHILD_STOP_TIMEOUT_S
        for name, proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) did not stop; killing it", name, proc.pid)
                proc.kill()
                proc.wait(CHILD_STOP_TIMEOUT_S)


async def _wait_ready(urls: list[str], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    async with CoordinatorClient(urls, deadline_s=2.0, timeout_s=2.0) as client:
        while time.monotonic() < deadline:
            try:
                health = await client.get("/v1/health")
                if health.get("leader_id") and health["cluster"]["total_partitions"] > 0:
                    return health
            except ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RippleError(f"cluster not ready within {timeout_s} s", code="timeout", status=1)


def cmd_up(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    if args.partitions is not None:
        overrides["total_partitions"] = args.partitions
    if args.workers > 0:
        # Wait for every local worker before the first assignment, so it starts balanced.
        overrides["min_cluster_size"] = args.workers
    path = up_config(args.data_dir, 3, overrides)
    config = load_config(path)  # RIPPLE_* env applies here as in the coordinators it starts
    children = Children(Path(config.data_dir) / "logs")
    stop = {"now": False}

    def on_signal(_sig: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for n in config.nodes:
            children.start(
                n.id,
                [
                    sys.executable,
                    "-m",
                    "ripple.cli",
                    "coordinator",
                    "--config",
                    str(path),
                    "--node-id",
                    n.id,
                ],
            )
        urls = [n.url for n in config.nodes]
        health = asyncio.run(_wait_ready(urls, UP_READY_TIMEOUT_S))
        spark_url = None
        if args.workers > 0:
            spark_url = _start_pipeline(args, config, children, urls)
        print(
            f"Ripple is up ({len(config.nodes)} coordinators, {args.workers} workers). "
            f"Cluster file: {path}"
        )
        pids = {name: proc.pid for name, proc in children.procs}
        for n in config.nodes:
            print(f"  {n.id}  {n.url}  (raft {n.raft}, pid {pids[n.id]})")
        print(f"leader: {health['leader_id']}   logs: {children.log_dir}")
        print(f"dashboard: {config.nodes[0].url}/ui (any node serves it)")
        workers = [f"{name} pid {pid}" for name, pid in pids.items() if name.startswith("w")]
        if workers:
            print("workers: " + ", ".join(workers))
        if spark_url is not None:
            print(f"spark connect: {spark_url}   store: {config.store}")
            print(
                f"try: ripple produce --generate 10000 --data-dir {args.data_dir}  then  "
                f"ripple get SYM0001 --data-dir {args.data_dir}"
            )
        status = asyncio.run(_fetch_status(urls))
        print(render_status(status))
        print("Ctrl-C stops every process started here.")
        sys.stdout.flush()
        if args.demo and spark_url is not None:
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
        reported: set[str] = set()
        while not stop["now"]:
            for name, proc in children.procs:
                if proc.poll() is not None and name not in reported and not stop["now"]:
                    reported.add(name)
                    log.warning("%s exited with %s", name, proc.returncode)
            time.sleep(0.2)
    finally:
        children.stop_all()
        if children.spark is not None:
            children.spark.stop()
        print("stopped.")
    return 0


def _start_pipeline(
    args: argparse.Namespace, config: ClusterConfig, children: Children, urls: list[str]
) -> str:
    """One local Spark Connect server shared by every worker, then the workers."""
    from pipeline.spark_server import SparkConnectServer

    children.spark = SparkConnectServer(str(children.log_dir))
    spark_url = str(children.spark.start())
    store = config.store or f"file://{(Path(config.data_dir) / 'store').resolve()}"
    ports = free_ports(args.workers)
    for i in range(args.workers):
        argv = [
            sys.executable,
            "-m",
            "ripple.cli",
            "worker",
            "--worker-id",
            f"w{i + 1}",
            "--listen",
            f"127.0.0.1:{ports[i]}",
            "--store",
            store,
            "--spark-remote",
            spark_url,
            "--max-keys-per-partition",
            str(config.max_keys_per_partition),
        ]
        for url in urls:
            argv += ["--coordinator", url]
        env = {"PYSPARK_PYTHON": sys.executable, "RIPPLE_JOIN_TOKEN": config.join_token}
        # SIGINT: a worker stops without draining (the whole local cluster is going down).
        children.start(f"w{i + 1}", argv, env=env, stop_signal=signal.SIGINT)
    return spark_url


async def _fetch_status(urls: list[str]) -> dict[str, Any]:
    async with CoordinatorClient(urls) as client:
        return await client.get("/v1/status")


# -- parser -----------------------------------------------------------------------------------


def coordinator_arg(sp: argparse.ArgumentParser) -> None:
    """The one flag for coordinator URLs, on every subcommand that needs them. `--url` is
    kept as an alias: the read, admin, produce and get commands used to spell it that way."""
    sp.add_argument(
        "--coordinator",
        "--url",
        dest="coordinator",
        action="append",
        metavar="URL",
        help="coordinator URL (repeatable; default RIPPLE_URL, comma-separated)",
    )
    sp.add_argument(
        "--tls-ca",
        default=os.environ.get("RIPPLE_TLS_CA"),
        metavar="PEM",
        help="CA bundle to verify https:// coordinators (and workers) against "
        "(env RIPPLE_TLS_CA; default: the cluster file's tls_ca, else the system's roots)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ripple", description="Ripple partition coordinator")
    p.add_argument("--log-level", default=os.environ.get("RIPPLE_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("coordinator", help="run one coordinator node")
    c.add_argument("--config", required=True)
    c.add_argument("--node-id", required=True)
    defaults = ClusterConfig()
    for key in SCALAR_KEYS:
        kind = type(getattr(defaults, key))
        c.add_argument(
            f"--{key.replace('_', '-')}",
            dest=key,
            default=None,
            type=str if kind is bool else kind,
            help=f"overrides {key} (env RIPPLE_{key.upper()})",
        )

    u = sub.add_parser("up", help="run a local cluster until Ctrl-C")
    u.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    u.add_argument(
        "--workers",
        type=int,
        default=3,
        help="workers to start with one shared Spark Connect server (0: none)",
    )
    u.add_argument("--partitions", type=int, default=None)
    u.add_argument(
        "--demo",
        action="store_true",
        help="produce sample data, show results, kill a worker, show them again",
    )

    def client_args(sp: argparse.ArgumentParser) -> None:
        coordinator_arg(sp)
        sp.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
        sp.add_argument("--json", action="store_true")

    for name in ("status", "partitions", "workers", "migrations"):
        sp = sub.add_parser(name, help=f"show {name}")
        client_args(sp)
        sp.add_argument(
            "--consistent", action="store_true", help="linearizable read through the leader"
        )
        if name == "migrations":
            sp.add_argument(
                "--watch", action="store_true", help="progress bar until no migration is in flight"
            )

    r = sub.add_parser("reassign", help="admin: rebalance or move partitions")
    client_args(r)
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--move", action="append", metavar="P:WORKER")
    r.add_argument("--admin-token")

    w = sub.add_parser("worker", help="run one pipeline worker")
    coordinator_arg(w)
    w.add_argument("--worker-id", required=True)
    w.add_argument("--listen", required=True, help="HOST:PORT to serve on")
    w.add_argument("--advertise", help="URL the coordinator uses (default http://LISTEN)")
    w.add_argument("--store", required=True, help="file:///dir or s3://bucket/prefix")
    w.add_argument("--s3-endpoint", help="endpoint URL of an S3-compatible store")
    w.add_argument("--spark-remote", help="sc://HOST:PORT of a Spark Connect server")
    w.add_argument("--transform", help="module:function taking and returning a DataFrame")
    w.add_argument(
        "--join-token",
        default=os.environ.get("RIPPLE_JOIN_TOKEN"),
        help="the cluster's join token, if it has one (env RIPPLE_JOIN_TOKEN)",
    )
    w.add_argument("--batch-interval-s", type=float, default=0.5)
    w.add_argument("--max-keys-per-partition", type=int, default=2000)
    w.add_argument("--staging-dir", help="where S3 segments are staged for a local Spark")
    w.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve the worker API over TLS with this certificate chain (then --tls-key)",
    )
    w.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    w.add_argument(
        "--allow-wildcard-bind",
        action="store_true",
        help="allow --listen on every interface (0.0.0.0, ::); refused otherwise",
    )
    w.add_argument(
        "--data-path",
        choices=("files", "arrow", "direct"),
        help="how Spark gets the input (docs/pipeline.md); default: files for a Spark on "
        "127.0.0.1/localhost, arrow otherwise",
    )

    pr = sub.add_parser("produce", help="append records to the source log")
    client_args(pr)
    pr.add_argument("--file", help='JSON Lines of {"key": str, "value": number}')
    pr.add_argument("--generate", type=int, help="generate N market-data style records")
    pr.add_argument("--keys", type=int, default=100)
    pr.add_argument("--seed", type=int, default=1)
    pr.add_argument("--store", help="default: file://<data-dir>/store")
    pr.add_argument("--s3-endpoint")
    pr.add_argument("--partitions", type=int, help="default: asked from the coordinator")

    g = sub.add_parser("get", help="a key's state, from the worker that owns it")
    client_args(g)
    g.add_argument("key")

    d = sub.add_parser("drain", help="admin: move a worker's partitions away, then LEFT")
    client_args(d)
    d.add_argument("worker")
    d.add_argument("--admin-token")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    try:
        if args.command == "coordinator":
            return cmd_coordinator(args)
        if args.command == "up":
            return cmd_up(args)
        if args.command == "migrations":
            return asyncio.run(cmd_migrations(args))
        if args.command == "reassign":
            return asyncio.run(cmd_reassign(args))
        if args.command == "drain":
            return asyncio.run(cmd_drain(args))
        if args.command == "worker":
            return cmd_worker(args)
        if args.command == "produce":
            return cmd_produce(args)
        if args.command == "get":
            return asyncio.run(cmd_get(args))
        render = {
            "status": render_status,
            "partitions": render_partitions,
            "workers": render_workers,
        }[args.command]
        return asyncio.run(_read(args, f"/v1/{args.command}", render))
    except RippleError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"ripple: {exc.code}: {exc.message}{where}", file=sys.stderr)
        return 2 if exc.status in (2, 400) else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
