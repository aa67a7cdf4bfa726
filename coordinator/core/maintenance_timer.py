"""When the leader ends maintenance mode by itself: the deadline of a maintenance turned on
with an end (`ripple maintenance on --for`), on the leader's monotonic clock.

Owns the planner's `MaintenanceTimer`. The replicated record carries wall times (when it
began, when it should end), which are for operators to read; a leader turns the record's
remaining time into a monotonic deadline once, when it first sees the record, so a wall
clock stepped afterwards neither ends it early nor keeps it on. Invariant: the deadline is
at most the record's whole length after the leader first saw it (a record whose end is
already past on the wall clock ends at once; a new leader never extends one beyond its
length), and the timer proposes MaintenanceOff only for the record it timed (`since_ms`),
so it can never end a maintenance an operator turned on again meanwhile.
"""

from __future__ import annotations

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Command, MaintenanceOff
from coordinator.core.model import MaintenanceRecord

__all__ = ["EXPIRY_BY", "EXPIRY_REASON", "MaintenanceTimer"]

# Who the MaintenanceOff of an expiry names, and why.
EXPIRY_BY = "leader"
EXPIRY_REASON = "its time was up (--for)"


class MaintenanceTimer:
    """The monotonic deadline of the maintenance record the leader last saw."""

    __slots__ = ("_deadline_ms", "_record")

    def __init__(self) -> None:
        self._record: MaintenanceRecord | None = None
        self._deadline_ms: int | None = None

    def deadline_ms(
        self, record: MaintenanceRecord | None, now_ms: int, wall_ms: int
    ) -> int | None:
        """When (monotonic ms) `record` ends by itself; None when it does not."""
        if record != self._record:
            self._record = record
            self._deadline_ms = None
            if record is not None and record.until_ms is not None:
                length_ms = record.until_ms - record.since_ms
                left_ms = min(max(record.until_ms - wall_ms, 0), length_ms)
                self._deadline_ms = now_ms + left_ms
        return self._deadline_ms

    def expiry(self, state: ClusterState, now_ms: int, wall_ms: int) -> tuple[Command, ...]:
        """The MaintenanceOff to propose now that the maintenance's time is up, if it is."""
        record = state.maintenance
        deadline = self.deadline_ms(record, now_ms, wall_ms)
        if record is None or deadline is None or now_ms < deadline:
            return ()
        return (
            MaintenanceOff(
                by=EXPIRY_BY, reason=EXPIRY_REASON, since_ms=record.since_ms, now_ms=wall_ms
            ),
        )
