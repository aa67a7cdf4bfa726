"""The `ripple` subcommands of the pipeline: `worker` (run one pipeline worker), `produce`
(append records to the source log) and `get` (a key's state from the worker that owns it),
with their flags.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.addresses import check_bind
from ripple.connect import client_for, coordinator_arg, coordinator_urls, tls_ca
from ripple.tables import table
from shared.errors import ConfigError, RippleError

__all__ = ["add_pipeline_parsers", "cmd_get", "cmd_produce", "cmd_worker"]


def add_pipeline_parsers(sub: Any, client_args: Callable[[argparse.ArgumentParser], None]) -> None:
    """The worker, produce and get subcommands on `sub` (argparse's subparsers)."""
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
    w.add_argument(
        "--state-dir",
        default=os.environ.get("RIPPLE_STATE_DIR"),
        metavar="DIR",
        help="where the worker keeps its current token (mode 600), so that the same command "
        "started again rejoins to the same partitions (env RIPPLE_STATE_DIR; none: a restart "
        "waits until the leader gives the old process up, and its partitions move); its "
        "stores/ holds recorded pipelines' partition state (none: a temporary directory)",
    )
    w.add_argument(
        "--leave-on-sigterm",
        action="store_true",
        help="SIGTERM leaves (drains: partitions move away, then exit) instead of restarting "
        "(the default: partitions held for the process started again, rejoin_grace_s)",
    )
    w.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label pipelines' pools select on (repeat it); with --slots, the worker also "
        "runs recorded pipelines' partitions",
    )
    w.add_argument(
        "--slots",
        type=int,
        metavar="N",
        help="the most recorded pipelines' partitions this worker takes (default 64 once a "
        "label is given)",
    )
    w.add_argument("--batch-interval-s", type=float, default=0.5)
    w.add_argument("--max-keys-per-partition", type=int, default=2000)
    w.add_argument("--staging-dir", help="where S3 segments are staged for a local Spark")
    w.add_argument(
        "--warm-copies-max",
        type=int,
        metavar="N",
        help="warm copies kept at once for moves into this worker (docs/pipeline.md); past "
        "it a warm call is refused and the move goes cold (0: every move into it is cold)",
    )
    w.add_argument(
        "--warm-copy-idle-s",
        type=float,
        metavar="S",
        help="a warm copy the leader has not asked about for this long is dropped",
    )
    w.add_argument(
        "--spark-job-timeout-s",
        type=float,
        metavar="S",
        help="a micro-batch's Spark job running longer is interrupted and the batch retried "
        "on a new Spark session",
    )
    w.add_argument(
        "--spark-reconnect-backoff-s-min",
        type=float,
        metavar="S",
        help="the first wait before a new Spark session once the old one is lost (a Spark "
        "restart) or unreachable; doubled after each failed attempt",
    )
    w.add_argument(
        "--spark-reconnect-backoff-s-max",
        type=float,
        metavar="S",
        help="the longest wait between attempts at a new Spark session",
    )
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
    pr.add_argument(
        "--pipeline",
        metavar="NAME",
        help="a recorded pipeline's records: --file holds JSON objects of its spec's columns",
    )
    pr.add_argument(
        "--token",
        default=os.environ.get("RIPPLE_PIPELINE_TOKEN"),
        help="with --pipeline and no --store: a produce (or operate) token of that pipeline; "
        "rows go through a worker, which writes the store (default RIPPLE_PIPELINE_TOKEN)",
    )

    g = sub.add_parser("get", help="a key's state, from the worker that owns it")
    client_args(g)
    g.add_argument("key")
    g.add_argument("--pipeline", metavar="NAME", help="a recorded pipeline's key (its outputs)")


def store_uri(args: argparse.Namespace) -> str:
    if args.store:
        return str(args.store)
    return f"file://{(Path(args.data_dir) / 'store').resolve()}"


async def _routing(args: argparse.Namespace) -> list[int]:
    """Every routing generation's partition count (`cluster.routing` of `/v1/health`, or
    `[total_partitions]` from a coordinator that does not say; `--partitions N`: `[N]`)."""
    if getattr(args, "partitions", None):
        return [int(args.partitions)]
    async with client_for(args) as client:
        cluster = (await client.get("/v1/health"))["cluster"]
    return [int(n) for n in cluster.get("routing") or [cluster["total_partitions"]]]


def cmd_produce(args: argparse.Namespace) -> int:
    from pipeline.records import load_jsonl
    from pipeline.source import Producer, generate
    from pipeline.store import open_store

    if (args.file is None) == (args.generate is None):
        raise RippleError("give exactly one of --file or --generate", code="usage")
    if args.pipeline is not None and args.pipeline != "default":
        return _produce_to_pipeline(args)
    routing = asyncio.run(_routing(args))
    store = open_store(store_uri(args), args.s3_endpoint)
    records = (
        list(load_jsonl(args.file))
        if args.file is not None
        else generate(args.generate, args.keys, args.seed)
    )
    # A seal met on the way is followed (pipeline/source.py): the count printed is the
    # generation the records went to last.
    producer = Producer(store, routing)
    firsts = producer.produce(records)
    print(
        f"produced {len(records)} records into {len(firsts)} partitions of "
        f"{producer.log.total_partitions} ({store_uri(args)})"
    )
    return 0


