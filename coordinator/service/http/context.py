"""What the HTTP app carries for its handlers: typed keys for the node it serves, the
leader duties, the admission policy, the heartbeat's assignment texts and the cluster's
browser origins.

Each is set once by `app.create_app` and never replaced, so a handler reads the same
objects for the app's whole life.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from coordinator.core.cluster import ClusterState
from coordinator.core.model import WorkerId
from coordinator.core.planner import Planner
from coordinator.service.auth import Admission
from coordinator.service.failing import FailingReports
from coordinator.service.node import CoordinatorNode
from coordinator.service.replies import AssignmentTexts

__all__ = [
    "ADMISSION_KEY",
    "ASSIGNMENT_TEXTS_KEY",
    "DUTIES_KEY",
    "NODE_KEY",
    "ORIGINS_KEY",
    "Duties",
]


class Duties(Protocol):
    """What the HTTP layer needs of the leader duties (`coordinator/service/duties.py`'s
    `LeaderDuties`): the planner for pure planning queries, the feeds of registrations and
    heartbeats, and the leader's in-memory verdicts the read views show."""

    @property
    def failing(self) -> FailingReports:
        """Failing micro-batches as workers report them in heartbeats."""

    @property
    def running(self) -> bool:
        """Whether the duty loop is running (health shows it on a leader)."""

    def query(self) -> tuple[Planner, int]:
        """The planner and the monotonic now (ms); 503 when the duties are not running."""

    def registered(self, worker_id: WorkerId, /) -> None: ...

    def restarting(self, worker_id: WorkerId, /) -> int:
        """Hold a worker that said it is restarting; milliseconds until the hold ends (503
        when the duties are not running)."""

    def left(self, worker_id: WorkerId, /) -> None:
        """An operator drained the worker (a leave ends a restart's hold)."""

    def heartbeat(self, worker_id: WorkerId, load: float, /) -> bool:
        """Feed one heartbeat; True when the reply must ask for a checkpoint."""

    def partition_loads(
        self,
        state: ClusterState,
        worker_id: WorkerId,
        reports: list[tuple[int, int, float, int | None]],
        /,
    ) -> None:
        """Feed a heartbeat's (partition, epoch, input rate, lag) reports to placement."""

    def liveness_of(self, worker_id: str, wall_ms: int | None = None, /) -> str | None: ...

    def load_of(self, worker_id: str, /) -> float | None: ...


NODE_KEY = web.AppKey("node", CoordinatorNode)
DUTIES_KEY: web.AppKey[Duties] = web.AppKey("duties")
ADMISSION_KEY = web.AppKey("admission", Admission)
ASSIGNMENT_TEXTS_KEY = web.AppKey("assignment_texts", AssignmentTexts)
ORIGINS_KEY: web.AppKey[frozenset[str]] = web.AppKey("origins", frozenset)
