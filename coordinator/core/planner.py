"""The leader's decisions as a pure planner, in the shape of etcd raft's RawNode/Ready.

Owns every decision the leader makes: failure detection, assignment, rebalance on join,
migration steps, drains, retirement of departed workers (`coordinator/core/retirement.py`),
a rescale's cut and build calls (`coordinator/core/rescale_plans.py`, and each recorded
pipeline's, `coordinator/core/pipeline_rescale_plans.py`), host retries and
checkpoint rounds, plus the admin planning
queries (balance, explicit moves, drain plans, dry runs). It reads no clock, does no I/O and
takes its randomness from the `Rng` (a `random.Random`) it is given, so the simulation, the
scenario files and the duty loop (`coordinator/service/duties.py`) run the same decisions.
What it hands out and gets back (Batch, worker calls and their results, commit outcomes) is
`coordinator/core/effects.py`'s vocabulary; its settings are
`coordinator/core/planner_settings.py`'s, and the stages that read the whole cluster
(failures, assignment, balance, migrations, drains) are `coordinator/core/stages.py`'s
functions, which this module runs in the order below.

What it keeps in memory (never replicated; a new leader builds a fresh Planner and rolls
forward whatever the applied state says is pending): heartbeat liveness and load (seeded
with every owning worker at construction, so a failover never kills anyone), the holds of
workers that said they are restarting, retry schedules, checkpoint rounds
(`coordinator/core/rounds.py`) and the worker calls it has handed out and not yet heard
back.

A restarting worker is held for `rejoin_grace_ms` (`restarting`): no death verdict, no
calls, nothing new placed on it, no balance or admin move of its partitions or into it, and
no migration touching it started, so when it registers again (the state machine re-hosts
what it owns under new epochs) it has exactly what it had. The hold ends at its
registration, at an operator's drain (`left`), or at the grace's end, after which its last
heartbeat judges it as any other worker's would.

Driving it: `plan` returns a Batch; `coordinator/core/executor.py`'s `BatchRun` commits its
commands, reports each outcome back through `committed` and hands out its calls, whose
replies come back through `on_result`; plan again by the run's wake-up (or sooner when a
result arrives). Every driver (the duty loop, the simulation, the scenario files) runs it.

Ordering rules of a Batch (what an executor may rely on, like raft's Ready):

1. A batch carries the commands of ONE planning stage, all computed from the same applied
   state. Stages run in a fixed order -- results of worker calls (PartitionOnline,
   HandOff), fallbacks for checkpoints that cannot be loaded (FallBack, MarkStuck),
   bootstrap, failure detection, assignment, the end of a rescale (`default`'s and every
   recorded pipeline's), the end of a timed maintenance, rebalance on join (none while
   `default`'s rescale is in flight; a pipeline's pauses nothing), migration steps,
   drains, retirement -- and the first stage that has commands ends
   the batch. Its `wake_at_ms` is then `now_ms`: plan again once the commands are applied,
   so every later stage sees the state its predecessors produced.
2. Commands are committed in the order given, each after the previous one's outcome is
   known; every command is reported back through `committed` -- the first non-Ok outcome
   stops the batch and the remaining ones are reported SKIPPED (`BatchRun` keeps this rule).
3. Worker calls appear only in a batch without commands, so a call never runs ahead of a
   command that would change what it says (an epoch, an owner). Calls are independent of
   each other and may run concurrently; each reply is fed back through `on_result`.
4. A stage whose commands equal (timestamps aside) the batch just returned made no progress
   with them (a no-op): it is passed over once, so it cannot starve the later stages and the
   calls with an endless run of batches.
5. `wake_at_ms` is the latest time at which `plan` must be called again; calling it earlier
   (say when a result arrives) is always allowed.

Time: `now_ms` is monotonic (liveness, retries, rounds); `wall_ms` is stamped into commands
as their timestamp and compared with nothing but the departure stamps retirement reads
(a departed worker's record, not a safety decision: coordinator/core/retirement.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from coordinator.core import stages
from coordinator.core.backoff import BackoffPolicy, RetrySchedule, Rng
from coordinator.core.call_plans import CallPlans
from coordinator.core.cluster import ClusterState
from coordinator.core.commands import (
    Bootstrap,
    Command,
    DeclareDead,
    HandOff,
    Move,
    PartitionOnline,
    Rejected,
)
from coordinator.core.effects import (
    Batch,
    BuildDone,
    CommitOutcome,
    CutDone,
    HostDone,
    PipelineBuildCall,
    PipelineCutCall,
    ReleaseDone,
    ReleaseOutcome,
    UnwarmDone,
    WarmDone,
    WorkerResult,
    call_key,
)
from coordinator.core.fallback import FallbackPolicy, UnavailableCounts, fallbacks_due
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.load import LoadBook
from coordinator.core.maintenance_timer import MaintenanceTimer
from coordinator.core.model import (
    OWNING_WORKER_STATES,
    MigrationId,
    PartitionEpoch,
    WorkerId,
)
from coordinator.core.move_plans import MovePlans
from coordinator.core.pipeline_rescale_plans import PipelineRescalePlans
from coordinator.core.planner_settings import PlannerSettings
from coordinator.core.rescale_plans import RescalePlans
from coordinator.core.retirement import due as retirements_due
from coordinator.core.rounds import CheckpointRounds
from coordinator.core.warmups import WarmUps

__all__ = ["Planner", "PlannerSettings"]


def _timeless(cmd: Command) -> tuple[object, ...]:
    """The command without its timestamp: what two plans' commands compare on."""
    return (type(cmd), *(getattr(cmd, f.name) for f in fields(cmd) if f.name != "now_ms"))


