"""What the leader does for recorded pipelines' rescales in flight (docs/pipeline.md,
"Rescaling a recorded pipeline"): the cut calls while CUTTING, the build call while MOVING,
FinishPipelineRescale once HOSTING is over, for every pipeline at once.

Owns the pacing of those calls (each repeats until its reply says done, at most once per
`poll_ms` per partition or build) and which worker of the pipeline's pool builds. As
`default`'s (`coordinator/core/rescale_plans.py`), everything comes from the applied state,
so a new leader carries on where the old one stopped. Invariants: at most
`cuts_in_flight_max` pipeline cut calls are out at once, all pipelines together, handed out
round-robin over the pipelines so that one pipeline's many cuts do not starve another's;
at most one build call per pipeline; a build goes only to a live worker of the pipeline's
pool (`coordinator/core/pools.py`), never spilled; nothing here pauses or delays another
pipeline or `default` (their calls have keys and a bound of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from coordinator.core import pools
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Command, FinishPipelineRescale
from coordinator.core.effects import PipelineBuildCall, PipelineCutCall, WorkerCall
from coordinator.core.model import (
    Epoch,
    PartitionId,
    PartitionStatus,
    Pipeline,
    PipelineName,
    PipelineRescale,
    PipelineState,
    RescalePhase,
    WorkerId,
)
from coordinator.core.rescale_plans import CUTS_IN_FLIGHT_MAX, RESCALE_POLL_MS

__all__ = ["PipelineRescalePlans"]

_CALLING = (RescalePhase.CUTTING, RescalePhase.MOVING)
Key = tuple[str, object]


def _rescaling(state: ClusterState, phases: tuple[RescalePhase, ...]) -> list[Pipeline]:
    """The pipelines whose rescale is in one of `phases`, by name; a DROPPING one's rescale
    ends with the drop."""
    return sorted(
        (
            p
            for p in state.pipelines.values()
            if p.rescale is not None
            and p.rescale.phase in phases
            and p.state is not PipelineState.DROPPING
        ),
        key=lambda p: p.name,
    )


def _routing(p: Pipeline) -> tuple[int, ...]:
    """The pipeline's partition count of each generation 0 .. its current one."""
    return (*(past.partitions for past in p.past), p.partitions)


