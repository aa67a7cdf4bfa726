"""What the HTTP app carries for its handlers: typed keys for the node it serves, the
leader duties, the membership changes, the admission policy, the heartbeat's assignment
texts and the cluster's browser origins.

Each is set once by `app.create_app` and never replaced, so a handler reads the same
objects for the app's whole life.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Protocol

from aiohttp import web

from coordinator.core.cluster import ClusterState
from coordinator.core.model import WorkerId
from coordinator.core.planner import Planner
from coordinator.service.auth import Admission
from coordinator.service.failing import FailingReports
from coordinator.service.membership import MembershipChanges
from coordinator.service.node_parts import ApiNode
from coordinator.service.replies import AssignmentTexts

__all__ = [
    "ADMISSION_KEY",
    "ASSIGNMENT_TEXTS_KEY",
    "DUTIES_KEY",
    "MEMBERSHIP_KEY",
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

    def liveness_of(self, worker_id: str, /) -> str | None: ...

    def load_of(self, worker_id: str, /) -> float | None: ...

    def rate_of(self, partition: int, /) -> float | None:
        """The partition's input rate as last reported, while fresh; else None."""


# A protocol, not the node's class: handlers take what the node offers them, and this
# package never imports coordinator/service/node.py.
NODE_KEY: web.AppKey[ApiNode] = web.AppKey("node")
DUTIES_KEY: web.AppKey[Duties] = web.AppKey("duties")
ADMISSION_KEY = web.AppKey("admission", Admission)
ASSIGNMENT_TEXTS_KEY = web.AppKey("assignment_texts", AssignmentTexts)
MEMBERSHIP_KEY = web.AppKey("membership", MembershipChanges)
# The origins allowed cross-origin: the cluster's own node URLs (`dashboard.NodeOrigins`,
# which follows the voter set).
ORIGINS_KEY: web.AppKey[Container[str]] = web.AppKey("origins")