@dataclass(slots=True)
class _Pending:
    """A command a worker result asked for, and the call key it keeps busy until committed."""

    command: Command
    key: tuple[str, object]


class Planner:
    """Mutable but pure: time and randomness come in, commands and calls go out."""

    def __init__(
        self,
        settings: PlannerSettings,
        rng: Rng,
        state: ClusterState,
        now_ms: int,
    ) -> None:
        self.settings = settings
        self.rng = rng
        self.detector = Detector(
            suspect_after_ms=settings.suspect_after_ms, dead_after_ms=settings.dead_after_ms
        )
        policy = BackoffPolicy(
            base_ms=settings.host_retry_base_ms, cap_ms=settings.host_retry_cap_ms
        )
        self.host_retry: RetrySchedule[PartitionEpoch] = RetrySchedule(policy)
        self.release_retry: RetrySchedule[MigrationId] = RetrySchedule(policy)
        self.unavailable = UnavailableCounts()
        self.fallback_policy = FallbackPolicy(
            after_failures=settings.fallback_after_failures,
            full_replay=settings.full_replay_fallback,
        )
        self.rounds = CheckpointRounds(interval_ms=settings.checkpoint_interval_ms)
        self.warmups = WarmUps(settings.warm)
        self.loads = LoadBook(stale_after_ms=settings.load_stale_ms, now_ms=now_ms)
        self.maintenance_timer = MaintenanceTimer()
        self.moves = MovePlans(
            strategy=settings.strategy,
            virtual_nodes=settings.virtual_nodes,
            balance_tolerance=settings.balance_tolerance,
            detector=self.detector,
            loads=self.loads,
        )
        self.calls = CallPlans(
            calls_max=settings.calls_max,
            detector=self.detector,
            host_retry=self.host_retry,
            release_retry=self.release_retry,
            warmups=self.warmups,
            rounds=self.rounds,
            rng=rng,
        )
        self.rescales = RescalePlans()
        self.pipeline_rescales = PipelineRescalePlans()
        # The calls in flight, keyed by call_key: the call plans' set, shared.
        self.in_flight = self.calls.in_flight
        self._pending: list[_Pending] = []
        # The last batch's commands without timestamps, and how often a stage repeated them.
        self._last_shape: tuple[tuple[object, ...], ...] = ()
        self.repeats_skipped = 0
        # A fresh leader counts every owning worker as seen now: a failover kills nobody.
        self.detector.seed(
            (w.worker_id for w in state.workers.values() if w.state in OWNING_WORKER_STATES),
            now_ms,
        )

    # -- events -------------------------------------------------------------------------------

    def registered(self, worker_id: WorkerId, now_ms: int) -> None:
        """A (re)registration counts as being heard from, with no load reported yet; it
        ends a restart's hold (the state machine re-hosted the worker's partitions)."""
        self.detector.observe(worker_id, now_ms, 0.0)
        self.detector.unhold(worker_id)
        self.loads.heard(worker_id)

    def restarting(self, worker_id: WorkerId, now_ms: int) -> int:
        """The worker said it is restarting: hold it and its partitions for the rejoin
        grace. Returns when the hold ends (monotonic ms). The caller checked that the worker
        is ACTIVE at its current incarnation (a DRAINING one is leaving, not restarting)."""
        until = now_ms + self.settings.rejoin_grace_ms
        if self.detector.status(worker_id, now_ms) is None:
            # Not heard of yet (a leader newer than its last heartbeat): it is, just now.
            self.detector.seed((worker_id,), now_ms)
        self.detector.hold(worker_id, until)
        return until

    def left(self, worker_id: WorkerId) -> None:
        """An operator drained the worker: a leave ends its restart's hold, so its last
        heartbeat judges it again (and if it is gone, its partitions move now)."""
        self.detector.unhold(worker_id)

    def stalled(self, total_ms: int) -> None:
        """The leader's event loop has been stalled `total_ms` in all (the service measures
        it on the monotonic clock): no worker's silence is judged to include it, within the
        detector's bound (`coordinator/core/liveness.py`)."""
        self.detector.stalled(total_ms)

    def heartbeat(self, worker_id: WorkerId, load: float, now_ms: int) -> bool:
        """Record a heartbeat; True when the reply must ask for a checkpoint (the leader's
        last request to this worker did not get through)."""
        self.detector.observe(worker_id, now_ms, load)
        self.loads.heard(worker_id)
        return self.rounds.heard(worker_id)

    def partition_loads(
        self,
        state: ClusterState,
        worker_id: WorkerId,
        reports: Iterable[tuple[int, int, float, int | None]],
        now_ms: int,
    ) -> int:
        """A heartbeat's (partition, epoch, rate, lag) reports; only the owner's, at the
        current epoch, are kept. Returns how many were."""
        kept = 0
        self.loads.follow(state.routing_generation)
        for partition, epoch, rate, lag in reports:
            if not 0 <= partition < state.total_partitions:
                continue
            part = state.partitions[partition]
            if part.owner == worker_id and part.epoch == epoch:
                self.loads.record(partition, rate, lag, now_ms)
                kept += 1
        return kept

    def on_result(self, result: WorkerResult, now_ms: int, wall_ms: int) -> None:
        key = call_key(result.call)
        if isinstance(result, HostDone):
            call = result.call
            if not result.ok:
                self.in_flight.discard(key)
                self.host_retry.failed((call.partition, call.epoch), now_ms, self.rng)
                self.unavailable.observe(
                    (call.partition, call.epoch), result.code or "", result.message
                )
                return
            self.unavailable.forget((call.partition, call.epoch))
            cmd: Command = PartitionOnline(
                partition=call.partition, epoch=call.epoch, owner=call.worker_id, now_ms=wall_ms
            )
            self._pending.append(_Pending(command=cmd, key=key))
        elif isinstance(result, ReleaseDone):
            if result.outcome is ReleaseOutcome.FAILED:
                self.in_flight.discard(key)
                self.release_retry.failed(result.call.migration_id, now_ms, self.rng)
                return
            self.release_retry.forget(result.call.migration_id)
            # RELEASED without a usable checkpoint, or REFUSED: keep the last accepted one.
            cmd = HandOff(
                migration_id=result.call.migration_id, checkpoint=result.checkpoint, now_ms=wall_ms
            )
            self._pending.append(_Pending(command=cmd, key=key))
        elif isinstance(result, WarmDone):
            self.in_flight.discard(key)
            self.warmups.observe(result, now_ms)
        elif isinstance(result, UnwarmDone):
            self.in_flight.discard(key)  # asked once: a copy left behind idles out
        elif isinstance(result, CutDone):
            c = result.call
            if not (result.ok and result.done and result.uri):
                self.in_flight.discard(key)
                self._rescale_plans_of(result).answered(key, now_ms)
                return
            cmd = c.recorded(result.offset, result.uri, wall_ms)
            self._pending.append(_Pending(command=cmd, key=key))
        elif isinstance(result, BuildDone):
            b = result.call
            if not (result.ok and result.done):
                self.in_flight.discard(key)
                self._rescale_plans_of(result).answered(key, now_ms)
                return
            cmd = b.built(result.checkpoints, wall_ms)
            self._pending.append(_Pending(command=cmd, key=key))
        else:
            self.in_flight.discard(key)
            if not result.ok:
                self.rounds.missed.add(result.call.worker_id)

    def _rescale_plans_of(self, result: CutDone | BuildDone) -> RescalePlans | PipelineRescalePlans:
        recorded = isinstance(result.call, PipelineCutCall | PipelineBuildCall)
        return self.pipeline_rescales if recorded else self.rescales

    def committed(self, cmd: Command, outcome: CommitOutcome, now_ms: int) -> None:
        """The outcome of one command of the last batch (every command is reported)."""
        if isinstance(cmd, DeclareDead) and outcome is CommitOutcome.OK:
            for w in cmd.worker_ids:
                self.detector.forget(w)
        for i, pending in enumerate(self._pending):
            if pending.command is not cmd:
                continue
            del self._pending[i]
            self.in_flight.discard(pending.key)
            if isinstance(cmd, PartitionOnline):
                key = (cmd.partition, cmd.epoch)
                if outcome is CommitOutcome.OK:
                    self.host_retry.succeeded(key)
                elif outcome is CommitOutcome.REJECTED:
                    # An ack for an old epoch changes nothing: the partition moved on.
                    self.host_retry.forget(key)
                else:
                    self.host_retry.failed(key, now_ms, self.rng)
            # A HandOff that did not commit: the migration is still RELEASING, so the next
            # plan asks the source again (its release is idempotent).
            return

    # -- liveness queries ---------------------------------------------------------------------

    def liveness(self, worker_id: str, now_ms: int) -> Liveness | None:
        return self.detector.status(worker_id, now_ms)

    def load(self, worker_id: str) -> float | None:
        return self.detector.load(worker_id)

    def _paused(self, worker_id: str, now_ms: int) -> bool:
        return self.detector.status(worker_id, now_ms) is not Liveness.ALIVE

    # -- admin queries (pure: the API commits what they return; coordinator/core/move_plans.py)

    def eligible(
        self, state: ClusterState, now_ms: int, exclude: Iterable[str] = ()
    ) -> list[WorkerId]:
        return self.moves.eligible(state, now_ms, exclude)

    def balance_moves(self, state: ClusterState, now_ms: int) -> tuple[Move, ...]:
        return self.moves.balance_moves(state, now_ms)

    def plan_reassign(
        self,
        state: ClusterState,
        now_ms: int,
        *,
        balance: bool,
        moves: Iterable[tuple[int, str]] = (),
    ) -> tuple[Move, ...] | Rejected:
        return self.moves.plan_reassign(state, now_ms, balance=balance, moves=moves)

    def plan_drain(
        self, state: ClusterState, worker_id: WorkerId, now_ms: int
    ) -> tuple[Move, ...] | Rejected:
        return self.moves.plan_drain(state, worker_id, now_ms)

    # -- the batch ----------------------------------------------------------------------------

    def plan(self, state: ClusterState, now_ms: int, wall_ms: int) -> Batch:
        stages = (
            self._results,
            self._fallbacks,
            self._bootstrap,
            self._detect_failures,
            self._assign_unassigned,
            self._assign_pipelines,
            self._finish_rescale,
            self._maintenance_expiry,
            self._rebalance_on_join,
            self._migrations,
            self._drains,
            self._retirements,
        )
        for stage in stages:
            commands = stage(state, now_ms, wall_ms)
            if not commands:
                continue
            shape = tuple(_timeless(c) for c in commands)
            if shape == self._last_shape:
                # The same commands as the batch before: they changed nothing that stage
                # reads (a no-op), so let the later stages and the calls have this batch
                # rather than spin on them; they come back at the next plan.
                self._last_shape = ()
                self.repeats_skipped += 1
                continue
            self._last_shape = shape
            return Batch(commands=commands, wake_at_ms=now_ms)
        self._last_shape = ()
        calls = [
            *self.calls.release_calls(state, now_ms),
            *self.calls.host_calls(state, now_ms),
            *self.calls.warm_calls(state, now_ms),
            *self.calls.unwarm_calls(state, now_ms),
            *self.rescales.calls(
                state,
                now_ms,
                self.in_flight,
                self.calls.claim,
                lambda w: not self._paused(w, now_ms),
            ),
            *self.pipeline_rescales.calls(
                state,
                now_ms,
                self.in_flight,
                self.calls.claim,
                lambda w: not self._paused(w, now_ms),
            ),
            *self.calls.checkpoint_calls(state, now_ms),
        ]
        return Batch(calls=tuple(calls), wake_at_ms=now_ms + self.settings.tick_ms)

    def _results(self, _state: ClusterState, _now: int, _wall: int) -> tuple[Command, ...]:
        return tuple(p.command for p in self._pending)

    def _fallbacks(self, state: ClusterState, _now: int, wall: int) -> tuple[Command, ...]:
        """Partitions whose owner keeps failing to load their checkpoint walk down the
        fallback chain: an older checkpoint, a full replay, or stuck."""
        rescaled = state.routing_generation > 0
        return tuple(
            fallbacks_due(state.partitions, self.unavailable, self.fallback_policy, wall, rescaled)
        )

    def _retirements(self, state: ClusterState, _now: int, wall: int) -> tuple[Command, ...]:
        s = self.settings
        cmd = retirements_due(state, wall, s.retire_after_ms, s.retire_batch_max)
        return () if cmd is None else (cmd,)

    def _bootstrap(self, state: ClusterState, _now: int, wall: int) -> tuple[Command, ...]:
        if state.total_partitions > 0:
            return ()
        return (Bootstrap(total_partitions=self.settings.total_partitions, now_ms=wall),)

    def _detect_failures(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.detect_failures(self.detector, self.moves, state, now, wall)

    def _assign_unassigned(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.assign_unassigned(self.settings, self.moves, state, now, wall)

    def _assign_pipelines(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.assign_pipelines(self.moves, state, now, wall)

    def _finish_rescale(self, state: ClusterState, _now: int, wall: int) -> tuple[Command, ...]:
        return (*self.rescales.finish(state, wall), *self.pipeline_rescales.finish(state, wall))

    def _maintenance_expiry(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return self.maintenance_timer.expiry(state, now, wall)

    def _rebalance_on_join(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.rebalance_on_join(
            self.settings, self.detector, self.loads, self.moves, state, now, wall
        )

    def _migrations(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.migrations(self.settings, self.detector, self.warmups, state, now, wall)

    def _drains(self, state: ClusterState, now: int, wall: int) -> tuple[Command, ...]:
        return stages.drains(self.moves, state, now, wall)