class PipelineRescalePlans:
    """The calls and the finishing commands of recorded pipelines' rescales in flight."""

    def __init__(
        self, *, cuts_in_flight_max: int = CUTS_IN_FLIGHT_MAX, poll_ms: int = RESCALE_POLL_MS
    ) -> None:
        self.cuts_in_flight_max = cuts_in_flight_max
        self.poll_ms = poll_ms
        # Per call key, when it may be asked again (monotonic ms).
        self.next_ms: dict[Key, int] = {}
        self.builders: dict[PipelineName, WorkerId] = {}
        # The pipeline whose cut came first in the last round: the next round starts after
        # it, so the shared bound goes round the pipelines.
        self.first: PipelineName | None = None

    def answered(self, key: Key, now_ms: int) -> None:
        """A reply that was not done (or a failure): ask again after the poll interval."""
        self.next_ms[key] = now_ms + self.poll_ms

    def finish(self, state: ClusterState, wall_ms: int) -> tuple[Command, ...]:
        return tuple(
            FinishPipelineRescale(
                name=p.name, incarnation=p.incarnation, generation=r.generation, now_ms=wall_ms
            )
            for p in _rescaling(state, (RescalePhase.HOSTING,))
            if (r := p.rescale) is not None
            and all(x.status is PartitionStatus.ONLINE for x in state.partitions.of(p.name))
        )

    def calls(
        self,
        state: ClusterState,
        now_ms: int,
        in_flight_keys: set[Key],
        claim: Callable[[WorkerCall], bool],
        alive: Callable[[WorkerId], bool],
    ) -> list[WorkerCall]:
        rescaling = _rescaling(state, _CALLING)
        names = {p.name for p in rescaling}
        self.builders = {n: w for n, w in self.builders.items() if n in names}
        self.next_ms = {k: t for k, t in self.next_ms.items() if t > now_ms}
        if not rescaling:
            return []

        def due(key: Key) -> bool:
            return key not in in_flight_keys and key not in self.next_ms

        out: list[WorkerCall] = []
        for p in rescaling:
            r = p.rescale
            if r is None or r.phase is not RescalePhase.MOVING or r.base_epoch is None:
                continue  # base_epoch is set with MOVING (pipeline_rescale.py)
            call = self._build_call(state, p, r, r.base_epoch, alive)
            if call is not None and due(("pbuild", (p.name, r.generation))) and claim(call):
                out.append(call)
        room = self.cuts_in_flight_max - sum(1 for k in in_flight_keys if k[0] == "pcut")
        cutting = [p for p in rescaling if p.rescale and p.rescale.phase is RescalePhase.CUTTING]
        if room > 0 and cutting:
            out.extend(self._cut_calls(state, cutting, room, due, claim, alive))
        return out

    def _cut_calls(
        self,
        state: ClusterState,
        cutting: list[Pipeline],
        room: int,
        due: Callable[[Key], bool],
        claim: Callable[[WorkerCall], bool],
        alive: Callable[[WorkerId], bool],
    ) -> list[WorkerCall]:
        """Up to `room` cut calls, one pipeline's at a time in turn, starting after the
        pipeline that came first last round."""
        start = next((i for i, p in enumerate(cutting) if self.first and p.name > self.first), 0)
        order = cutting[start:] + cutting[:start]
        pending = [self._cuts_of(state, p, due, alive) for p in order]
        out: list[WorkerCall] = []
        while pending and room > 0:
            for turn in list(pending):
                call = next(turn, None)
                if call is None:
                    pending.remove(turn)
                    continue
                if not claim(call):
                    return out  # the calls bound is full: the next plan goes on
                if not out:
                    self.first = call.pipeline
                out.append(call)
                room -= 1
                if room <= 0:
                    break
        return out

    def _cuts_of(
        self,
        state: ClusterState,
        p: Pipeline,
        due: Callable[[Key], bool],
        alive: Callable[[WorkerId], bool],
    ) -> Iterator[PipelineCutCall]:
        """The cut calls `p` has due, lazily: a long pipeline costs only the calls taken."""
        r = p.rescale
        if r is None:
            return
        routing = _routing(p)
        for i, cut in enumerate(r.cuts):
            number = PartitionId(p.first_slot + i)
            part = state.partitions.get(number)
            if cut is not None or part is None or part.status is not PartitionStatus.ONLINE:
                continue  # an ASSIGNING one is asked once its new owner hosts it
            if part.owner is None or not alive(part.owner) or not due(("pcut", number)):
                continue
            worker = state.workers[part.owner]
            yield PipelineCutCall(
                pipeline=p.name,
                pipeline_incarnation=p.incarnation,
                partition=number,
                epoch=part.epoch,
                worker_id=worker.worker_id,
                address=worker.address,
                incarnation=worker.incarnation,
                generation=p.routing_generation,
                partitions=r.partitions,
                routing=routing,
            )

    def _build_call(
        self,
        state: ClusterState,
        p: Pipeline,
        r: PipelineRescale,
        base_epoch: Epoch,
        alive: Callable[[WorkerId], bool],
    ) -> PipelineBuildCall | None:
        members = pools.members(state, p, (w for w in state.active_workers() if alive(w)))
        if not members:
            return None  # nobody in the pool to build: never another pool's worker
        builder = self.builders.get(p.name)
        if builder not in members:
            # Another one once the builder is gone: the build is idempotent.
            builder = self.builders[p.name] = members[r.generation % len(members)]
        worker = state.workers[builder]
        cuts = tuple((p.first_slot + i, c) for i, c in enumerate(r.cuts) if c is not None)
        return PipelineBuildCall(
            pipeline=p.name,
            pipeline_incarnation=p.incarnation,
            generation=r.generation,
            worker_id=worker.worker_id,
            address=worker.address,
            incarnation=worker.incarnation,
            first_slot=r.first_slot,
            partitions=r.partitions,
            epoch=base_epoch,
            spec_sha256=r.spec_sha256,
            cuts=cuts,
        )
