"""The `ripple` command.

  ripple coordinator --config FILE --node-id ID     run one coordinator node (foreground)
      [--join URL --raft HOST:PORT --http HOST:PORT]    (a new node joining a running cluster)
  ripple up [--data-dir DIR] [--workers N]          a local cluster; Ctrl-C stops it all
  ripple status|partitions|workers|migrations       read from any node
  ripple partitions|migrations --pipeline NAME      one pipeline's, by its own numbers
  ripple reassign [--dry-run] [--move P:WORKER]     admin: balance or explicit moves
      [--pipeline NAME]                                 (P: that pipeline's own number)
  ripple drain WORKER                               admin: move a worker's partitions away
  ripple nodes [add|remove|replace ID ...]          the coordinator voters; admin: change them
  ripple maintenance on|off --reason TEXT [--for D] admin: pause automatic balance moves
  ripple rescale --partitions M [--dry-run] [--wait] admin: change the partition count
      [--pipeline NAME]                                 (a recorded pipeline: no dry run, no wait)
  ripple pipelines list|describe NAME               the pipelines the cluster runs
  ripple pipelines create NAME --spec FILE [--partitions N] [--label K=V ...]
  ripple pipelines pause|resume NAME | drop NAME [--purge]   admin: change one
  ripple pipelines rescale NAME --partitions M | update NAME --spec FILE [--partitions M]
  ripple pipelines tokens issue|list|revoke NAME   admin: tokens scoped to one pipeline
  ripple worker --coordinator URL ... --store URI   run one pipeline worker
  ripple produce --file F | --generate N            append records to the source log
  ripple get KEY                                    a key's state from its owning worker
  ripple results NAME [--store URI]                 a pipeline's results tables: where, how
  ripple backup --out FILE | --store URI            admin: a backup of the cluster's state
  ripple restore --backup FILE --config FILE        a NEW cluster's data dirs from a backup
  ripple recover --from-data-dir DIR --config FILE  a NEW cluster from one survivor's data dir
  ripple --version                                  the release (shared/version.py)

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
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from coordinator.client import CoordinatorClient
from coordinator.config import ClusterConfig
from coordinator.config_file import SCALAR_KEYS, load_config
from coordinator.core.fencing import EPOCH_JUMP_DEFAULT
from coordinator.service.node_dir import JOIN_FILE
from ripple.connect import (
    DEFAULT_DATA_DIR,
    admin_token,
    client_for,
    coordinator_arg,
    coordinator_urls,
    tls_ca,
)
from ripple.local_cluster import up
from ripple.nodes import add_nodes_parser, cmd_nodes, prepare_join
from ripple.pipeline_commands import add_pipeline_parsers, cmd_get, cmd_produce, cmd_worker
from ripple.pipelines import add_pipelines_parser, pipelines_command
from ripple.rescale import add_rescale_parser, rescale_command, rescale_done, rescale_progress
from ripple.results import add_results_parser, results_command
from ripple.tables import (
    render_membership,
    render_migrations,
    render_partitions,
    render_status,
    render_workers,
    table,
)
from shared.clock import monotonic_s
from shared.errors import ClientError, ErrorKind, RippleError
from shared.version import PACKAGE_VERSION

WATCH_MAX_S = 3600.0
WATCH_EVERY_S = 0.5


# -- helpers ---------------------------------------------------------------------------------


def _print(obj: dict[str, Any], as_json: bool, render: Any) -> None:
    if as_json:
        print(json.dumps(obj, indent=2, sort_keys=True))
    else:
        print(render(obj))


# -- read commands ---------------------------------------------------------------------------


def _scoped(args: argparse.Namespace, path: str) -> str:
    """`path` about the pipeline `--pipeline` names (none: the server's `default`)."""
    name = getattr(args, "pipeline", None)
    return path if name is None else f"{path}?pipeline={quote(name, safe='')}"


def _titled(args: argparse.Namespace, render: Any) -> Any:
    """`render` under a line naming the pipeline, when `--pipeline` names one."""
    name = getattr(args, "pipeline", None)
    if name is None:
        return render
    return lambda body: f"pipeline {name}\n" + render(body)


async def _read(args: argparse.Namespace, path: str, render: Any) -> int:
    path, render = _scoped(args, path), _titled(args, render)
    async with client_for(args) as client:
        body = await client.get(path, consistent=args.consistent)
        if path == "/v1/status":  # with the voters and any membership change in flight
            nodes = None
            if body.get("leader_id") is not None:
                # The leader's view: a change in flight is its memory until it appends one.
                with contextlib.suppress(ClientError):
                    nodes = await client.get("/v1/nodes", consistent=True)
            if nodes is None:  # no leader: this node's log still names the voters
                nodes = await client.get("/v1/nodes", consistent=args.consistent)
            body = {**body, "membership": nodes}
    _print(body, args.json, render)
    return 0


def _render_status(body: dict[str, Any]) -> str:
    return render_status(body) + "\n" + render_membership(body["membership"])


async def cmd_migrations(args: argparse.Namespace) -> int:
    if not args.watch:
        return await _read(args, "/v1/migrations", render_migrations)
    async with client_for(args) as client:
        deadline_s = monotonic_s(client.clock) + WATCH_MAX_S
        total = None
        while monotonic_s(client.clock) < deadline_s:
            body = await client.get(_scoped(args, "/v1/migrations"))
            left = body["in_flight"]
            total = max(total or 0, left)
            done = (total - left) if total else 0
            width = 30
            filled = width if not total else int(width * done / total)
            # A rescale in flight holds balance moves back: the watch follows it too.
            rescale = (await client.get("/v1/status")).get("rescale")
            rescaling = rescale is not None and not rescale_done(rescale)
            tail = f"   rescale: {rescale_progress(rescale)}" if rescale and rescaling else ""
            print(
                f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total or 0} done, "
                f"{left} in flight{tail}\x1b[K",
                end="",
                flush=True,
            )
            if left == 0 and not rescaling:
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
                raise RippleError(f"--move wants PARTITION:WORKER, got {spec!r}", code="usage")
            moves.append({"partition": int(part), "to": worker})
        payload["moves"] = moves
    else:
        payload["strategy"] = "balance"
    async with client_for(args, token=admin_token(args)) as client:
        body = await client.post(_scoped(args, "/v1/admin/reassign"), payload)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        rows = [[x.get("id"), x["partition"], x["from"], x["to"]] for x in body["migrations"]]
        whose = "" if args.pipeline is None else f" of pipeline {args.pipeline}"
        print(("dry run: " if body["dry_run"] else "") + f"{len(rows)} moves{whose}")
        if rows:
            print(table(rows, ["ID", "PARTITION", "FROM", "TO"]))
    return 0


