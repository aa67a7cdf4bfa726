"""Where partitions should go: the workers that may receive partitions now, the placement the
settings choose (by load while every partition's load is fresh, else by counts), and the
moves an admin reassign, a balance or a drain asks for, checked as PlanMigrations' apply
will check them.

Pure queries over the state, the planner's liveness detector and its load book: nothing
here changes either; the planner's stages and the admin routes commit what they return.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.core import pools
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Move, Rejected, rejected
from coordinator.core.edits import check_moves
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.load import LoadBook
from coordinator.core.maintenance import balance_paused
from coordinator.core.model import DEFAULT_PIPELINE, WorkerId
from coordinator.core.placement import PlacementStrategy, plan
from coordinator.core.weighted import plan_weighted

__all__ = ["MovePlans"]


class MovePlans:
    """The placement and move queries of one leader's planner."""

    def __init__(
        self,
        *,
        strategy: PlacementStrategy,
        virtual_nodes: int,
        balance_tolerance: float,
        detector: Detector,
        loads: LoadBook,
    ) -> None:
        self.strategy = strategy
        self.virtual_nodes = virtual_nodes
        self.balance_tolerance = balance_tolerance
        self.detector = detector
        self.loads = loads

    def eligible(
        self, state: ClusterState, now_ms: int, exclude: Iterable[str] = ()
    ) -> list[WorkerId]:
        """ACTIVE workers the leader currently hears from: a worker that registered but went
        quiet (SUSPECTED) receives nothing new until it heartbeats again."""
        skip = set(exclude)
        return [
            w
            for w in state.active_workers()
            if w not in skip and self.detector.status(w, now_ms) is Liveness.ALIVE
        ]

    def held(self, state: ClusterState, now_ms: int) -> list[WorkerId]:
        """ACTIVE workers held for their restart (what they own stays theirs)."""
        holds = self.detector.holds(now_ms)
        if not holds:
            return []
        return [w for w in state.active_workers() if w in holds]

    def placement(
        self, state: ClusterState, eligible: list[WorkerId], now_ms: int
    ) -> list[str | None]:
        # By position in `default`'s table: a recorded pipeline's partitions are not placed.
        owners = [p.owner for p in state.partitions.of(DEFAULT_PIPELINE)]
        if self.strategy is PlacementStrategy.BALANCED:
            # By load only when every partition's is fresh; else by counts (load.py).
            self.loads.follow(state.routing_generation)
            weights = self.loads.weights(state.total_partitions, now_ms)
            if weights is not None:
                return plan_weighted(owners, eligible, weights, tolerance=self.balance_tolerance)
        return plan(self.strategy, owners, eligible, virtual_nodes=self.virtual_nodes)

    def balance_moves(self, state: ClusterState, now_ms: int) -> tuple[Move, ...]:
        eligible = self.eligible(state, now_ms)
        if not eligible:
            return ()
        # A held worker counts as the owner it is (its partitions are not up for grabs), and
        # no move takes from it or gives to it.
        held = set(self.held(state, now_ms))
        target = self.placement(state, [*eligible, *held], now_ms)
        return tuple(
            Move(partition=p.partition, source=p.owner, target=WorkerId(new))
            for p in state.partitions.of(DEFAULT_PIPELINE)
            if p.owner is not None
            and (new := target[p.partition]) is not None
            and new != p.owner
            and p.owner not in held
            and new not in held
        )

    def plan_reassign(
        self,
        state: ClusterState,
        now_ms: int,
        *,
        balance: bool,
        moves: Iterable[tuple[int, str]] = (),
    ) -> tuple[Move, ...] | Rejected:
        """The moves of an admin reassign (balance, or explicit (partition, to) pairs),
        checked against the state exactly as PlanMigrations' apply will check them."""
        if balance:
            if balance_paused(state):
                return rejected(
                    "conflict",
                    "maintenance mode is on: balancing waits until it ends (explicit moves "
                    "are allowed; `ripple maintenance off` ends it)",
                    "strategy",
                )
            if state.in_flight_migrations():
                return rejected(
                    "conflict", "migrations are in flight; balance when they finish", "strategy"
                )
            planned = self.balance_moves(state, now_ms)
        else:
            out = []
            for i, (partition, to) in enumerate(moves):
                if partition not in state.partitions:
                    return rejected(
                        "invalid", f"moves[{i}]: partition {partition} does not exist", "partition"
                    )
                part = state.partitions[partition]
                if part.owner is None:
                    return rejected(
                        "conflict", f"moves[{i}]: partition {partition} has no owner", "partition"
                    )
                out.append(Move(partition=part.partition, source=part.owner, target=WorkerId(to)))
            planned = tuple(out)
            refused = pools.outside(state, planned)
            if refused is not None:
                i, why = refused
                return rejected("conflict", f"moves[{i}]: {why}", "to")
            held = set(self.held(state, now_ms))
            for i, mv in enumerate(planned):
                if held & {mv.source, mv.target}:
                    who = mv.source if mv.source in held else mv.target
                    return rejected(
                        "conflict",
                        f"moves[{i}]: {who} is restarting and keeps its partitions until it "
                        "rejoins or its grace ends (drain it to move them now)",
                        "to" if who == mv.target else "partition",
                    )
        problem = check_moves(state, planned, None)
        return planned if problem is None else problem

    def plan_drain(
        self, state: ClusterState, worker_id: WorkerId, now_ms: int
    ) -> tuple[Move, ...] | Rejected:
        """Moves that take `worker_id`'s partitions (not already moving) to the others."""
        owned = [p for p in state.partitions if p.owner == worker_id and p.migration is None]
        if not owned:
            return ()
        eligible = self.eligible(state, now_ms, (worker_id,))
        if not eligible:
            return rejected(
                "conflict", "no other ACTIVE worker can take its partitions", "worker_id"
            )
        ours = [p for p in owned if p.pipeline == DEFAULT_PIPELINE]
        target = self.placement(state, eligible, now_ms) if ours else []
        # A recorded pipeline's partitions move within its pool (coordinator/core/pools.py).
        theirs = pools.place(state, eligible, [p for p in owned if p.pipeline != DEFAULT_PIPELINE])
        stranded = [
            p for p in owned if p.pipeline != DEFAULT_PIPELINE and p.partition not in theirs
        ]
        if stranded:
            p = stranded[0]
            return rejected(
                "conflict",
                f"no other worker of pipeline {p.pipeline}'s pool can take partition {p.partition}",
                "worker_id",
            )
        return tuple(
            Move(
                partition=p.partition,
                source=worker_id,
                target=WorkerId(
                    theirs[p.partition]
                    if p.pipeline != DEFAULT_PIPELINE
                    else target[p.partition] or eligible[0]
                ),
            )
            for p in owned
        )
