"""What the leader does for a rescale in flight (docs/pipeline.md, "Rescaling"): the cut
calls while CUTTING, the build call while MOVING, FinishRescale once HOSTING is over.

Owns the pacing of those calls (each repeats until its reply says done, at most once per
`poll_ms` per partition or generation) and which worker builds. Everything it decides comes
from the applied state, so a new leader (a fresh planner) carries on where the old one
stopped: cuts already recorded are not asked again, a build is asked again of some ACTIVE
worker (the build is idempotent). Invariant: at most `cuts_in_flight_max` cut calls and one
build call are out at once; HOSTING needs nothing here (the usual assignment hosts the new
partitions).
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Command, FinishRescale
from coordinator.core.effects import BuildCall, CutCall, WorkerCall
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    Epoch,
    PartitionId,
    PartitionStatus,
    Rescale,
    RescalePhase,
    WorkerId,
)
from coordinator.core.rescale import in_flight

__all__ = ["CUTS_IN_FLIGHT_MAX", "RESCALE_POLL_MS", "RescalePlans", "balance_paused"]

# Cut calls out at once: each one pauses a partition from its seal to its cut checkpoint,
# so a rescale of many partitions cuts them a bounded number at a time.
CUTS_IN_FLIGHT_MAX = 16
# How often an unfinished cut or build is asked again.
RESCALE_POLL_MS = 500


def balance_paused(state: ClusterState) -> bool:
    """No automatic balance move while a rescale is in flight (recovery goes on)."""
    return in_flight(state)


class RescalePlans:
    """The calls and the finishing command of a rescale in flight."""

    def __init__(
        self, *, cuts_in_flight_max: int = CUTS_IN_FLIGHT_MAX, poll_ms: int = RESCALE_POLL_MS
    ) -> None:
        self.cuts_in_flight_max = cuts_in_flight_max
        self.poll_ms = poll_ms
        # Per call key, when it may be asked again (monotonic ms).
        self.next_ms: dict[tuple[str, object], int] = {}
        self.builder: WorkerId | None = None
        # What `calls` was handed, for the round it plans.
        self._busy: set[tuple[str, object]] = set()
        self._claim: Callable[[WorkerCall], bool] = lambda _call: False
        self._alive: Callable[[WorkerId], bool] = lambda _worker: False

    def answered(self, key: tuple[str, object], now_ms: int) -> None:
        """A reply that was not done (or a failure): ask again after the poll interval."""
        self.next_ms[key] = now_ms + self.poll_ms

    def finish(self, state: ClusterState, wall_ms: int) -> tuple[Command, ...]:
        r = state.rescale
        if r is None or r.phase is not RescalePhase.HOSTING:
            return ()
        # `default`'s table is the one rescaled; a recorded pipeline's may be unplaceable.
        if any(
            p.status is not PartitionStatus.ONLINE for p in state.partitions.of(DEFAULT_PIPELINE)
        ):
            return ()
        return (FinishRescale(generation=r.generation, now_ms=wall_ms),)

    def calls(
        self,
        state: ClusterState,
        now_ms: int,
        in_flight_keys: set[tuple[str, object]],
        claim: Callable[[WorkerCall], bool],
        alive: Callable[[WorkerId], bool],
    ) -> list[WorkerCall]:
        r = state.rescale
        if r is None or r.phase not in (RescalePhase.CUTTING, RescalePhase.MOVING):
            self.next_ms.clear()
            self.builder = None
            return []
        self._busy, self._claim, self._alive = in_flight_keys, claim, alive
        if r.phase is RescalePhase.CUTTING:
            return self._cut_calls(r, state, now_ms)
        if r.base_epoch is None:  # set with MOVING (coordinator/core/rescale.py)
            return []
        return self._build_call(r, r.base_epoch, state, now_ms)

    def _due(self, key: tuple[str, object], now_ms: int) -> bool:
        return key not in self._busy and self.next_ms.get(key, 0) <= now_ms

    def _cut_calls(self, r: Rescale, state: ClusterState, now_ms: int) -> list[WorkerCall]:
        room = self.cuts_in_flight_max - sum(1 for k in self._busy if k[0] == "cut")
        out: list[WorkerCall] = []
        routing = state.routing
        for p, cut in enumerate(r.cuts):
            if room <= 0:
                break
            part = state.partitions[p]
            if cut is not None or part.status is not PartitionStatus.ONLINE:
                continue  # an ASSIGNING one is asked once its new owner hosts it
            if part.owner is None or not self._alive(part.owner):
                continue
            if not self._due(("cut", PartitionId(p)), now_ms):
                continue
            worker = state.workers[part.owner]
            call = CutCall(
                partition=PartitionId(p),
                epoch=part.epoch,
                worker_id=worker.worker_id,
                address=worker.address,
                incarnation=worker.incarnation,
                generation=r.generation - 1,
                partitions=r.partitions,
                routing=routing,
            )
            if self._claim(call):
                out.append(call)
                room -= 1
        return out

    def _build_call(
        self, r: Rescale, base_epoch: Epoch, state: ClusterState, now_ms: int
    ) -> list[WorkerCall]:
        if not self._due(("build", r.generation), now_ms):
            return []
        active = [w for w in state.active_workers() if self._alive(w)]
        if not active:
            return []
        if self.builder not in active:
            # Another one once the builder is gone: the build is idempotent.
            self.builder = active[r.generation % len(active)]
        worker = state.workers[self.builder]
        cuts = tuple((PartitionId(p), c) for p, c in enumerate(r.cuts) if c is not None)
        call = BuildCall(
            generation=r.generation,
            worker_id=worker.worker_id,
            address=worker.address,
            incarnation=worker.incarnation,
            routing=(*state.routing, r.partitions),
            epoch=base_epoch,
            cuts=cuts,
        )
        return [call] if self._claim(call) else []
