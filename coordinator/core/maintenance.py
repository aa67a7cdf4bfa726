"""The apply handlers of maintenance mode: the replicated record of who turned it on, why,
when, and until when.

`coordinator/core/state.py`'s `apply` dispatches MaintenanceOn and MaintenanceOff here
(before the bootstrap check: the mode is a record about the cluster, not about partitions).
Like every handler, each validates completely before its one change and touches no worker,
partition or migration. What the mode means is the planner's: while `state.maintenance` is
set it proposes no automatic balance move (`balance_paused`), and failure recovery goes on.
Invariant: `state.maintenance` is None or a record whose reason and caller are non-empty and
bounded and whose `until_ms`, when set, is after its `since_ms`.
"""

from __future__ import annotations

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    MaintenanceOff,
    MaintenanceOn,
    MaintenanceResult,
    Ok,
    Rejected,
    Result,
    rejected,
)
from coordinator.core.model import MAINTENANCE_BY_LEN_MAX, NOTE_LEN_MAX, MaintenanceRecord

__all__ = ["balance_paused", "maintenance_off", "maintenance_on"]


def balance_paused(state: ClusterState) -> bool:
    """Whether automatic balance moves are paused (maintenance mode is on)."""
    return state.maintenance is not None


def _who_and_why(by: str, reason: str) -> Rejected | None:
    if not 1 <= len(by) <= MAINTENANCE_BY_LEN_MAX:
        return rejected("invalid", f"by must be 1..{MAINTENANCE_BY_LEN_MAX} chars", "by")
    if not 1 <= len(reason) <= NOTE_LEN_MAX:
        return rejected("invalid", f"reason must be 1..{NOTE_LEN_MAX} chars", "reason")
    return None


def maintenance_on(state: ClusterState, cmd: MaintenanceOn) -> Result:
    problem = _who_and_why(cmd.by, cmd.reason)
    if problem is not None:
        return problem
    if cmd.until_ms is not None and cmd.until_ms <= cmd.now_ms:
        return rejected("invalid", "until_ms must be after now_ms", "until_ms")
    # On while on replaces the record: an operator extends, shortens or re-words it.
    state.maintenance = MaintenanceRecord(
        by=cmd.by, reason=cmd.reason, since_ms=cmd.now_ms, until_ms=cmd.until_ms
    )
    return Ok(value=MaintenanceResult(maintenance=True, changed=True))


def maintenance_off(state: ClusterState, cmd: MaintenanceOff) -> Result:
    problem = _who_and_why(cmd.by, cmd.reason)
    if problem is not None:
        return problem
    current = state.maintenance
    if current is None or (cmd.since_ms is not None and cmd.since_ms != current.since_ms):
        # Off already, or an expiry of a maintenance that was replaced since: no change.
        return Ok(value=MaintenanceResult(maintenance=current is not None, changed=False))
    state.maintenance = None
    return Ok(value=MaintenanceResult(maintenance=False, changed=True))
