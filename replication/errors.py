"""The errors the replicated log raises, drawn as one hierarchy.

Owns what a caller may catch and what each error promises about the entry: whether it was
appended anywhere, and so whether a retry needs the same request id. pysyncobj's failure
codes are translated into these where they enter (`replication.group_commit`).
"""

from __future__ import annotations

__all__ = [
    "MembershipRefusedError",
    "NoLeaderError",
    "OutcomeUnknownError",
    "QueueFullError",
    "ReplicationError",
    "SyncFailedError",
]


class ReplicationError(Exception):
    """Root of the errors the replicated log raises.

    ReplicationError
    +-- NoLeaderError          the entry was NOT appended anywhere (no leader, queue full,
    |   |                      refused): safe to retry or to report unavailable
    |   +-- QueueFullError     this node's group-commit queue is at its bound: overloaded,
    |                          not leaderless; retry after a moment
    +-- MembershipRefusedError a membership change the leader would not append (another is
    |                          not committed yet, or it names the leader itself)
    +-- OutcomeUnknownError    the entry may or may not commit later (timeout, leader
    |                          changed, discarded): retry with the same request id
    +-- SyncFailedError        inside the node only: a sync or write of a Raft file failed
                               and the node halts (`replication.disk_faults`); callers see
                               NoLeaderError
    """


class NoLeaderError(ReplicationError):
    pass


class QueueFullError(NoLeaderError):
    pass


class OutcomeUnknownError(ReplicationError):
    pass


class MembershipRefusedError(ReplicationError):
    pass


class SyncFailedError(ReplicationError):
    pass
