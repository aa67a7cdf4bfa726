"""The coordinator nodes from the command line: `ripple nodes [add|remove|replace]`, and the
first start of a node that joins a running cluster (`ripple coordinator --join URL`).

A change is started on the leader and then followed until it ends, each wait bounded: when
the leader hands its leadership over to be removed, or loses it, the same request goes to
the new leader, where a replacement or removal resumes from where it stopped; the command
is done when the voter set is what it asked for. A joining node learns the voters and the
cluster id from a running node, refuses to start under the id or Raft address of a voter
(a node whose disk died comes back under a new identity, never its old one), and writes its
join record before Raft starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.addresses import split_host_port
from coordinator.client import CoordinatorClient
from coordinator.config import ClusterConfig
from coordinator.service.node_dir import JoinRecord, read_join_record, write_join_record
from replication.identity import write_cluster_id
from replication.members import Member
from ripple.tables import render_nodes
from shared.clock import monotonic_s
from shared.errors import ClientError, ConfigError, ErrorKind, RippleError

__all__ = ["CHANGE_WAIT_S", "add_nodes_parser", "cmd_nodes", "prepare_join", "wait_for_change"]

CHANGE_WAIT_S = 600.0  # a new node's catch-up included
POLL_S = 0.5
ATTEMPTS_MAX = 5  # requests of one change (each hand-off or lost leadership is one more)


def _usage(message: str) -> RippleError:
    return RippleError(message, code="usage")


def _member(args: argparse.Namespace, node_id: str) -> Member:
    if not args.raft or not args.http:
        raise _usage("--raft HOST:PORT and --http HOST:PORT are required")
    split_host_port(args.raft, "raft")
    split_host_port(args.http, "http")
    return Member(id=node_id, raft=args.raft, http=args.http)


def _reached(goal: tuple[Member | None, str | None], body: dict[str, Any]) -> bool:
    """The voter set has the node to add (exactly) and lacks the one to remove."""
    add, remove = goal
    voters = {(n["id"], n["raft"], n["http"]) for n in body["nodes"] if n["voter"]}
    ids = {v[0] for v in voters}
    return (add is None or (add.id, add.raft, add.http) in voters) and (
        remove is None or remove not in ids
    )


async def wait_for_change(
    client: CoordinatorClient,
    start: tuple[str, str, dict[str, Any] | None],
    goal: tuple[Member | None, str | None],
    *,
    wait_s: float = CHANGE_WAIT_S,
) -> dict[str, Any]:
    """Ask for a change (`start`: method, path, body) and follow it on the leader until the
    voters are as `goal` says; the last `GET /v1/nodes` answer. Raises ClientError when it
    fails or does not end within `wait_s`."""
    deadline = monotonic_s(client.clock) + wait_s
    method, path, body = start
    for _attempt in range(ATTEMPTS_MAX):
        try:
            answer = await client.request(method, path, json=body)
        except ClientError as exc:
            if exc.kind is not ErrorKind.CONFLICT or "in flight" not in exc.message:
                raise
            answer = {"change": None}  # another request's change: wait for it, then ask again
        change = answer.get("change")
        while monotonic_s(client.clock) < deadline:
            nodes = await client.get("/v1/nodes", consistent=True)
            if nodes["change"] is None:
                break
            await asyncio.sleep(POLL_S)
        else:
            raise ClientError(f"the change did not end within {wait_s:g} s", code="timeout")
        if _reached(goal, nodes):
            return nodes
        last: dict[str, Any] = nodes.get("last_change") or {}
        if change is not None and last.get("id") == change["id"] and last["phase"] == "failed":
            raise ClientError(f"the change failed: {last['error']}", code="failed")
        # Handed off, interrupted (leadership lost), or another change ran first: ask again.
    raise ClientError(f"the change did not finish in {ATTEMPTS_MAX} requests", code="failed")


async def cmd_nodes(args: argparse.Namespace, client: CoordinatorClient) -> int:
    action = args.action or "list"
    start: tuple[str, str, dict[str, Any] | None]
    if action == "list":
        body = await client.get("/v1/nodes", consistent=args.consistent)
    elif action == "add":
        member = _member(args, args.node_id)
        start = ("POST", "/v1/admin/nodes", _body(member))
        body = await _change(args, client, start, (member, None))
    elif action == "remove":
        start = ("DELETE", f"/v1/admin/nodes/{args.node_id}", None)
        body = await _change(args, client, start, (None, args.node_id))
    else:  # replace
        if not args.with_id:
            raise _usage("replace needs --with NEW_ID (and --raft, --http)")
        member = _member(args, args.with_id)
        start = ("POST", f"/v1/admin/nodes/{args.node_id}/replace", _body(member))
        body = await _change(args, client, start, (member, args.node_id))
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print(render_nodes(body))
    return 0


def _body(member: Member) -> dict[str, str]:
    return {"id": member.id, "raft": member.raft, "http": member.http}


async def _change(
    args: argparse.Namespace,
    client: CoordinatorClient,
    start: tuple[str, str, dict[str, Any] | None],
    goal: tuple[Member | None, str | None],
) -> dict[str, Any]:
    if args.no_wait:
        method, path, body = start
        return await client.request(method, path, json=body)
    return await wait_for_change(client, start, goal, wait_s=args.wait_s)


def add_nodes_parser(
    sub: Any, client_args: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """`ripple nodes`'s arguments (`sub`: the `ripple` parser's subparsers)."""
    n: argparse.ArgumentParser = sub.add_parser(
        "nodes", help="the coordinator voters; admin: add, remove, replace"
    )
    client_args(n)
    n.add_argument("action", nargs="?", choices=("list", "add", "remove", "replace"))
    n.add_argument("node_id", nargs="?", metavar="ID", help="the node to add, remove, replace")
    n.add_argument("--with", dest="with_id", metavar="NEW_ID", help="replace: the new node's id")
    n.add_argument("--raft", metavar="HOST:PORT", help="add/replace: the new node's Raft address")
    n.add_argument("--http", metavar="HOST:PORT", help="add/replace: the new node's HTTP address")
    n.add_argument("--admin-token")
    n.add_argument("--consistent", action="store_true", help="list: read through the leader")
    n.add_argument("--no-wait", action="store_true", help="start the change, do not follow it")
    n.add_argument("--wait-s", type=float, default=CHANGE_WAIT_S, help="how long to follow it")
    return n


# -- joining ----------------------------------------------------------------------------------


async def _cluster_view(urls: Sequence[str], ca_file: str | None) -> dict[str, Any]:
    async with CoordinatorClient(list(urls), ca_file=ca_file) as client:
        return await client.get("/v1/nodes", consistent=True)


def prepare_join(
    config: ClusterConfig,
    node_id: str,
    *,
    urls: Sequence[str],
    raft: str | None,
    http: str | None,
    raft_bind: str | None,
    ca_file: str | None = None,
) -> JoinRecord:
    """The join record of node `node_id`: the one in its data directory, else a new one
    made from what a running node of `urls` says (written before the node starts)."""
    node_dir = config.node_dir(node_id)
    found = read_join_record(node_dir)
    if found is not None:
        return found
    if not raft or not http:
        raise _usage("--join needs --raft HOST:PORT and --http HOST:PORT for the new node")
    me = Member(id=node_id, raft=raft, http=http)
    split_host_port(raft, "raft")
    split_host_port(http, "http")
    if (node_dir / "raft.journal").exists():
        raise ConfigError(
            f"{node_dir} holds a Raft journal but no join record: --join is for a new node "
            "with an empty data directory",
            field="join",
        )
    view = asyncio.run(_cluster_view(urls, ca_file))
    voters = tuple(
        Member(id=n["id"], raft=n["raft"], http=n["http"]) for n in view["nodes"] if n["voter"]
    )
    for v in voters:
        if v.id == node_id or v.raft == raft:
            raise ConfigError(
                f"{v.id} ({v.raft}) is a voter already: a node that lost its data directory "
                "must not come back under its old id or address while it is a voter; remove "
                "it first (ripple nodes remove), or join under a new id",
                field="node_id",
            )
    record = JoinRecord(
        node=me, raft_bind=raft_bind, voters=voters, cluster_id=str(view["cluster_id"])
    )
    write_cluster_id(node_dir, record.cluster_id, durable=config.fsync)
    write_join_record(node_dir, record, durable=config.fsync)
    return record