async def cmd_drain(args: argparse.Namespace) -> int:
    async with client_for(args, token=admin_token(args)) as client:
        body = await client.post(f"/v1/workers/{args.worker}/drain", {})
    print(f"{body['worker_id']}: {body['state']}, {len(body['migrations'])} migrations planned")
    return 0


async def cmd_maintenance(args: argparse.Namespace) -> int:
    from ripple.maintenance import maintenance_command

    async with client_for(args, token=admin_token(args)) as client:
        return await maintenance_command(args, client)


async def cmd_rescale(args: argparse.Namespace) -> int:
    async with client_for(args, token=admin_token(args)) as client:
        return await rescale_command(args, client)


# -- backups --------------------------------------------------------------------------------

BACKUP_TIMEOUT_S = 300.0


async def cmd_backup(args: argparse.Namespace) -> int:
    from ripple.backups import backup_command

    if args.out is None and args.store is None:
        raise RippleError("give --out FILE, --store URI or both", code="usage")
    client = CoordinatorClient(
        coordinator_urls(args),
        token=admin_token(args),
        ca_file=tls_ca(args),
        timeout_s=BACKUP_TIMEOUT_S,
    )
    async with client:
        return await backup_command(args, client)


# -- processes -------------------------------------------------------------------------------


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator.service.server import run

    overrides = {k: getattr(args, k) for k in SCALAR_KEYS if getattr(args, k, None) is not None}
    config = load_config(args.config, overrides=overrides)
    if args.join or (config.node_dir(args.node_id) / JOIN_FILE).exists():
        prepare_join(
            config,
            args.node_id,
            urls=args.join,
            raft=args.raft,
            http=args.http,
            raft_bind=args.raft_bind,
            ca_file=tls_ca(args) or config.tls_ca or None,
        )
    else:
        config.node(args.node_id)
    run(config, args.node_id)
    return 0


async def _nodes(args: argparse.Namespace) -> int:
    token = None if (args.action or "list") == "list" else admin_token(args)
    async with client_for(args, token=token) as client:
        return await cmd_nodes(args, client)


