"""`ripple pipelines create|list|describe|pause|resume|drop|rescale|update|tokens`: the
operator's commands for the pipelines a cluster runs, over `/v1/pipelines` (docs/http-api.md,
"Pipelines").

Owns the subcommands' flags, the request each sends and the lines each prints. A create
sends the spec file's text as it is (its transform embedded as `transform.source`); the
leader checks it and refuses a bad one naming the field, which the command shows as every
`ripple` error is shown. Every write carries an Idempotency-Key made once per invocation, so
the client's retries (another node, a lost answer) are one request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from coordinator.client import CoordinatorClient
from pipeline.spec.purge import Purgeable
from ripple.connect import admin_token, client_for, coordinator_urls, tls_ca
from ripple.pipeline_tokens import add_tokens_parser, tokens_command
from ripple.rescale import dry_run_text
from ripple.tables import table
from shared.errors import ClientError, RippleError

__all__ = ["CREATE_TIMEOUT_S", "add_pipelines_parser", "pipelines_command", "render_pipelines"]

# A purge waits this long for its pipeline to be gone, asking every PURGE_POLL_S.
PURGE_WAIT_S = 60.0
PURGE_POLL_S = 0.5
# A create waits for the leader's spec check (at most 10 s) and the commit.
CREATE_TIMEOUT_S = 30.0
# The settings `--set` may name (the API's `settings` object).
SETTINGS = ("batch_interval_ms", "checkpoint_interval_ms", "max_keys_per_partition", "retention_ms")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise RippleError(f"{flag} wants KEY=VALUE, got {item!r}", code="usage", field=flag)
        if key in out:
            raise RippleError(f"{flag} names {key} twice", code="usage", field=flag)
        out[key] = value
    return out


def _settings(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in _pairs(items, "--set").items():
        if key not in SETTINGS:
            raise RippleError(
                f"--set {key}: not a pipeline setting (one of {', '.join(SETTINGS)})",
                code="usage",
                field="--set",
            )
        if not value.isdigit():
            raise RippleError(f"--set {key} wants an integer", code="usage", field="--set")
        out[key] = int(value)
    return out


def _spec_text(args: argparse.Namespace) -> str:
    try:
        return Path(args.spec).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RippleError(f"--spec {args.spec}: {exc}", code="usage", field="--spec") from None


def _create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": args.name,
        "spec_text": _spec_text(args),
        "pool": _pairs(args.label, "--label"),
        "settings": _settings(args.set),
    }
    if args.partitions is not None:
        body["partitions"] = args.partitions
    return body


def _change_line(body: dict[str, Any]) -> str:
    tail = "" if body["changed"] else " (unchanged)"
    return f"pipeline {body['name']} (incarnation {body['incarnation']}): {body['state']}{tail}"


def render_pipelines(body: dict[str, Any]) -> str:
    rows = [
        [
            p["name"],
            p["state"],
            p["partitions"],
            p["spec_version"],
            ",".join(f"{k}={v}" for k, v in sorted(p["pool"].items())) or "(any)",
            p["incarnation"],
        ]
        for p in body["pipelines"]
    ]
    stale = "\n(stale: this node may lag the leader)" if body["stale"] else ""
    return table(rows, ["NAME", "STATE", "PARTITIONS", "SPEC", "POOL", "INCARNATION"]) + stale


def generations_lines(p: dict[str, Any]) -> list[str]:
    """The numbers of each earlier generation, and the rescale or update under way (or the
    last one, done)."""

    def span(first: int, count: int) -> str:
        return f"{first}..{first + count - 1}"

    lines = [
        f"past generation {g['routing_generation']}: {g['partitions']} partitions, numbers "
        + span(g["first_slot"], g["partitions"])
        for g in p.get("past") or ()
    ]
    r = p.get("rescale")
    if r is not None:
        what = "rescale" if r["spec_version"] == p["spec_version"] else "update"
        head = (
            f"{what}: {r['previous']} -> {r['partitions']} partitions (routing generation "
            f"{r['generation']}, spec version {r['spec_version']}) by {r['by']}: {r['phase']}"
        )
        if r["phase"] != "done":
            head += f", cuts {r['cuts_done']}/{r['previous']}, numbers " + span(
                r["first_slot"], r["partitions"]
            )
        lines.append(head)
    return lines


def render_pipeline(p: dict[str, Any]) -> str:
    pool = ", ".join(f"{k}={v}" for k, v in sorted(p["pool"].items())) or "every worker"
    settings = ", ".join(f"{k}={v}" for k, v in p["settings"].items())
    lines = [
        f"pipeline {p['name']} (incarnation {p['incarnation']}): {p['state']}"
        + (" (purge)" if p["purge"] else ""),
        f"partitions: {p['partitions']}   routing generation: {p['routing_generation']}   "
        + "  ".join(f"{k} {v}" for k, v in sorted(p.get("partition_states", {}).items())),
        *([f"unplaceable: {p['unplaceable']}"] if p.get("unplaceable") else []),
        *generations_lines(p),
        f"pool: {pool}",
        f"settings: {settings}",
        f"spec: version {p['spec_version']}, sha256 {p['spec_sha256'] or '-'}",
    ]
    if p["spec_text"]:
        lines += ["", p["spec_text"].rstrip("\n")]
    else:
        lines.append("spec text: none (the cluster's own pipeline runs the built-in aggregation)")
    return "\n".join(lines)


async def pipelines_command(args: argparse.Namespace) -> int:
    action = args.action
    if action == "tokens":
        return await tokens_command(args)
    as_json: bool = args.json
    name = quote(args.name, safe="") if getattr(args, "name", None) else ""
    if action in ("list", "describe"):
        path = "/v1/pipelines" + ("" if action == "list" else f"/{name}")
        async with client_for(args) as client:
            body = await client.get(path, consistent=args.consistent)
        render = render_pipelines if action == "list" else render_pipeline
        print(json.dumps(body, indent=2, sort_keys=True) if as_json else render(body))
        return 0
    key = uuid.uuid4().hex
    token = admin_token(args)
    if action == "create":
        payload = _create_body(args)
        client = CoordinatorClient(
            coordinator_urls(args), token=token, ca_file=tls_ca(args), timeout_s=CREATE_TIMEOUT_S
        )
        async with client:
            body = await client.post("/v1/pipelines", payload, idempotency_key=key)
    elif action in ("rescale", "update"):
        return await _rescale(args, name, token, key)
    else:
        async with client_for(args, token=token) as client:
            if action == "drop":
                purge = "true" if args.purge else "false"
                # The store and its numbers first: once it is gone, nothing says which they
                # were, and a purge that cannot reach the store must not start.
                store = _purge_store(args) if args.purge else None
                described = await client.get(f"/v1/pipelines/{name}") if args.purge else {}
                body = await client.request(
                    "DELETE",
                    f"/v1/pipelines/{name}?purge={purge}",
                    headers={"Idempotency-Key": key},
                )
                if store is not None:
                    # The drop's line first: the purge waits for the pipeline to be gone.
                    shown = json.dumps(body, indent=2, sort_keys=True)
                    print(shown if as_json else _change_line(body), flush=True)
                    await _purge(args, client, name, described, store)
                    return 0
            else:
                body = await client.post(
                    f"/v1/pipelines/{name}/{action}", None, idempotency_key=key
                )
    print(json.dumps(body, indent=2, sort_keys=True) if as_json else _change_line(body))
    return 0


async def _rescale(args: argparse.Namespace, name: str, token: str | None, key: str) -> int:
    """Start a rescale, or an update of the spec (the leader checks it first, as a create's),
    and print the pipeline's new generation; the leader drives it from there."""
    payload: dict[str, Any] = {}
    if args.action == "update":
        payload["spec"] = _spec_text(args)
    if args.partitions is not None:
        payload["partitions"] = args.partitions
    if getattr(args, "dry_run", False):
        payload["dry_run"] = True
    client = CoordinatorClient(
        coordinator_urls(args), token=token, ca_file=tls_ca(args), timeout_s=CREATE_TIMEOUT_S
    )
    async with client:
        body = await client.post(
            f"/v1/pipelines/{name}/{args.action}", payload, idempotency_key=key
        )
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    elif "dry_run" in payload:
        print(dry_run_text(body))
    else:
        print("\n".join([f"pipeline {body['name']}: {body['state']}", *generations_lines(body)]))
    return 0


def _purge_store(args: argparse.Namespace) -> Purgeable:
    """The store a purge deletes from: --store, else `ripple up`'s; one that is not there is
    a usage error (opening it would make an empty one)."""
    from pipeline.store import LocalStore, S3Store, open_store
    from ripple.pipeline_commands import store_uri

    uri = store_uri(args)
    local = urlparse(uri)
    if local.scheme == "file" and not Path(local.path).is_dir():
        raise RippleError(f"no store at {uri}: give the cluster's with --store", code="usage")
    store = open_store(uri, args.s3_endpoint)
    assert isinstance(store, LocalStore | S3Store)  # open_store makes only these
    return store


async def _purge(
    args: argparse.Namespace,
    client: CoordinatorClient,
    name: str,
    described: dict[str, Any],
    store: Purgeable,
) -> None:
    """Wait for the dropped pipeline to be gone (no owner processes it any more), then delete
    its partitions' objects (pipeline/spec/purge.py)."""
    from pipeline.spec.purge import numbers_ever, purge_all, purge_results

    # Every generation's numbers, read before the drop: once it is gone nothing names them.
    ranges = numbers_ever(described)
    if not ranges:
        print(f"pipeline {args.name} was never set up: it has no objects to purge")
        return
    deadline_ms = client.clock.monotonic_ms() + round(PURGE_WAIT_S * 1000)
    while True:
        try:
            await client.get(f"/v1/pipelines/{name}", consistent=True)
        except ClientError as exc:
            if exc.code == "not_found":
                break
            raise
        if client.clock.monotonic_ms() > deadline_ms:
            raise RippleError(
                f"pipeline {args.name} is still being dropped after {PURGE_WAIT_S:g} s; "
                "run the drop with --purge again to purge it once it is gone",
                code="unavailable",
            )
        await asyncio.sleep(PURGE_POLL_S)
    deleted = await asyncio.to_thread(purge_all, store, ranges)
    deleted += await asyncio.to_thread(purge_results, store, described)
    print(f"purged {deleted} objects of pipeline {args.name}")


def add_pipelines_parser(sub: Any, client_args: Any) -> None:
    p = sub.add_parser("pipelines", help="the pipelines the cluster runs; admin: change them")
    actions = p.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str, *, named: bool, admin: bool) -> argparse.ArgumentParser:
        a: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        client_args(a)
        if named:
            a.add_argument("name", metavar="NAME")
        if admin:
            a.add_argument("--admin-token")
        else:
            a.add_argument(
                "--consistent", action="store_true", help="linearizable read through the leader"
            )
        return a

    c = action("create", "admin: create a pipeline from its spec", named=True, admin=True)
    c.add_argument("--spec", required=True, metavar="FILE", help="the spec (TOML)")
    c.add_argument(
        "--partitions", type=int, metavar="N", help="default: the cluster's total_partitions"
    )
    c.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the worker pool: workers carrying every label (repeatable; none: any worker)",
    )
    c.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=N",
        help=f"a pipeline setting ({', '.join(SETTINGS)}; repeatable)",
    )
    action("list", "every pipeline and its state", named=False, admin=False)
    action("describe", "one pipeline: record, settings, pool, spec", named=True, admin=False)
    action("pause", "admin: stop processing, offsets kept", named=True, admin=True)
    action("resume", "admin: resume a paused pipeline", named=True, admin=True)
    d = action("drop", "admin: drop a pipeline", named=True, admin=True)
    d.add_argument(
        "--purge",
        action="store_true",
        help="once it is gone, delete its objects in the store too (--store, --s3-endpoint)",
    )
    d.add_argument("--store", help="the cluster's store (default: file://<data-dir>/store)")
    d.add_argument("--s3-endpoint")
    r = action("rescale", "admin or operate: change its partition count", named=True, admin=True)
    r.add_argument("--partitions", type=int, required=True, metavar="M")
    r.add_argument("--dry-run", action="store_true", help="say what it costs; change nothing")
    u = action(
        "update",
        "admin or operate: change its spec from a cut (checked first; same key column)",
        named=True,
        admin=True,
    )
    u.add_argument("--spec", required=True, metavar="FILE", help="the new spec (TOML)")
    u.add_argument("--partitions", type=int, metavar="M", help="default: the count it has")
    add_tokens_parser(actions, client_args)
