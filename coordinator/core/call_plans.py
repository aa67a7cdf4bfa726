"""Which calls the leader makes to workers in a planning round: release a migration's source,
host a partition on its owner, ask a warming target how far it is, tell a target whose warm
move ended without a hand-off to drop its copy, ask for a checkpoint.

Owns the set of calls in flight (one per call key; at most `calls_max`): a call is claimed
before it goes out and freed by the planner when its result is in, so no call is made twice
at once and a failover's burst of host calls cannot starve the rest past the cap. Warm
calls take at most WARM_CALLS_SHARE of the cap: a target holds its answer for up to a
micro-batch (`WarmRequest.hold_s`), and held calls must not keep host, release and
checkpoint calls waiting. Reads the planner's liveness detector, retry schedules, warm-ups
and checkpoint rounds; changes only the in-flight set, the retry schedules it forgets and
the rounds' misses.
"""

from __future__ import annotations

from coordinator.core.backoff import RetrySchedule, Rng
from coordinator.core.cluster import ClusterState
from coordinator.core.effects import (
    CheckpointCall,
    HostCall,
    ReleaseCall,
    UnwarmCall,
    WarmCall,
    WorkerCall,
    call_key,
)
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.model import (
    OWNING_WORKER_STATES,
    MigrationId,
    MigrationPhase,
    PartitionEpoch,
    PartitionStatus,
    WorkerState,
)
from coordinator.core.rounds import CheckpointRounds
from coordinator.core.warmups import WarmUps

__all__ = ["WARM_CALLS_SHARE", "CallPlans"]

# The share of the leader's calls in flight that warm calls may hold at once (at least one).
WARM_CALLS_SHARE = 0.5