# -- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ripple", description="Ripple partition coordinator")
    p.add_argument("--version", action="version", version=f"ripple {PACKAGE_VERSION}")
    p.add_argument("--log-level", default=os.environ.get("RIPPLE_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("coordinator", help="run one coordinator node")
    c.add_argument("--config", required=True)
    c.add_argument("--node-id", required=True)
    c.add_argument(
        "--join",
        action="append",
        default=[],
        metavar="URL",
        help="a new node: URL of a running node of the cluster to join (repeatable); then "
        "add it with `ripple nodes add` (docs/runbooks/add-a-node.md)",
    )
    c.add_argument("--raft", metavar="HOST:PORT", help="with --join: the Raft address others dial")
    c.add_argument("--http", metavar="HOST:PORT", help="with --join: the HTTP address to serve")
    c.add_argument("--raft-bind", metavar="HOST:PORT", help="with --join: where Raft listens")
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

    def pipeline_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--pipeline",
            metavar="NAME",
            help="that pipeline's partitions, by its own numbers (default: default)",
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
        if name in ("partitions", "migrations"):
            pipeline_arg(sp)
        if name == "migrations":
            sp.add_argument(
                "--watch",
                action="store_true",
                help="progress bar until no migration and no rescale is in flight",
            )

    r = sub.add_parser("reassign", help="admin: rebalance or move partitions")
    client_args(r)
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--move", action="append", metavar="P:WORKER")
    pipeline_arg(r)
    r.add_argument("--admin-token")

    add_pipeline_parsers(sub, client_args)

    add_nodes_parser(sub, client_args)

    add_rescale_parser(sub, client_args)

    add_pipelines_parser(sub, client_args)

    add_results_parser(sub, client_args)

    d = sub.add_parser("drain", help="admin: move a worker's partitions away, then LEFT")
    client_args(d)
    d.add_argument("worker")
    d.add_argument("--admin-token")

    mm = sub.add_parser(
        "maintenance", help="admin: maintenance mode (no automatic balance; recovery goes on)"
    )
    client_args(mm)
    mm.add_argument("state", choices=("on", "off"))
    mm.add_argument("--reason", help="why (required with on); recorded in the log")
    mm.add_argument(
        "--for",
        dest="for_",
        metavar="DURATION",
        help="on only: it ends by itself after this long (90s, 30m, 1h30m, 2d)",
    )
    mm.add_argument("--admin-token")

    b = sub.add_parser("backup", help="admin: a backup of the state at one applied index")
    client_args(b)
    b.add_argument("--admin-token")
    b.add_argument("--out", metavar="FILE", help="write it to this file (never replaced)")
    b.add_argument("--store", metavar="URI", help="put it under backups/ in this store")
    b.add_argument("--s3-endpoint")
    b.add_argument("--bytes-max", type=int, default=ClusterConfig().backup_bytes_max, metavar="N")
    for name, source in (("restore", "--backup"), ("recover", "--from-data-dir")):
        r = sub.add_parser(
            name,
            help="make a NEW cluster's data directories from a backup"
            if name == "restore"
            else "make a NEW cluster from one survivor's data directory (lost majority)",
        )
        r.add_argument(source, required=True, metavar="FILE" if name == "restore" else "DIR")
        r.add_argument("--config", required=True, help="the new cluster's file")
        r.add_argument(
            "--epoch-jump",
            type=int,
            default=EPOCH_JUMP_DEFAULT,
            help="every partition's epoch grows by this (fences the old cluster's workers)",
        )
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
            return up(args.data_dir, args.workers, args.partitions, args.demo)
        if args.command == "migrations":
            return asyncio.run(cmd_migrations(args))
        if args.command == "reassign":
            return asyncio.run(cmd_reassign(args))
        if args.command == "drain":
            return asyncio.run(cmd_drain(args))
        if args.command == "maintenance":
            return asyncio.run(cmd_maintenance(args))
        if args.command == "rescale":
            return asyncio.run(cmd_rescale(args))
        if args.command == "pipelines":
            return asyncio.run(pipelines_command(args))
        if args.command == "worker":
            return cmd_worker(args)
        if args.command == "produce":
            return cmd_produce(args)
        if args.command == "get":
            return asyncio.run(cmd_get(args))
        if args.command == "results":
            return asyncio.run(results_command(args))
        if args.command == "nodes":
            return asyncio.run(_nodes(args))
        if args.command == "backup":
            return asyncio.run(cmd_backup(args))
        if args.command in ("restore", "recover"):
            from ripple.restore import restore_command

            return restore_command(args)
        render = {
            "status": _render_status,
            "partitions": render_partitions,
            "workers": render_workers,
        }[args.command]
        return asyncio.run(_read(args, f"/v1/{args.command}", render))
    except RippleError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"ripple: {exc.code}: {exc.message}{where}", file=sys.stderr)
        return 2 if exc.kind is ErrorKind.INVALID else 1  # usage and bad input: 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
