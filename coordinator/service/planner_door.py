"""The HTTP API's door to the leader's running planner: the feeds it gives and the reads it
takes.

Owns the glue between requests and the in-memory planner (`coordinator/core/planner.py`):
registrations, restarts, drains, heartbeats and partition loads go in; liveness, load,
input rates and the planner itself (for the pure admin queries) come out, each on the
monotonic clock. Every decision stays the planner's. `planner` is None unless this node is
the ready leader: a feed then does nothing (a planner built later seeds every owning worker
as seen) and a read answers None, or 503 for `query`. `LeaderDuties` is the one user: its
loop sets and clears `planner`.
"""

from __future__ import annotations

from coordinator.core.cluster import ClusterState
from coordinator.core.model import WorkerId
from coordinator.core.planner import Planner
from coordinator.service.failing import FailingReports
from shared.clock import Clock
from shared.errors import UnavailableError

__all__ = ["PlannerDoor"]


class PlannerDoor:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        # None unless this node is the ready leader; rebuilt from the state on every takeover.
        self.planner: Planner | None = None
        # Failing micro-batches as workers report them in heartbeats (shown, not decided on).
        self.failing = FailingReports()

    def query(self) -> tuple[Planner, int]:
        """The planner and the monotonic now, for the API's pure planning queries."""
        if self.planner is None:
            raise UnavailableError("leader duties are not running yet", code="not_ready")
        return self.planner, self.clock.monotonic_ms()

    def registered(self, worker_id: WorkerId) -> None:
        if self.planner is not None:
            self.planner.registered(worker_id, self.clock.monotonic_ms())

    def restarting(self, worker_id: WorkerId) -> int:
        """Hold a worker that said it is restarting; milliseconds until the hold ends."""
        planner, now = self.query()
        return planner.restarting(worker_id, now) - now

    def left(self, worker_id: WorkerId) -> None:
        """An operator drained the worker: its restart's hold, if any, ends."""
        if self.planner is not None:
            self.planner.left(worker_id)

    def heartbeat(self, worker_id: WorkerId, load: float) -> bool:
        """Feed a heartbeat to the planner; True when its reply must ask for a checkpoint."""
        if self.planner is None:
            return False  # a planner built later seeds every owning worker as seen
        return self.planner.heartbeat(worker_id, load, self.clock.monotonic_ms())

    def partition_loads(
        self,
        state: ClusterState,
        worker_id: WorkerId,
        reports: list[tuple[int, int, float, int | None]],
    ) -> None:
        """Feed a heartbeat's per-partition load to the planner (the owner's only)."""
        if self.planner is not None:
            self.planner.partition_loads(state, worker_id, reports, self.clock.monotonic_ms())

    def liveness_of(self, worker_id: str) -> str | None:
        """The planner's verdict now, on the monotonic clock (liveness is never judged
        against the wall clock, so a caller passes no time)."""
        p = self.planner
        status = None if p is None else p.liveness(worker_id, self.clock.monotonic_ms())
        return None if status is None else status.value

    def load_of(self, worker_id: str) -> float | None:
        return None if self.planner is None else self.planner.load(worker_id)

    def rate_of(self, partition: int) -> float | None:
        if self.planner is None:
            return None
        book = self.planner.loads
        seen = book.of(partition)
        fresh = seen is not None and book.fresh(partition, self.clock.monotonic_ms())
        return seen.rate_per_s if fresh and seen is not None else None
