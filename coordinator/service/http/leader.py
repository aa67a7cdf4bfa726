"""Which node serves a write: the ready leader, and no other.

A follower answers 307 with the leader's URL (`LeaderRedirect`); a node that knows no
leader, a leader still applying its committed log, or a node that halted (it met a command
it does not speak, and left Raft) answers 503 with Retry-After. Reads
come here only when they ask for `consistent=true`.
"""

from __future__ import annotations

from coordinator.service.http.context import NODE_KEY
from coordinator.service.http.request import ApiRequest
from coordinator.service.node_parts import ApiNode
from replication.log import RaftRole
from shared.errors import RippleError, UnavailableError

__all__ = ["LeaderRedirect", "require_leader"]


class LeaderRedirect(RippleError):
    """Not an error of the caller's: kind ELSEWHERE, which the HTTP edge answers with 307."""

    code = "not_leader"

    def __init__(self, location: str, leader_id: str) -> None:
        super().__init__(f"this node is not the leader; the leader is {leader_id}")
        self.location = location
        self.leader_id = leader_id


def require_leader(request: ApiRequest) -> ApiNode:
    node = request.app[NODE_KEY]
    if node.is_ready_leader:  # the common case, without building a status
        return node
    if node.halted is not None:
        raise UnavailableError(
            f"this node halted and left Raft: {node.halted}", code="halted", retry_after_s=1
        )
    info = node.leader_info()
    if info.role is RaftRole.LEADER:
        if info.ready:
            return node
        raise UnavailableError("leader is still applying its committed log", retry_after_s=1)
    if info.leader is not None and info.leader.id != node.node_id:
        node.metrics.redirects.inc()
        raise LeaderRedirect(info.leader.url + request.path_qs, info.leader.id)
    raise UnavailableError("no leader known (election in progress)", retry_after_s=1)
