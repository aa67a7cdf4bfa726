"""`ripple rescale --partitions M [--dry-run] [--wait] [--pipeline NAME]`: the operator's way
to change the partition count, and the lines that show a rescale (its dry run, its progress
in `ripple status` and `ripple migrations --watch`).

The command asks the leader (`POST /v1/admin/rescale`); the leader drives the rescale's
phases CUTTING, MOVING, HOSTING, DONE by itself (docs/pipeline.md "Rescaling"), so `--wait`
only reads `/v1/status` until DONE, for at most `--wait-s` (`RESCALE_WAIT_S_MAX` at most):
every wait is bounded, and a rescale the command stops watching goes on. `--pipeline NAME`
rescales a recorded pipeline instead (`ripple pipelines rescale NAME`, the same request);
`default` is the cluster's own, so `--pipeline default` is the plain form; a recorded
pipeline's has `--dry-run` and no `--wait` (describe shows its progress).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any
from urllib.parse import quote

from coordinator.client import CoordinatorClient
from shared.clock import monotonic_s
from shared.errors import RippleError

__all__ = [
    "RESCALE_WAIT_S_DEFAULT",
    "RESCALE_WAIT_S_MAX",
    "add_rescale_parser",
    "dry_run_text",
    "rescale_command",
    "rescale_done",
    "rescale_line",
    "rescale_progress",
]

RESCALE_WAIT_S_DEFAULT = 1800.0
RESCALE_WAIT_S_MAX = 86_400.0  # a day: a longer rescale is watched again, not waited on
WAIT_EVERY_S = 1.0


def dry_run_text(d: dict[str, Any]) -> str:
    """What `ripple rescale --dry-run` prints of the dry run's answer."""
    return "\n".join(
        [
            f"dry run: {d['from']} -> {d['to']} partitions (routing generation "
            f"{d['generation']}); nothing changed",
            f"keys that change partition: {100 * d['moved_fraction']:.1f} %",
            f"checkpoints read: {d['checkpoints_read']} (every old partition's cut)",
            f"partitions built: {d['partitions_built']}, each from at most "
            f"{d['feeders_max']} old partitions",
        ]
    )


def rescale_done(r: dict[str, Any]) -> bool:
    """True once the rescale `r` (a `/v1/status` record) is over, in either spelling: a node
    of 0.4.2 or older names the phases upper case."""
    return str(r["phase"]).lower() == "done"


def rescale_progress(r: dict[str, Any]) -> str:
    """`phase, cuts n/P, online n/M`: how far a rescale is."""
    return (
        f"{r['phase']}, cuts {r['cuts_done']}/{r['previous']}, "
        f"online {r['online']}/{r['partitions']}"
    )


def rescale_line(r: dict[str, Any] | None) -> str:
    """One line for `ripple status`: the newest rescale, in flight or done."""
    if r is None:
        return "rescale: none"
    head = f"rescale: {r['previous']} -> {r['partitions']} partitions (routing generation "
    head += f"{r['generation']}) by {r['by']}: "
    if rescale_done(r):
        return head + "done"
    return head + rescale_progress(r)


async def rescale_command(args: argparse.Namespace, client: CoordinatorClient) -> int:
    if args.pipeline not in (None, "default"):
        return await _pipeline_rescale(args, client)
    if args.dry_run and args.wait:
        raise RippleError("--wait goes without --dry-run", code="usage", field="wait")
    if not 0 < args.wait_s <= RESCALE_WAIT_S_MAX:
        raise RippleError(
            f"--wait-s must be in (0, {RESCALE_WAIT_S_MAX:.0f}]",
            code="usage",
            field="wait_s",
        )
    body = await client.post(
        "/v1/admin/rescale", {"partitions": args.partitions, "dry_run": args.dry_run}
    )
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    elif args.dry_run:
        print(dry_run_text(body))
    else:
        print(rescale_line(body))
    if not args.wait:
        return 0
    return await _wait_done(client, body["generation"], args.wait_s, quiet=args.json)


async def _pipeline_rescale(args: argparse.Namespace, client: CoordinatorClient) -> int:
    from ripple.pipelines import generations_lines

    if args.wait:
        raise RippleError(
            "--wait is for the cluster's own pipeline; follow a recorded one's rescale with "
            "`ripple pipelines describe NAME`",
            code="usage",
            field="pipeline",
        )
    name = quote(args.pipeline, safe="")
    payload = {"partitions": args.partitions, "dry_run": args.dry_run}
    body = await client.post(f"/v1/pipelines/{name}/rescale", payload)
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    elif args.dry_run:
        print(dry_run_text(body))
    else:
        print("\n".join([f"pipeline {body['name']}: {body['state']}", *generations_lines(body)]))
    return 0


async def _wait_done(
    client: CoordinatorClient, generation: int, wait_s: float, *, quiet: bool
) -> int:
    """Follow the rescale to `generation` until DONE (0), or the deadline (1)."""
    deadline = monotonic_s(client.clock) + wait_s
    shown = ""
    while monotonic_s(client.clock) < deadline:
        r = (await client.get("/v1/status")).get("rescale")
        if r is not None and r["generation"] == generation:
            line = rescale_progress(r)
            if line != shown and not quiet:
                print(line, flush=True)
                shown = line
            if rescale_done(r):
                return 0
        await asyncio.sleep(WAIT_EVERY_S)
    if not quiet:
        print(f"still not DONE after {wait_s:.0f} s; the rescale goes on (ripple status)")
    return 1


def add_rescale_parser(sub: Any, client_args: Any) -> None:
    r = sub.add_parser("rescale", help="admin: change the partition count (docs/runbooks/)")
    client_args(r)
    r.add_argument("--partitions", type=int, required=True, metavar="M")
    r.add_argument("--dry-run", action="store_true", help="say what it costs; change nothing")
    r.add_argument("--wait", action="store_true", help="follow its phases until DONE")
    r.add_argument(
        "--wait-s",
        type=float,
        default=RESCALE_WAIT_S_DEFAULT,
        metavar="S",
        help="with --wait: stop watching after this many seconds (the rescale goes on)",
    )
    r.add_argument(
        "--pipeline",
        metavar="NAME",
        help="rescale that recorded pipeline (default: the cluster's own, default)",
    )
    r.add_argument("--admin-token")