def _produce_to_pipeline(args: argparse.Namespace) -> int:
    from pipeline.spec.produce import load_rows
    from pipeline.spec.sdk import PipelineClient

    if args.file is None:
        raise RippleError("a recorded pipeline's records come from --file", code="usage")

    # A token and no --store: through a worker, which holds the store's credentials.
    through_worker = args.token is not None and not args.store
    store = None if through_worker else store_uri(args)

    async def produce() -> tuple[int, int]:
        async with (
            client_for(args) as client,
            PipelineClient(
                client, args.pipeline, store=store, s3_endpoint=args.s3_endpoint, token=args.token
            ) as pipeline,
        ):
            rows = list(load_rows(args.file))
            firsts = await pipeline.produce(rows)
            return len(rows), len(firsts)

    rows, partitions = asyncio.run(produce())
    print(
        f"produced {rows} records of pipeline {args.pipeline} into {partitions} partitions "
        f"({'through a worker' if store is None else store})"
    )
    return 0


async def cmd_get(args: argparse.Namespace) -> int:
    from coordinator.client import KeyRouter

    pipeline = None if args.pipeline in (None, "default") else args.pipeline
    async with client_for(args) as client:
        body = await KeyRouter(client, pipeline).get(args.key)
    if args.json:
        print(json.dumps(body, sort_keys=True))
        return 0
    print(key_table(body, pipeline))
    return 0


def key_table(body: dict[str, Any], pipeline: str | None) -> str:
    """A key read as a table: `default`'s columns, a recorded pipeline's outputs as its spec
    names them, or a windowed pipeline's open windows one row each."""
    where = ["partition", "epoch", "offset"]
    windows = body.get("windows") if pipeline is not None else None
    if isinstance(windows, list) and windows:
        names = ["key", *windows[0]]
        rows = [[body["key"], *w.values(), *(body[k] for k in where)] for w in windows]
        return table(rows, [n.upper() for n in (*names, *where)])
    names = (
        ["key", "count", "sum", "min", "max", "last"]
        if pipeline is None
        else [k for k in body if k not in where]
    )
    return table([[body[k] for k in (*names, *where)]], [n.upper() for n in (*names, *where)])


def spark_bounds(args: argparse.Namespace) -> dict[str, float]:
    """The Spark timeout and reconnect flags given, checked (unset: the settings' defaults)."""
    from pipeline.settings import (
        SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT,
        SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT,
    )

    given = {
        field: getattr(args, field)
        for field in (
            "spark_job_timeout_s",
            "spark_reconnect_backoff_s_min",
            "spark_reconnect_backoff_s_max",
        )
        if getattr(args, field) is not None
    }
    for field, seconds in given.items():
        if not 0 < seconds < float("inf"):
            flag = "--" + field.replace("_", "-")
            raise ConfigError(f"{flag} must be a number of seconds > 0", field=field)
    low = given.get("spark_reconnect_backoff_s_min", SPARK_RECONNECT_BACKOFF_S_MIN_DEFAULT)
    high = given.get("spark_reconnect_backoff_s_max", SPARK_RECONNECT_BACKOFF_S_MAX_DEFAULT)
    if low > high:
        raise ConfigError(
            f"--spark-reconnect-backoff-s-min ({low:g}) must not exceed "
            f"--spark-reconnect-backoff-s-max ({high:g})",
            field="spark_reconnect_backoff_s_min",
        )
    return given


def cmd_worker(args: argparse.Namespace) -> int:
    from pipeline.aggregate import identity, load_transform
    from pipeline.store import open_store
    from pipeline.worker import WorkerSettings, run_worker

    if not args.spark_remote:
        raise RippleError(
            "--spark-remote sc://HOST:PORT is required (ripple up starts a local "
            "Spark Connect server and passes it)",
            code="usage",
        )
    check_bind(args.listen, "listen", allow_wildcard=args.allow_wildcard_bind)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together", field="tls_cert")
    warm: dict[str, Any] = {}  # unset: WorkerSettings' defaults
    if args.warm_copies_max is not None:
        if args.warm_copies_max < 0:
            raise ConfigError("--warm-copies-max must be >= 0", field="warm_copies_max")
        warm["warm_copies_max"] = args.warm_copies_max
    if args.warm_copy_idle_s is not None:
        if not args.warm_copy_idle_s > 0:
            raise ConfigError("--warm-copy-idle-s must be > 0", field="warm_copy_idle_s")
        warm["warm_copy_idle_s"] = args.warm_copy_idle_s
    warm.update(spark_bounds(args))
    settings = WorkerSettings(
        coordinators=tuple(coordinator_urls(args)),
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
        tls_ca=tls_ca(args),
        state_dir=args.state_dir or None,
        store_uri=args.store,
        leave_on_sigterm=args.leave_on_sigterm,
        labels=_labels(args.label),
        slots=args.slots,
        **warm,
    )
    transform = load_transform(args.transform) if args.transform else identity
    return run_worker(settings, open_store(args.store, args.s3_endpoint), transform)


def _labels(given: list[str]) -> tuple[tuple[str, str], ...]:
    """`--label KEY=VALUE` flags as pairs; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for text in given:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise RippleError(f"--label {text!r} is not KEY=VALUE", code="usage")
        out[key] = value
    return tuple(sorted(out.items()))
