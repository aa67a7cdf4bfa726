"""The coordinator nodes' routes: list the voters, and add, remove or replace one online.

`GET /v1/nodes` is a read like the others (any node, from its own log; `consistent=true` on
the leader after a barrier, with the change in flight). The writes are leader-only and need
the admin token, checked before the body is read; each starts a change that runs on the
leader (`coordinator.service.membership`) and answers 202 at once with it, or 200 when there
is nothing to do. A client follows the change with `GET /v1/nodes?consistent=true`.
"""

from __future__ import annotations

from aiohttp import web

from coordinator.service import models as m
from coordinator.service.http.answers import json_reply
from coordinator.service.http.context import ADMISSION_KEY, MEMBERSHIP_KEY
from coordinator.service.http.leader import require_leader
from coordinator.service.http.openapi import Route
from coordinator.service.http.request import parse
from coordinator.service.http.views import read_view
from coordinator.service.membership import Change
from coordinator.service.node_parts import ApiNode
from replication.log import Member

__all__ = ["ROUTES", "change_view", "node_views"]


def change_view(change: Change | None) -> m.ChangeView | None:
    if change is None:
        return None
    return m.ChangeView(
        id=change.id,
        kind=change.kind.value,
        node_id=None if change.node is None else change.node.id,
        old_node_id=None if change.old is None else change.old.id,
        phase=change.phase.value,
        started_ms=change.started_ms,
        error=change.error,
    )


def node_views(node: ApiNode) -> list[m.NodeView]:
    """The voters, and on the leader the learners, with what this node knows of each."""
    membership = node.log.membership()
    info = node.leader_info()
    leader_raft = info.status.leader_addr
    leading = info.role.value == "leader"
    progress = node.log.reconfig.progress() if leading else {}
    links = node.log.link_versions()
    limit = node.config.leader_fallback_timeout_s
    views = []
    for member, voter in [(v, True) for v in membership.voters] + [
        (learner, False) for learner in membership.learners
    ]:
        match_index: int | None = None
        answering: bool | None = None
        seen = progress.get(member.raft)
        if leading and member.raft == node.spec.raft:
            match_index, answering = info.status.commit_index, True  # the leader itself
        elif seen is not None:
            match_index, answering = seen.match_index, seen.answered_s_ago <= limit
        views.append(
            m.NodeView(
                id=member.id,
                raft=member.raft,
                http=member.http,
                url=node.spec_of(member).url,
                voter=voter,
                leader=member.raft == leader_raft,
                match_index=match_index,
                answering=answering,
                transport_version=links.get(member.raft),
            )
        )
    return views


async def list_nodes(request: web.Request) -> web.Response:
    view = await read_view(request)
    node = view.node
    changes = request.app[MEMBERSHIP_KEY]
    info = node.leader_info()
    with node.read() as state:
        envelope = view.envelope(state)
    body = m.NodesResponse(
        **envelope,
        node_id=node.node_id,
        cluster_id=node.cluster_id,
        leader_id=None if info.leader is None else info.leader.id,
        voter=node.log.membership().voter,
        nodes=node_views(node),
        change=change_view(changes.current),
        last_change=change_view(changes.last),
        membership_pending=node.log.membership().pending_index is not None,
    )
    return json_reply(body)


def _answer(node: ApiNode, change: Change | None) -> web.Response:
    return json_reply(
        m.NodeChangeResponse(change=change_view(change), nodes=node_views(node)),
        status=200 if change is None else 202,
    )


async def add_node(request: web.Request) -> web.Response:
    node = require_leader(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.NodeAddRequest)
    member = Member(id=body.id, raft=body.raft, http=body.http)
    return _answer(node, request.app[MEMBERSHIP_KEY].add(member))


async def remove_node(request: web.Request) -> web.Response:
    node = require_leader(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    change = request.app[MEMBERSHIP_KEY].remove(request.match_info["node_id"])
    return _answer(node, change)


async def replace_node(request: web.Request) -> web.Response:
    node = require_leader(request)
    request.app[ADMISSION_KEY].admit_admin(request.headers)
    body = await parse(request, m.NodeAddRequest)
    member = Member(id=body.id, raft=body.raft, http=body.http)
    change = request.app[MEMBERSHIP_KEY].replace(request.match_info["node_id"], member)
    return _answer(node, change)


ROUTES: tuple[Route, ...] = (
    Route(
        method="GET",
        path="/v1/nodes",
        handler=list_nodes,
        summary="The coordinator voters, and the membership change in flight (on the leader)",
        response=m.NodesResponse,
    ),
    Route(
        method="POST",
        path="/v1/admin/nodes",
        handler=add_node,
        summary="Add a coordinator node: fed the log until caught up, then a voter",
        request=m.NodeAddRequest,
        response=m.NodeChangeResponse,
        status=202,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="DELETE",
        path="/v1/admin/nodes/{node_id}",
        handler=remove_node,
        summary="Remove a coordinator voter (the leader hands its leadership over first)",
        response=m.NodeChangeResponse,
        status=202,
        leader_only=True,
        auth="admin",
    ),
    Route(
        method="POST",
        path="/v1/admin/nodes/{node_id}/replace",
        handler=replace_node,
        summary="Replace a coordinator voter: add the new node, then remove this one",
        request=m.NodeAddRequest,
        response=m.NodeChangeResponse,
        status=202,
        leader_only=True,
        auth="admin",
    ),
)