class CallPlans:
    """The worker calls of a round, within the in-flight cap."""

    def __init__(
        self,
        *,
        calls_max: int,
        detector: Detector,
        host_retry: RetrySchedule[PartitionEpoch],
        release_retry: RetrySchedule[MigrationId],
        warmups: WarmUps,
        rounds: CheckpointRounds,
        rng: Rng,
    ) -> None:
        self.calls_max = calls_max
        self.detector = detector
        self.host_retry = host_retry
        self.release_retry = release_retry
        self.warmups = warmups
        self.rounds = rounds
        self.rng = rng
        self.in_flight: set[tuple[str, object]] = set()
        # The warm calls of this leadership's warm moves still in flight, by migration: the
        # targets that may hold a copy to drop when the move ends without a hand-off.
        self.warmed: dict[MigrationId, WarmCall] = {}

    def _paused(self, worker_id: str, now_ms: int) -> bool:
        return self.detector.status(worker_id, now_ms) is not Liveness.ALIVE

    def claim(self, call: WorkerCall) -> bool:
        key = call_key(call)
        if key in self.in_flight or len(self.in_flight) >= self.calls_max:
            return False
        self.in_flight.add(key)
        return True

    def release_calls(self, state: ClusterState, now: int) -> list[WorkerCall]:
        out: list[WorkerCall] = []
        releasing = set()
        for x in state.in_flight_migrations():
            if x.phase is not MigrationPhase.RELEASING:
                continue
            releasing.add(x.migration_id)
            target = state.workers.get(x.target)
            if target is None or target.state is not WorkerState.ACTIVE:
                continue  # the migrations stage aborts it
            if self._paused(x.source, now) or not self.release_retry.due(x.migration_id, now):
                continue
            if self.detector.held(x.target, now):
                continue  # the source keeps its gate open until the target is back
            source = state.workers[x.source]
            call = ReleaseCall(
                migration_id=x.migration_id,
                partition=x.partition,
                epoch=state.partitions[x.partition].epoch,
                worker_id=source.worker_id,
                address=source.address,
                incarnation=source.incarnation,
            )
            if self.claim(call):
                out.append(call)
        # A migration that ended some other way (its source died, an abort) after a failed
        # release: its schedule would otherwise stay for the whole leadership.
        for mid in self.release_retry.pending():
            if mid not in releasing:
                self.release_retry.forget(mid)
        return out

    def host_calls(self, state: ClusterState, now: int) -> list[WorkerCall]:
        out: list[WorkerCall] = []
        live_keys = set()
        for p in state.partitions:
            if p.status is not PartitionStatus.ASSIGNING:
                continue
            key = (p.partition, p.epoch)
            live_keys.add(key)
            if p.owner is None or not self.host_retry.due(key, now):
                continue
            worker = state.workers.get(p.owner)
            if worker is None or worker.state not in OWNING_WORKER_STATES:
                continue
            if self._paused(p.owner, now):
                continue  # SUSPECTED: wait; DEAD: the failure stage takes it over
            call = HostCall(
                partition=p.partition,
                epoch=p.epoch,
                worker_id=worker.worker_id,
                address=worker.address,
                incarnation=worker.incarnation,
                checkpoint=p.checkpoint,
                routing=state.routing,
            )
            if ("host", key) in self.in_flight:
                continue
            if not self.claim(call):
                break
            out.append(call)
        for key in self.host_retry.pending():
            if key not in live_keys:
                self.host_retry.forget(key)
        return out

    def warm_calls(self, state: ClusterState, now: int) -> list[WorkerCall]:
        """Ask each WARMING migration's target how far it is (the first ask starts it)."""
        out: list[WorkerCall] = []
        room = max(1, int(self.calls_max * WARM_CALLS_SHARE))
        room -= sum(1 for kind, _ in self.in_flight if kind == "warm")
        for x in state.in_flight_migrations():
            if room <= 0:
                break
            if x.phase is not MigrationPhase.WARMING:
                continue
            target = state.workers.get(x.target)
            if target is None or target.state is not WorkerState.ACTIVE:
                continue  # the migrations stage aborts it
            if self._paused(x.target, now) or not self.warmups.poll_due(x.migration_id, now):
                continue
            call = WarmCall(
                migration_id=x.migration_id,
                partition=x.partition,
                worker_id=target.worker_id,
                address=target.address,
                incarnation=target.incarnation,
                checkpoint=state.partitions[x.partition].checkpoint,
                routing=state.routing,
            )
            if self.claim(call):
                out.append(call)
                room -= 1
                self.warmed[x.migration_id] = call
        return out

    def unwarm_calls(self, state: ClusterState, now: int) -> list[WorkerCall]:
        """Tell the target of each warm move that left flight without handing the partition
        to it (aborted, or its source or target failed) to drop its copy, once: a copy the
        call misses idles out on the worker anyway."""
        out: list[WorkerCall] = []
        in_flight = {x.migration_id for x in state.in_flight_migrations()}
        for mid, warm in list(self.warmed.items()):
            if mid in in_flight:
                continue
            p = warm.partition
            handed = p in state.partitions and state.partitions[p].owner == warm.worker_id
            target = state.workers.get(warm.worker_id)
            if (
                handed  # the target hosts it: its host call took the copy or dropped it
                or target is None
                or target.state is not WorkerState.ACTIVE
                or target.incarnation != warm.incarnation  # a new process holds no copy
            ):
                del self.warmed[mid]
                continue
            if self._paused(warm.worker_id, now):
                continue
            call = UnwarmCall(
                migration_id=mid,
                partition=p,
                worker_id=warm.worker_id,
                address=target.address,
                incarnation=target.incarnation,
            )
            if self.claim(call):
                del self.warmed[mid]
                out.append(call)
        return out

    def checkpoint_calls(self, state: ClusterState, now: int) -> list[WorkerCall]:
        out: list[WorkerCall] = []
        for wid in self.rounds.scan(state, now, self.rng, lambda w: self._paused(w, now)):
            w = state.workers[wid]
            call = CheckpointCall(worker_id=wid, address=w.address, incarnation=w.incarnation)
            if self.claim(call):
                out.append(call)
            elif call_key(call) not in self.in_flight:
                # Refused by the in-flight cap (say a failover's host calls fill it): the
                # round was spent, so without this the worker would wait a whole interval.
                # Its next heartbeat reply asks instead, which costs no call at all.
                self.rounds.missed.add(wid)
        return out
