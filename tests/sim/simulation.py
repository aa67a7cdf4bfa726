"""A deterministic simulation of the coordinator: replicated cores, a Raft-like log, the
leader's real planner, scripted workers, a lossy network and a fake clock, all driven by ONE
seed.

What it owns: a model of everything around ``coordinator.core`` that the real service does
with I/O -- the replicated log (``replication/``), the leader's duty loop
(``coordinator/service/duties.py``: carry each batch through the log, make the calls, time
them out; the executor's rule itself is ``coordinator/core/executor.py``'s, run here too) and
the workers (``testkit/scripted_worker.py``) -- reduced to plain data and one
``random.Random``, plus the checkers. Leader and workers exchange the real call messages
(``shared/messages/``) as JSON, and an answer becomes the planner's result through the
leader's own translation (``coordinator/service/call_results.py``). It holds NO decision of
its own: failure detection, assignment, migrations, drains, host retries and checkpoint
rounds are ``coordinator.core.planner.Planner``'s, the one production runs; the real
``Machine`` and codec apply what it commits.

The invariant it keeps: ``Simulation(seed).run()`` is a pure function of ``seed``. Nothing
reads a wall clock, iteration is over lists or insertion-ordered dicts, and every choice comes
from ``self.rng``. A failure message always carries the seed, so ``Simulation(seed).run()``
replays it exactly.

The log model (Raft, simplified but with the parts that matter here):
- each replica has its own log of (term, entry); the leader appends, followers copy a prefix
  of the leader's log when a (lossy) append message gets through, truncating a divergent tail;
- an entry is committed once a majority holds it and it is from the leader's term (Raft's
  commit rule) -- committed entries are never lost;
- on a leader change the new leader is a replica holding every committed entry (Raft's
  election restriction); the old leader's uncommitted tail is overwritten when it catches up;
- a replica applies committed entries in order, and a new leader proposes nothing until it
  has applied its whole log up to the commit index (docs/design.md §3: "apply before serving");
- group commit: what the leader appended since it last replicated goes out as ONE batch entry
  (``replication.batch``); replicas c1, c2 apply it through ``replication.log.apply_entry``,
  c0 command by command with the per-command checks, and the per-index state hash holds the
  two paths to one state;
- a replica whose sync fails halts: what it wrote and did not sync is acknowledged to no one,
  it votes and applies nothing, and restarted it drops that unsynced tail and catches up
  (committed entries are checked to be synced on a majority after every replication).

Around the log: the store fails every call for a while (checkpoint writes and loads, source
reads; every checkpoint the state names must be an object a worker wrote) and loses objects
of checkpoint chains (bases and deltas, ``tests/sim/chains.py``: a host from a chain holding a
lost object answers checkpoint_unavailable, and every load is walked whole), and each replica
has a wall clock of its own, which steps: commands carry the leader's wall clock, the planner
decides on the monotonic one (a worker is declared dead only after dead_after_ms unheard).
"""

from __future__ import annotations

import hashlib
import random
import zlib
from dataclasses import dataclass, field
from typing import Any

from coordinator.core import pools
from coordinator.core.codec import decode_command, decode_result, encode_command
from coordinator.core.commands import (
    AbortMigration,
    AssignPartitions,
    Barrier,
    CheckpointReport,
    CheckpointsResult,
    Command,
    CreatePipeline,
    DeclareDead,
    DrainWorker,
    DropPipeline,
    FallBack,
    FinalizeVersion,
    FinishPipelineRescale,
    ForgetPipeline,
    MaintenanceOff,
    MaintenanceOn,
    MarkStuck,
    Ok,
    PausePipeline,
    PlanMigrations,
    ProfileWorker,
    RecordCheckpoints,
    RegisterWorker,
    Rejected,
    ReportVersions,
    ResumePipeline,
    RetireWorkers,
    StartPipelineRescale,
    StartRelease,
    StartRescale,
    StartWarm,
)
from coordinator.core.effects import (
    CommitOutcome,
    WorkerCall,
    call_key,
)
from coordinator.core.executor import BatchRun
from coordinator.core.invariants import (
    Ledger,
    View,
    gate_violations,
    settled_violations,
    state_violations,
    step_violations,
    view,
)
from coordinator.core.machine import Machine
from coordinator.core.model import (
    DEFAULT_PIPELINE,
    DEFAULT_PIPELINE_SETTINGS,
    Label,
    MaintenanceRecord,
    MigrationPhase,
    MigrationReason,
    Partition,
    PartitionStatus,
    PipelineName,
    PipelineState,
    RescalePhase,
    WorkerId,
    WorkerState,
)
from coordinator.core.pipeline_rescale import in_flight as pipeline_rescale_in_flight
from coordinator.core.planner import (
    Planner,
    PlannerSettings,
)
from coordinator.core.rescale import in_flight as rescale_in_flight
from coordinator.core.snapshot import encode_state
from coordinator.core.state import ClusterState
from coordinator.core.versions import COMMAND_SET_VERSION
from coordinator.core.warmups import WarmPolicy
from coordinator.service.call_results import request_of, result_of
from coordinator.service.pipeline_duty import leader_steps
from pipeline.source import generation_base, generation_of
from pipeline.spec.state_delta import DELTA
from replication.batch import decode_batch, decode_results, encode_batch, is_batch
from replication.log import apply_entry
from shared.messages.checkpoint import CheckpointReply
from shared.messages.common import Answer, ErrorReply, Fence, Outcome, WorkerReply
from shared.messages.host import HostReply, HostRequest
from shared.messages.pipeline_rescale import PipelineBuildRequest
from shared.messages.release import ReleasedCheckpoint, ReleaseReply, ReleaseRequest
from shared.messages.rescale import BuildReply, BuildRequest, BuiltCheckpoint, CutReply, CutRequest
from shared.messages.warm import UnwarmReply, UnwarmRequest, WarmReply, WarmRequest
from tests.planner_base import quick_settings
from tests.sim.balance_check import ShadowLoads, round_violations
from tests.sim.chains import BUILD_SESSION, Chains

OWNING = (WorkerState.ACTIVE, WorkerState.DRAINING)

# --- settings: every bound is named ---------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SimSettings:
    replicas: int = 3
    workers: int = 4
    total_partitions: int = 8
    min_cluster_size: int = 2
    step_ms: int = 100
    fault_steps: int = 400
    # Liveness phase: after every fault heals, everything must settle within this many steps.
    heal_steps_max: int = 600
    heartbeat_interval_ms: int = 300
    suspect_after_ms: int = 1_000
    dead_after_ms: int = 2_500
    # How long the leader holds a worker that said it is restarting.
    rejoin_grace_ms: int = 4_000
    checkpoint_interval_ms: int = 1_000
    host_retry_base_ms: int = 200
    host_retry_cap_ms: int = 2_000
    # A worker call with no answer by then fails (the executor's HTTP timeout).
    call_timeout_ms: int = 1_000
    max_concurrent_migrations: int = 2
    # Load-aware placement: each partition's input rate is a Zipf weight (its rank's, the
    # ranks shuffled by the seed) that drifts by up to rate_drift per heartbeat; workers
    # report it, and the leader rebalances on its own, by load when every rate is fresh.
    # Automatic balance is what maintenance mode pauses, so pausing it is checked too.
    rebalance_on_join: bool = True
    rate_exponent: float = 1.0
    rate_drift: float = 0.2
    load_stale_ms: int = 1_500
    max_migrations_per_worker: int = 1
    # The operator turns maintenance mode on or off (per step, fault phase); an "on" ends by
    # itself after up to maintenance_ms_max half of the time.
    p_maintenance: float = 0.02
    # Until the cluster is finalized at the command-set version of maintenance mode, the
    # chance per step that the leader takes the next step there (a report, the finalize).
    p_upgrade: float = 0.1
    maintenance_ms_max: int = 5_000
    # Fault probabilities per step (fault phase only).
    p_leader_change: float = 0.02
    p_worker_crash: float = 0.005
    p_worker_pause: float = 0.008
    p_worker_restart: float = 0.03
    # A worker stops as SIGTERM stops it: its last checkpoints reported, the restart notice
    # sent, down; it comes back (registering as itself) after up to restart_ms_max, which
    # is longer than the grace, so some come back in time and some do not.
    p_worker_graceful_restart: float = 0.004
    restart_ms_max: int = 6_000
    p_admin_moves: float = 0.03
    # Warm hand-offs (coordinator/core/warmups.py): seeds alternate warm and cold moves. A
    # warming target answers "loading" first, then a lag that is within the bound with
    # p_warm_caught_up per answer, and refuses with p_warm_refused.
    warm_timeout_ms: int = 3_000
    warm_lag_records_max: int = 10
    warmups_max: int = 2
    warmups_per_worker_max: int = 1
    p_warm_caught_up: float = 0.5
    p_warm_refused: float = 0.05
    p_admin_abort: float = 0.01
    # The operator rescales to a random count up to rescale_partitions_max (per step, fault
    # phase, once the cluster speaks command-set version 4 and no rescale is in flight).
    # Workers seal at their current offset, process up to it and answer the cut once there;
    # a build answers "not yet" with p_build_pending, then deterministic checkpoints.
    p_rescale: float = 0.01
    rescale_partitions_max: int = 12
    p_build_pending: float = 0.5
    p_admin_drain: float = 0.004
    p_stale_report: float = 0.05
    # The store loses one object of an accepted checkpoint's chain (an emptied or damaged
    # store): a base or a delta, the referenced one or an ancestor. Hosts from a chain that
    # holds it answer checkpoint_unavailable and the planner must walk the fallback chain.
    p_lose_checkpoint: float = 0.01
    # Checkpoints are bases and deltas (tests/sim/chains.py): a new base past this many
    # deltas (the product's COMPACT_DELTAS_MAX is 32: a short run should compact often) or
    # past the product's size fraction.
    compact_deltas_max: int = 4
    # Churn (off unless set): per step, one live worker departs for good and a worker under
    # a fresh id joins. Half the departed crash and never return; the other half pause past
    # their retirement and come back as zombies with their old incarnation, gates and
    # reports, which must all be fenced. The leader retires departed workers after
    # retire_after_ms (0: never), which needs command-set version 3, so such a run first
    # reports and finalizes the versions as the real nodes do.
    p_worker_churn: float = 0.0
    retire_after_ms: int = 0
    zombie_ms_max: int = 3_000
    # Network partitions: one node (a replica or a worker) cut off from everyone for up to
    # cut_ms_max; a cut-off leader is deposed with this chance per step (election timeout).
    p_cut: float = 0.02
    cut_ms_max: int = 3_000
    p_cut_leader_deposed: float = 0.2
    # Per message.
    p_drop: float = 0.1
    p_duplicate: float = 0.05
    delay_ms_max: int = 400
    # Per step, per follower: an append message from the leader gets through.
    p_append: float = 0.7
    # A replica's journal sync fails (docs/reliability.md, "5. Faults past kill -9"): it
    # halts for good -- no acknowledgement of what it wrote, no vote, no part in the log --
    # until it is started again after up to halt_ms_max, when it drops its unsynced tail
    # and catches up. Per
    # sync (a leader's before it sends, a follower's on an append), at most one halted.
    p_sync_halt: float = 0.002
    halt_ms_max: int = 4_000
    # The store fails every call for up to store_outage_ms_max (per step): errors or
    # timeouts, on checkpoint writes and reads and source reads alike; workers retry.
    p_store_outage: float = 0.01
    store_outage_ms_max: int = 2_500
    # A replica's wall clock steps by clock_step_ms, forward or back (per step): what it
    # stamps into commands moves, what decides liveness and expiries (monotonic) does not.
    p_clock_step: float = 0.01
    clock_step_ms: int = 3_600_000
    # A deliberately broken Raft (any replica may win an election), so a test can show the
    # checker catches lost committed entries. Never set outside that test.
    unsafe_election: bool = False
    # A deliberately broken journal: a follower whose sync failed acknowledges the append
    # anyway. Never set outside the test that shows the durability check catches it.
    unsafe_ack_unsynced: bool = False
    # Recorded pipelines (once the cluster speaks command-set version 5): per step of the
    # fault phase, the operator creates one (up to pipelines_max at once, each of up to
    # pipeline_partitions_max partitions, its pool every worker, zone=a or zone=b), pauses,
    # resumes or drops one. Every worker declares a profile (its zone by its id, and
    # worker_slots_min..max slots), and the leader sets pipelines up and tears them down.
    p_pipeline: float = 0.02
    pipelines_max: int = 3
    pipeline_partitions_max: int = 4
    worker_slots_min: int = 2
    worker_slots_max: int = 6
    # Per step of the fault phase, the operator rescales an ACTIVE recorded pipeline with no
    # rescale in flight to a random count up to pipeline_partitions_max; a draw of its own
    # count updates its spec instead (a new text, at the same count). Its workers cut and
    # build as `default`'s do.
    p_pipeline_rescale: float = 0.02


_PLANNED = MigrationPhase.PLANNED
RESCALE_STREAM = 1_000_003  # offset of the rescale stream's seed from the run's
FAULT_STREAM = 2_000_003  # offset of the sync, store and clock faults' stream
PIPELINE_STREAM = 3_000_003  # offset of the operator's pipeline changes' stream
# What a recorded pipeline's spec is in the simulation: apply checks only its hash.
SIM_SPEC = """[schema]
ddl = "k STRING, v DOUBLE"
key = "k"

[[aggregations]]
name = "n"
fn = "count"
"""
ZONES = ("a", "b")


def sim_spec(version: int) -> str:
    """Spec update `version`'s text: SIM_SPEC with one more aggregation, so each hashes
    apart from SIM_SPEC and from every other."""
    return f'{SIM_SPEC}\n[[aggregations]]\nname = "n{version}"\nfn = "count"\n'


# The wall clock's reading at the simulation's time 0 (2026-01-01), so a step back stays
# a plausible stamp.
WALL_EPOCH_MS = 1_767_225_600_000


class SafetyViolation(AssertionError):
    pass


# The sim names checkpoints its own way (`checkpoint_uri`), so no reply's checkpoint is fenced
# here; the fence itself is tests/unit/test_call_results.py's.
UNFENCED: Fence = lambda *_: None  # noqa: E731


# --- the fake network -------------------------------------------------------------------------


@dataclass(order=True)
class _Msg:
    at_ms: int
    seq: int
    dst: str = field(compare=False)
    kind: str = field(compare=False)
    body: dict[str, Any] = field(compare=False)


class Network:
    """Drops, delays (hence reorders) and duplicates messages; nodes in ``cut`` are isolated."""

    def __init__(self, rng: random.Random, s: SimSettings) -> None:
        self.rng = rng
        self.s = s
        self.queue: list[_Msg] = []
        self.seq = 0
        self.faulty = True
        self.cut: set[str] = set()
        self.sent = 0
        self.dropped = 0
        self.duplicated = 0

    def send(self, now_ms: int, src: str, dst: str, kind: str, body: dict[str, Any]) -> None:
        self.sent += 1
        copies = 1
        if self.faulty:
            if src in self.cut or dst in self.cut or self.rng.random() < self.s.p_drop:
                self.dropped += 1
                return
            if self.rng.random() < self.s.p_duplicate:
                self.duplicated += 1
                copies = 2
        for _ in range(copies):
            delay = self.rng.randint(0, self.s.delay_ms_max) if self.faulty else 0
            self.seq += 1
            self.queue.append(_Msg(now_ms + delay, self.seq, dst, kind, dict(body)))

    def due(self, now_ms: int) -> list[_Msg]:
        self.queue.sort()
        out = [m for m in self.queue if m.at_ms <= now_ms]
        self.queue = [m for m in self.queue if m.at_ms > now_ms]
        return out


# --- replicas and the log ----------------------------------------------------------------------


def state_hash(state: ClusterState) -> str:
    return hashlib.sha256(encode_state(state)).hexdigest()[:16]


class Replica:
    def __init__(self, name: str) -> None:
        self.name = name
        self.machine = Machine()
        self.log: list[tuple[int, bytes]] = []
        self.applied = 0
        # Result of every applied entry by request id: what the proposer's future resolves to.
        self.results: dict[str, bytes] = {}
        # How much of `log` is on disk: what it acknowledged, and what it keeps at a restart.
        self.synced = 0
        # Halted by a failed sync until then (None: running).
        self.halted_until_ms: int | None = None
        # Its wall clock's step from the true time (a clock step fault).
        self.wall_offset_ms = 0


# --- scripted workers ---------------------------------------------------------------------------


def checkpoint_uri(wid: str, p: int, epoch: int, offset: int) -> str:
    """The object a worker writes for partition ``p``'s state at ``offset`` under ``epoch``:
    one name per (partition, epoch, offset), as the product names them create-only
    (shared/checkpoint_ref.py), so that a later checkpoint is another object, which a lost
    one does not take with it, and a cut is the checkpoint at its offset."""
    return f"mem://{wid}/{p}/{epoch}/o{offset}"


def session_of(w: SimWorker, g: dict[str, int | bool]) -> str:
    """The session that writes gate `g`'s checkpoints: the worker's load that opened it."""
    return f"{w.wid}#{g['opened']}"


class SimWorker:
    """The scripted worker's contract, minus HTTP: gates per partition with epoch and offset."""

    def __init__(self, wid: str) -> None:
        self.wid = wid
        self.incarnation = 0
        self.registered = False
        self.alive = True
        self.paused_until_ms = -1
        # Departed for good (churn): never restarted, not even at the heal.
        self.gone = False
        self.gates: dict[int, dict[str, int | bool]] = {}
        # Openings numbered as the real worker's gates number them (pipeline/gate.py): a
        # heartbeat reply closes only gates opened before its request left.
        self.openings = 0
        self.next_heartbeat_ms = 0
        # Down for a restart it announced: when the process starts again (None: not one).
        self.back_at_ms: int | None = None
        # Migrations it holds a warm copy for (read-only: no gate, no epoch).
        self.warm: set[str] = set()

    def paused(self, now_ms: int) -> bool:
        return now_ms < self.paused_until_ms


# --- the leader's executor: the real planner decides ------------------------------------------


class Proposer:
    """The simulation's counterpart of coordinator/service/duties.py: it carries the REAL
    planner's batches over the simulated log and network and feeds every outcome back. It
    decides nothing itself; the operator's random admin actions go through the planner's
    admin queries, as the HTTP API's do."""

    def __init__(self, sim: Simulation, replica: Replica, term: int, now_ms: int) -> None:
        self.sim = sim
        self.replica = replica
        self.term = term
        self.planner: Planner | None = None
        # The batch being committed (the executor's rule is BatchRun's) and the command of
        # it on its way through the log, as (request id, command).
        self.run: BatchRun | None = None
        self.current: tuple[str, Command] | None = None
        # Calls sent and not answered: a reply after the deadline is a timed-out call.
        self.outstanding: dict[tuple[str, object], tuple[WorkerCall, int]] = {}
        # When the batch being committed was planned (its commands are what the planner
        # decided then: a hold that began while they go through the log is not theirs).
        self.planned_at = now_ms
        self.versions_sent = False
        # Maintenance mode as the planner saw it when it planned the batch being committed.
        self.paused_at_plan: MaintenanceRecord | None = None
        # The rescale in flight when the batch was planned (None: none was).
        self.rescaling_at_plan: int | None = None
        # The checker's own record of the load this leader accepted (balance_check.py).
        self.shadow = ShadowLoads(sim.s.load_stale_ms)
        # The checker's record of when this leader last heard each worker (monotonic), and
        # when its planner started (it counts every owning worker as heard then).
        self.heard: dict[str, int] = {}
        self.started_ms = now_ms
        # The furthest ahead of the true time its wall clock has been while it led.
        self.wall_ahead_ms_max = WALL_EPOCH_MS + replica.wall_offset_ms

    @property
    def ready(self) -> bool:
        return self.planner is not None

    @property
    def state(self) -> ClusterState:
        return self.replica.machine.state

    def submit(self, cmd: Command, planned_at: int | None = None) -> str:
        self.check_holds(cmd, self.sim.now_ms if planned_at is None else planned_at)
        if planned_at is not None:  # the planner's, not the operator's
            self.check_maintenance(cmd)
            self.check_throttles(cmd)
            self.check_liveness(cmd, planned_at)
        return self.sim.append(cmd)

    def check_liveness(self, cmd: Command, planned_at: int) -> None:
        """A worker is declared dead only once this leader has not heard it for longer than
        dead_after_ms on the monotonic clock: neither a store that fails calls nor a wall
        clock that steps makes anyone dead."""
        if not isinstance(cmd, DeclareDead):
            return
        for wid in cmd.worker_ids:
            quiet_ms = planned_at - self.heard.get(wid, self.started_ms)
            if quiet_ms <= self.sim.s.dead_after_ms:
                self.sim.fail(f"DeclareDead {wid} heard {quiet_ms} ms before (monotonic)")

    def check_maintenance(self, cmd: Command) -> None:
        """While maintenance mode is on the planner proposes no balance move (it saw the mode
        when it planned, and the mode is still that one), and it ends a timed one only once
        its time is up (the simulation's wall and monotonic clocks are one)."""
        record = self.state.maintenance
        if isinstance(cmd, PlanMigrations):
            if self.paused_at_plan is not None and record == self.paused_at_plan:
                self.sim.fail("PlanMigrations (automatic balance) while maintenance mode is on")
            r = self.state.rescale
            if (
                self.rescaling_at_plan is not None
                and rescale_in_flight(self.state)
                and r is not None
                and r.generation == self.rescaling_at_plan
            ):
                self.sim.fail("PlanMigrations (automatic balance) while a rescale is in flight")
            self.sim.stats["balance_plans"] += 1
        elif isinstance(cmd, MaintenanceOff) and record is not None:
            # Its end on the true clock: the stamp less the stamping clock's step. A leader
            # whose clock was further ahead than that reads the end as past, and ends it at
            # once (coordinator/core/maintenance_timer.py); any other ends it at its time.
            stamp_ahead_ms = self.sim.maintenance_stamps.get(record.since_ms, WALL_EPOCH_MS)
            early = record.until_ms is None or self.sim.now_ms < record.until_ms - stamp_ahead_ms
            if cmd.since_ms == record.since_ms and early:
                if self.wall_ahead_ms_max <= stamp_ahead_ms:
                    self.sim.fail("the leader ended maintenance mode before its time")
                self.sim.stats["maintenance_ended_by_step"] += 1
            self.sim.stats["maintenance_expired"] += 1

    def check_throttles(self, cmd: Command) -> None:
        """A migration's release starts only within the caps on migrations releasing or handed
        off (PLANNED and WARMING ones hold no slot: a warm-up's source still serves)."""
        if not isinstance(cmd, StartRelease):
            return
        mig = self.state.migrations.get(cmd.migration_id)
        if mig is None:
            return
        waiting = (_PLANNED, MigrationPhase.WARMING)
        active = [m for m in self.state.in_flight_migrations() if m.phase not in waiting]
        per_worker = self.sim.s.max_migrations_per_worker
        busy = [w for w in (mig.source, mig.target) for m in active if w in (m.source, m.target)]
        if len(active) >= self.sim.s.max_concurrent_migrations or any(
            busy.count(w) >= per_worker for w in (mig.source, mig.target)
        ):
            self.sim.fail(f"StartRelease {cmd.migration_id} beyond the move throttles")

    def check_holds(self, cmd: Command, planned_at: int) -> None:
        """What the leader proposes leaves a worker held for its restart alone: it is not
        declared dead, given partitions, made a migration's source or target, and no
        migration touching it is started (the planner's hold; docs/design.md §10). Held
        means held since before the command was planned and still now."""
        planner = self.planner
        if planner is None:
            return
        now, grace = self.sim.now_ms, self.sim.s.rejoin_grace_ms
        held = {
            w
            for w in self.state.active_workers()
            if planner.detector.held(w, now)
            and (planner.detector.hold_ends_ms(w) or 0) - grace <= planned_at
        }
        if not held:
            return
        touched: set[str] = set()
        if isinstance(cmd, DeclareDead):
            touched = set(cmd.worker_ids) | {a.owner for a in cmd.assignments if a.owner}
        elif isinstance(cmd, AssignPartitions):
            touched = {a.owner for a in cmd.assignments if a.owner}
        elif isinstance(cmd, PlanMigrations | DrainWorker):
            touched = {w for mv in cmd.moves for w in (mv.source, mv.target)}
        elif isinstance(cmd, StartRelease | StartWarm):
            m = self.state.migrations.get(cmd.migration_id)
            touched = set() if m is None else {m.source, m.target}
        if touched & held:
            self.sim.fail(f"{type(cmd).__name__} touches held workers {sorted(touched & held)}")

    def check_balance_round(self, planner: Planner, cmd: PlanMigrations, now: int) -> None:
        """A balance round by load when every partition's is fresh keeps the busiest worker
        no busier; one with any stale load balances counts (balance_check.py)."""
        state = self.state
        kind = round_violations(
            [p.owner for p in state.partitions.of(DEFAULT_PIPELINE)],
            cmd.moves,
            planner.eligible(state, now),
            self.shadow.weights(state.total_partitions, now, state.routing_generation),
        )
        self.sim.stats["weighted_rounds" if kind.weighted else "count_rounds"] += 1
        if kind.problems:
            self.sim.fail("; ".join(kind.problems))

    def send(self, dst: str, kind: str, body: dict[str, Any]) -> None:
        self.sim.net.send(self.sim.now_ms, self.sim.leader_name(), dst, kind, body)

    def tick(self, now: int) -> None:
        sim = self.sim
        if self.planner is None:
            if sim.own_uncommitted():
                return  # not until the takeover no-op has committed and everything is applied
            self.planner = Planner(sim.planner_settings, sim.rng, self.state, now)
            self.started_ms = now
        planner = self.planner
        wall = sim.wall_ms()
        ahead_ms = WALL_EPOCH_MS + self.replica.wall_offset_ms
        self.wall_ahead_ms_max = max(self.wall_ahead_ms_max, ahead_ms)
        if not self._commit_step(now):
            return  # a command of the batch is still on its way
        self._time_out_calls(planner, now)
        self._admin(planner, now)
        if self.current is not None:
            return
        if self._pipelines(now):
            return
        self._finalize_versions(now)
        self.planned_at = now
        self.paused_at_plan = self.state.maintenance
        r = self.state.rescale
        self.rescaling_at_plan = r.generation if rescale_in_flight(self.state) and r else None
        batch = planner.plan(self.state, now, wall)
        for cmd in batch.commands:
            if isinstance(cmd, PlanMigrations):  # the planner's own: a balance round
                self.check_balance_round(planner, cmd, now)
        self.run = BatchRun(planner, batch)
        if self._commit_step(now):
            for call in self.run.calls():
                self._send_call(call, now)

    def _finalize_versions(self, now: int) -> None:
        """What each real node and its leader do (coordinator/service/node.py): report the
        versions it speaks, then finalize the newest every voter speaks. Only in a run that
        retires: RetireWorkers needs the newest version."""
        sim, wall = self.sim, self.sim.wall_ms()
        if not sim.s.retire_after_ms or self.versions_sent:
            return
        if self.state.finalized_version >= COMMAND_SET_VERSION:
            return
        self.versions_sent = True
        names = tuple(r.name for r in sim.replicas)
        for name in names:
            self.submit(
                ReportVersions(
                    node_id=name,
                    min_version=1,
                    max_version=COMMAND_SET_VERSION,
                    package_version="sim",
                    now_ms=wall,
                )
            )
        self.submit(FinalizeVersion(version=COMMAND_SET_VERSION, voters=names, now_ms=wall))

    def _commit_step(self, now: int) -> bool:
        """Advance the batch being committed; True when nothing of it is left in flight."""
        run = self.run
        if run is None:
            return True
        if self.current is not None:
            rid, cmd = self.current
            if self.sim.own_uncommitted():
                return False
            raw = self.replica.results.get(rid)
            if raw is None:
                return False  # cannot happen while leading: the entry is applied
            self.current = None
            ok = isinstance(decode_result(raw), Ok)
            run.outcome(cmd, CommitOutcome.OK if ok else CommitOutcome.REJECTED, now)
        cmd = run.next_command()
        if cmd is None:
            return True
        self.current = (self.submit(cmd, self.planned_at), cmd)
        return False

    def _send_call(self, call: WorkerCall, now: int) -> None:
        """Send the call's real request as JSON, as the leader's HTTP client does; the key
        goes with it, as a connection ties an HTTP answer to its request."""
        key = call_key(call)
        self.outstanding[key] = (call, now + self.sim.s.call_timeout_ms)
        request = request_of(call, warm_hold_s=0.0)
        body = {"incarnation": call.incarnation, "key": key, "request": request.to_json()}
        partition = getattr(request, "partition", None)
        if partition is not None:
            body["partition"] = partition  # in the request's path
        self.send(call.worker_id, key[0], body)

    def _time_out_calls(self, planner: Planner, now: int) -> None:
        """An HTTP call with no answer by its deadline fails (aiohttp's total timeout)."""
        for key, (call, deadline) in list(self.outstanding.items()):
            if deadline > now:
                continue
            del self.outstanding[key]
            silent = Answer(outcome=Outcome.UNREACHABLE, body={"message": "timed out"})
            planner.on_result(result_of(call, silent, UNFENCED), now, self.sim.wall_ms())

    def _answer(self, key: tuple[str, object], now: int) -> WorkerCall | None:
        """The outstanding call a reply answers, or None (late, duplicate or unknown)."""
        entry = self.outstanding.pop(key, None)
        return None if entry is None else entry[0]

    def _answer_from(self, key: tuple[str, object], wid: str, now: int) -> WorkerCall | None:
        """As `_answer`, for a reply from `wid` only: another worker's reply (to an earlier
        call of the same key) leaves the outstanding call alone."""
        entry = self.outstanding.get(key)
        if entry is None or entry[0].worker_id != wid:
            return None
        return self._answer(key, now)

    def _admin(self, planner: Planner, now: int) -> None:
        """The operator: random moves and aborts through the same queries the API uses."""
        sim, state, wall = self.sim, self.state, self.sim.wall_ms()
        if not sim.faults_on or self.current is not None:
            return
        upgraded = state.finalized_version >= COMMAND_SET_VERSION
        if sim.rng.random() < (sim.s.p_maintenance if upgraded else sim.s.p_upgrade):
            self._maintenance(now)
            return
        if sim.rng.random() < sim.s.p_admin_moves:
            eligible = state.active_workers()
            wanted = []
            for p in state.partitions:
                if p.owner is None or p.migration is not None or len(eligible) < 2:
                    continue
                if sim.rng.random() < 0.3:
                    to = sim.rng.choice([w for w in eligible if w != p.owner] or eligible)
                    wanted.append((p.partition, to))
            moves = planner.plan_reassign(state, now, balance=False, moves=wanted)
            if wanted and not isinstance(moves, Rejected):
                admin = MigrationReason.ADMIN
                self.submit(PlanMigrations(moves=moves, reason=admin, now_ms=wall))
                return
        if sim.rng.random() < sim.s.p_admin_drain:
            active = state.active_workers()
            if len(active) > sim.s.min_cluster_size:
                wid = sim.rng.choice(active)
                drain = planner.plan_drain(state, wid, now)
                if not isinstance(drain, Rejected):
                    planner.left(wid)  # as the drain route does: a leave ends a hold
                    self.submit(DrainWorker(worker_id=wid, moves=drain, now_ms=wall))
                    sim.stats["drains"] += 1
                    return
        rescale_draw = sim.rescale_rng.random()
        if upgraded and not rescale_in_flight(state) and rescale_draw < sim.s.p_rescale:
            to = sim.rescale_rng.randint(1, sim.s.rescale_partitions_max)
            if to != state.total_partitions:
                self.submit(StartRescale(partitions=to, by="admin", now_ms=wall))
                sim.stats["rescales"] += 1
                return
        if sim.rng.random() < sim.s.p_admin_abort:
            in_flight = state.in_flight_migrations()
            if in_flight:
                m = sim.rng.choice(in_flight)
                note = "admin"
                self.submit(AbortMigration(migration_id=m.migration_id, note=note, now_ms=wall))

    def _pipelines(self, now: int) -> bool:
        """The leader's pipeline steps (coordinator/service/pipeline_duty.py), a profile for
        every ACTIVE worker without one (as a worker that runs recorded pipelines declares
        it after registering), then now and then the operator's rescale (or spec update),
        create, pause, resume or drop. At most one command; True when it submitted one."""
        sim, state, wall = self.sim, self.state, self.sim.wall_ms()
        if state.finalized_version < COMMAND_SET_VERSION:
            return False
        for cmd in leader_steps(state, wall, 1):  # the real duty's choice
            self.submit(cmd)
            if isinstance(cmd, ForgetPipeline):
                sim.stats["pipelines_dropped"] += 1
            return True
        for w in state.workers.values():
            if w.state is WorkerState.ACTIVE and w.profile is None:
                labels, slots = sim.profile_of(w.worker_id)
                self.submit(
                    ProfileWorker(
                        worker_id=w.worker_id,
                        incarnation=w.incarnation,
                        labels=labels,
                        slots=slots,
                        now_ms=wall,
                    )
                )
                return True
        r = sim.pipeline_rng
        if sim.faults_on and r.random() < sim.s.p_pipeline_rescale:
            rescale = self._pipeline_rescale(r, wall)
            if rescale is not None:
                self.submit(rescale)
                return True
        if not sim.faults_on or r.random() >= sim.s.p_pipeline:
            return False
        names = sorted(state.pipelines)
        draw = r.random()
        if draw < 0.4 and len(names) < sim.s.pipelines_max:
            sim.stats["pipelines_created"] += 1
            zone = r.choice((None, *ZONES))
            self.submit(
                CreatePipeline(
                    name=PipelineName(f"pl{sim.stats['pipelines_created']}"),
                    spec_text=SIM_SPEC,
                    spec_sha256=hashlib.sha256(SIM_SPEC.encode()).hexdigest(),
                    partitions=r.randint(1, sim.s.pipeline_partitions_max),
                    pool=() if zone is None else (Label(key="zone", value=zone),),
                    settings=DEFAULT_PIPELINE_SETTINGS,
                    by="admin",
                    now_ms=wall,
                )
            )
            return True
        if not names:
            return False
        p = state.pipelines[r.choice(names)]
        if draw < 0.8:
            switch = PausePipeline if p.state is PipelineState.ACTIVE else ResumePipeline
            self.submit(switch(name=p.name, by="admin", now_ms=wall))
        else:
            self.submit(DropPipeline(name=p.name, purge=r.random() < 0.5, by="admin", now_ms=wall))
        return True

    def _pipeline_rescale(self, r: random.Random, wall: int) -> StartPipelineRescale | None:
        """The operator's rescale of an ACTIVE recorded pipeline with none in flight, to a
        random count; drawn at its own count, a spec update (a new text, its sha256 given)
        instead. None when no pipeline may start one."""
        sim = self.sim
        ready = [
            p
            for _, p in sorted(self.state.pipelines.items())
            if p.state is PipelineState.ACTIVE and not pipeline_rescale_in_flight(p)
        ]
        if not ready:
            return None
        p = r.choice(ready)
        to = r.randint(1, sim.s.pipeline_partitions_max)
        text = ""
        if to == p.partitions:
            sim.stats["pipeline_spec_updates"] += 1
            text = sim_spec(sim.stats["pipeline_spec_updates"])
        sim.stats["pipeline_rescales"] += 1
        return StartPipelineRescale(
            name=p.name,
            incarnation=p.incarnation,
            partitions=to,
            spec_text=text,
            spec_sha256=hashlib.sha256(text.encode()).hexdigest() if text else "",
            by="admin",
            now_ms=wall,
        )

    def _maintenance(self, now: int) -> None:
        """The operator turns maintenance mode on (timed or not) or off; the first time, the
        cluster is brought to the command-set version that has it, as its leader would."""
        sim, state, wall = self.sim, self.state, self.sim.wall_ms()
        names = [r.name for r in sim.replicas]
        if state.finalized_version < COMMAND_SET_VERSION:
            missing = [n for n in names if n not in state.node_versions]
            if missing:
                self.submit(
                    ReportVersions(
                        node_id=missing[0],
                        min_version=1,
                        max_version=COMMAND_SET_VERSION,
                        package_version="sim",
                        now_ms=wall,
                    )
                )
            else:
                self.submit(
                    FinalizeVersion(version=COMMAND_SET_VERSION, voters=tuple(names), now_ms=wall)
                )
            return
        if state.maintenance is None:
            until = None
            if sim.rng.random() < 0.5:
                until = wall + sim.rng.randint(1, sim.s.maintenance_ms_max)
            self.submit(MaintenanceOn(by="admin", reason="sim", until_ms=until, now_ms=wall))
            sim.maintenance_stamps[wall] = wall - now
            sim.stats["maintenance_on"] += 1
        else:
            self.submit(MaintenanceOff(by="admin", reason="sim", since_ms=None, now_ms=wall))

    # -- messages from workers ------------------------------------------------------------------

    def receive(self, now: int, kind: str, b: dict[str, Any]) -> str | None:
        """Handle one worker message; for a registration, the request id of its command."""
        planner = self.planner
        if planner is None:
            return None  # the real node answers 503 until its log is applied
        state = self.state
        wid = b["worker"]
        if kind == "restarting":
            # The route's checks: ACTIVE, at its current incarnation (the token's).
            held = state.workers.get(WorkerId(wid))
            if (
                held is not None
                and held.state is WorkerState.ACTIVE
                and held.incarnation == b["incarnation"]
            ):
                planner.restarting(WorkerId(wid), now)
                self.sim.stats["holds"] += 1
            return None
        if kind == "register":
            if planner.detector.held(wid, now):
                self.sim.stats["rejoined_in_grace"] += 1
            planner.registered(WorkerId(wid), now)
            self.heard[wid] = now
            return self.submit(
                RegisterWorker(
                    worker_id=WorkerId(wid), address=f"sim://{wid}", now_ms=self.sim.wall_ms()
                )
            )
        rec = state.workers.get(WorkerId(wid))
        if kind == "heartbeat":
            if rec is None or rec.state not in OWNING or rec.incarnation != b["incarnation"]:
                self.send(wid, "reregister", {"incarnation": b["incarnation"]})
                return None
            due = planner.heartbeat(WorkerId(wid), 0.1, now)
            self.heard[wid] = now
            rates = self.sim.rates_of(wid)
            planner.partition_loads(state, WorkerId(wid), rates, now)
            for p, epoch, rate, _lag in rates:
                if p >= state.total_partitions:
                    continue  # a gate of a partition a rescale retired: the leader drops it
                part = state.partitions[p]
                if part.owner == wid and part.epoch == epoch:
                    self.shadow.accept(p, rate, now, state.routing_generation)
            if planner.loads.weights(state.total_partitions, now) is not None:
                self.sim.stats["weighted_heartbeats"] += 1
            self.send(
                wid,
                "assignment",
                {
                    "incarnation": rec.incarnation,
                    "assignment": dict(state.assignment_of(WorkerId(wid))),
                    "checkpoint_due": due,
                    "mark": b.get("mark", 0),
                },
            )
        elif kind == "answer":
            # Only the called worker's answer counts: another worker's (to an earlier call of
            # the same key) leaves the outstanding call alone.
            call = self._answer_from(b["key"], wid, now)
            if call is not None:
                answer = Answer(outcome=b["outcome"], body=b["body"])
                planner.on_result(result_of(call, answer, UNFENCED), now, self.sim.wall_ms())
        elif kind == "checkpoints":
            entries = tuple(
                CheckpointReport(partition=e[0], epoch=e[1], offset=e[2], uri=e[3])
                for e in b["entries"]
            )
            self.submit(
                RecordCheckpoints(
                    worker_id=WorkerId(wid),
                    incarnation=b["incarnation"],
                    entries=entries,
                    now_ms=self.sim.wall_ms(),
                )
            )
        return None


# --- the simulation -----------------------------------------------------------------------------


class Simulation:
    def __init__(self, seed: int, settings: SimSettings | None = None) -> None:
        self.seed = seed
        self.s = settings or SimSettings()
        self.rng = random.Random(seed)
        # The operator's rescales and the builds' answers draw from their own stream, so
        # the other faults of a seed happen as they would without rescales.
        self.rescale_rng = random.Random(seed + RESCALE_STREAM)
        self.pipeline_rng = random.Random(seed + PIPELINE_STREAM)
        # So are the sync, store and clock faults' draws.
        self.fault_rng = random.Random(seed + FAULT_STREAM)
        self.now_ms = 0
        self.step_no = 0
        self.net = Network(self.rng, self.s)
        self.replicas = [Replica(f"c{i}") for i in range(self.s.replicas)]
        self.term = 1
        self.leader = 0
        self.match = [0] * self.s.replicas  # how much of the leader's log each replica holds
        self.known_commit = [0] * self.s.replicas
        self.pending_registrations: list[tuple[int, str, str]] = []
        self.commit_index = 0
        self.request_seq = 0
        self.proposer = Proposer(self, self.replicas[0], self.term, 0)
        self.workers = [SimWorker(f"w{i}") for i in range(self.s.workers)]
        self.worker_by_id = {w.wid: w for w in self.workers}
        # (worker, incarnation) pairs retired from the state: none may act again.
        self.retired: set[tuple[str, int]] = set()
        self.faults_on = True
        # Checker memory.
        self.hash_at: dict[int, str] = {}
        self.ledger = Ledger()
        self.stats = {"leader_changes": 0, "crashes": 0, "pauses": 0, "restarts": 0, "fenced": 0}
        self.stats["cuts"] = 0
        self.cut_until: dict[str, int] = {}
        self.stats |= {"accepted": 0, "entries": 0, "stale_reports": 0, "drains": 0}
        self.stats |= {"pipelines_created": 0, "pipelines_dropped": 0}
        self.stats |= {"batches": 0, "batched_commands": 0}
        self.stats |= {"graceful_restarts": 0, "holds": 0, "rejoined_in_grace": 0}
        # Every checkpoint object's chain, and the objects the store lost: never found
        # again (the heal does not bring them back).
        self.chains = Chains(self.s.compact_deltas_max)
        self.stats |= {"lost_checkpoints": 0, "lost_deltas": 0, "fallbacks": 0}
        self.stats |= {"chain_breaks": 0, "chain_fallbacks": 0, "stuck": 0}
        # (partition, epoch) whose host was refused for a lost ancestor of its checkpoint.
        self.broken_by_chain: set[tuple[int, int]] = set()
        # (partition, epoch) whose host a failing store refused (checkpoint_unavailable too).
        self.store_refused: set[tuple[int, int]] = set()
        self.stats |= {"weighted_heartbeats": 0, "stale_load_reports": 0}
        self.stats |= {"weighted_rounds": 0, "count_rounds": 0}
        ranks = list(range(1, self.s.total_partitions + 1))
        self.rng.shuffle(ranks)
        self.rates = [100.0 * r**-self.s.rate_exponent for r in ranks]
        self.stats |= {"churned": 0, "zombies": 0, "retired": 0, "retired_reports_fenced": 0}
        self.stats |= {"maintenance_on": 0, "maintenance_expired": 0, "balance_plans": 0}
        # Group commit: where the leader's run of entries appended since it last replicated
        # starts (None: nothing new). Replication packs such a run into ONE batch entry, as
        # replication/log.py does with proposals that queue while an entry is in flight.
        self.unsent_from: int | None = None
        self.stats |= {"warm_starts": 0, "warm_answers": 0, "unwarms": 0}
        # The source log's seals, (generation, partition) -> the cut: create-only.
        self.seals: dict[tuple[int, int], int] = {}
        # (generation, partition) -> the furthest offset any gate has read or opened at.
        self.read_to: dict[tuple[int, int], int] = {}
        self.stats |= {"rescales": 0, "cut_answers": 0, "build_answers": 0}
        self.stats |= {"pipeline_rescales": 0, "pipeline_spec_updates": 0}
        self.stats |= {"pipeline_cut_answers": 0, "pipeline_build_answers": 0}
        self.stats |= {"pipeline_rescales_done": 0}
        self.stats |= {"sync_halts": 0, "halted_leaders": 0, "unsynced_dropped": 0}
        # The store fails every call until then, by errors or by timeouts.
        self.store_down_until_ms = -1
        self.store_times_out = False
        # Every checkpoint object a worker wrote: what a reference in the state may name.
        self.written: set[str] = set()
        self.stats |= {"store_outages": 0, "store_failures": 0}
        # A maintenance record's since_ms -> how far ahead of the true time its stamp was.
        self.maintenance_stamps: dict[int, int] = {}
        self.stats |= {"clock_steps": 0, "maintenance_ended_by_step": 0}
        # A cluster finalized at the newest command-set version, as a running one is.
        for r in self.replicas:
            r.machine.state.finalized_version = COMMAND_SET_VERSION

    @property
    def planner_settings(self) -> PlannerSettings:
        s = self.s
        # What the simulation does not set (placement, fallback) is the config's default.
        return quick_settings(
            total_partitions=s.total_partitions,
            min_cluster_size=s.min_cluster_size,
            max_concurrent_migrations=s.max_concurrent_migrations,
            max_migrations_per_worker=s.max_migrations_per_worker,
            rebalance_on_join=s.rebalance_on_join,
            suspect_after_ms=s.suspect_after_ms,
            dead_after_ms=s.dead_after_ms,
            rejoin_grace_ms=s.rejoin_grace_ms,
            host_retry_base_ms=s.host_retry_base_ms,
            host_retry_cap_ms=s.host_retry_cap_ms,
            checkpoint_interval_ms=s.checkpoint_interval_ms,
            tick_ms=s.step_ms,
            warm=WarmPolicy(
                enabled=self.seed % 2 == 0,
                timeout_ms=s.warm_timeout_ms,
                lag_records_max=s.warm_lag_records_max,
                in_flight_max=s.warmups_max,
                per_worker_max=s.warmups_per_worker_max,
                poll_ms=s.step_ms * 3,
            ),
            load_stale_ms=s.load_stale_ms,
            retire_after_ms=s.retire_after_ms,
        )

    # -- log ---------------------------------------------------------------------------------

    def leader_name(self) -> str:
        return f"c{self.leader}@{self.term}"

    def wall_ms(self) -> int:
        """The leader's wall clock: what it stamps into commands (now_ms fields)."""
        return WALL_EPOCH_MS + self.now_ms + self.replicas[self.leader].wall_offset_ms

    def halted(self, i: int) -> bool:
        return self.replicas[i].halted_until_ms is not None

    def halt_on_sync(self, i: int) -> bool:
        """Replica i's sync fails now (fault phase, with p_sync_halt, while no other is
        halted): it halts. A halted leader is replaced at once by an election among the
        others; when none can win, this sync is spared (the simulation needs a leader)."""
        if not self.faults_on or any(self.halted(j) for j in range(len(self.replicas))):
            return False
        if self.fault_rng.random() >= self.s.p_sync_halt:
            return False
        r = self.replicas[i]
        r.halted_until_ms = self.now_ms + self.fault_rng.randint(200, self.s.halt_ms_max)
        if i == self.leader:
            if not self.change_leader():
                r.halted_until_ms = None
                return False
            self.stats["halted_leaders"] += 1
        self.stats["sync_halts"] += 1
        return True

    def restart_halted(self, heal: bool = False) -> None:
        """A halted replica whose time is up (all of them at the heal) starts again: it drops
        what it never synced and catches up from the leader."""
        for i, r in enumerate(self.replicas):
            if r.halted_until_ms is None or (r.halted_until_ms > self.now_ms and not heal):
                continue
            r.halted_until_ms = None
            self.stats["unsynced_dropped"] += len(r.log) - r.synced
            r.log = r.log[: r.synced]
            self.match[i] = min(self.match[i], len(r.log))

    def append(self, cmd: Command) -> str:
        self.request_seq += 1
        rid = f"r{self.request_seq}"
        entry = encode_command(cmd, rid)
        lead = self.replicas[self.leader]
        if self.unsent_from is None:
            self.unsent_from = len(lead.log)
        lead.log.append((self.term, entry))
        self.match[self.leader] = len(lead.log)
        self.stats["entries"] += 1
        return rid

    def own_uncommitted(self) -> bool:
        lead = self.replicas[self.leader]
        return len(lead.log) > self.commit_index or lead.applied < self.commit_index

    def pack_unsent(self) -> None:
        """Pack the entries this leader appended since it last replicated (its own term's, on
        no other replica yet, none committed) into one batch entry, in order."""
        start, self.unsent_from = self.unsent_from, None
        lead = self.replicas[self.leader]
        if start is None or len(lead.log) - start < 2 or start < self.commit_index:
            return
        run = lead.log[start:]
        assert all(term == self.term for term, _ in run)
        lead.log[start:] = [(self.term, encode_batch([entry for _, entry in run]))]
        self.match[self.leader] = len(lead.log)
        self.stats["batches"] += 1
        self.stats["batched_commands"] += len(run)

    def replicate(self) -> None:
        self.pack_unsent()
        if self.halt_on_sync(self.leader):
            return  # its unsynced run never left it; the new leader replicates next step
        lead = self.replicas[self.leader]
        lead.synced = len(lead.log)
        reached = [self.leader]
        for i, r in enumerate(self.replicas):
            if i == self.leader or self.halted(i):
                continue
            if self.faults_on and (
                self.rng.random() >= self.s.p_append
                or f"c{i}" in self.net.cut
                or self.leader_name() in self.net.cut
            ):
                continue
            # Raft's consistency check, settled at once: keep the common prefix, copy the rest.
            n = 0
            while n < min(len(r.log), len(lead.log)) and r.log[n] == lead.log[n]:
                n += 1
            if n < r.applied:
                # Overwriting an applied entry would mean a committed entry was lost.
                self.fail(f"replica {r.name} loses applied entry {n + 1} (applied {r.applied})")
            r.log = r.log[:n] + lead.log[n:]
            if self.halt_on_sync(i):
                # Written, never synced: not acknowledged, and gone at its restart.
                r.synced = n
                if self.s.unsafe_ack_unsynced:
                    self.match[i] = len(r.log)
                continue
            r.synced = len(r.log)
            self.match[i] = len(r.log)
            reached.append(i)
        majority = len(self.replicas) // 2 + 1
        for idx in range(len(lead.log), self.commit_index, -1):
            holders = sum(1 for m in self.match if m >= idx)
            if holders >= majority and lead.log[idx - 1][0] == self.term:
                self.commit_index = idx
                break
        # A replica learns the commit index only with an append that got through, and only
        # once its log matches the leader's (Raft's leaderCommit rule).
        for i in reached:
            self.known_commit[i] = self.commit_index
        self.check_durable()

    def check_durable(self) -> None:
        """Every committed entry is on the disk of a majority (synced, as the leader has it),
        so no set of restarts that drop unsynced tails can lose one."""
        committed = self.replicas[self.leader].log[: self.commit_index]
        on_disk = sum(
            1
            for r in self.replicas
            if r.synced >= self.commit_index and r.log[: self.commit_index] == committed
        )
        if on_disk < len(self.replicas) // 2 + 1:
            self.fail(f"committed index {self.commit_index} is synced on {on_disk} replicas")

    def apply_committed(self) -> None:
        for i, r in enumerate(self.replicas):
            if self.halted(i):
                continue  # a halted process applies nothing
            upto = min(self.known_commit[i], len(r.log))
            while r.applied < upto:
                _, entry = r.log[r.applied]
                items = decode_batch(entry) if is_batch(entry) else [entry]
                if i == 0 or len(items) == 1:
                    # Replica c0 applies a batch command by command, checking each against
                    # the state just before it; the others apply it through the log's own
                    # batch path. check_applied's per-index state hash holds both paths to
                    # the same state.
                    results = []
                    for item in items:
                        before = view(r.machine.state) if i == 0 else None
                        results.append(apply_entry(r.machine, item))
                        if before is not None:
                            self.check_command(before, item, results[-1])
                else:
                    results = decode_results(apply_entry(r.machine, entry))
                for item, result in zip(items, results, strict=True):
                    r.results[decode_command(item)[0]] = result
                r.applied += 1
                self.check_applied(r, results)

    def change_leader(self) -> bool:
        """Elect a new leader (False: no replica can win now). A halted replica neither
        stands nor votes."""
        # Raft's election restriction: only a replica holding every committed entry can win.
        committed = self.replicas[self.leader].log[: self.commit_index]
        candidates = [
            i
            for i, r in enumerate(self.replicas)
            if (self.s.unsafe_election or r.log[: self.commit_index] == committed)
            and f"c{i}" not in self.net.cut
            and not self.halted(i)
        ]
        if not candidates:
            return False
        self.leader = self.rng.choice(candidates)
        self.term += 1
        self.unsent_from = None  # the old leader's unsent run went out (or not) as it was
        lead = self.replicas[self.leader]
        self.match = [0] * len(self.replicas)
        self.match[self.leader] = len(lead.log)
        self.proposer = Proposer(self, lead, self.term, self.now_ms)
        # Raft's no-op at the start of a term: commits the old tail (or overwrites it).
        self.append(Barrier(nonce=f"term-{self.term}"))
        self.stats["leader_changes"] += 1
        return True

    # -- checker -----------------------------------------------------------------------------

    def fail(self, what: str) -> None:
        raise SafetyViolation(
            f"seed={self.seed} step={self.step_no} t={self.now_ms}ms: {what} "
            f"(replay: Simulation({self.seed}).run())"
        )

    def check_applied(self, r: Replica, results: list[bytes]) -> None:
        """After each applied log entry (one command or a batch of them)."""
        state = r.machine.state
        for result_bytes in results:
            result = decode_result(result_bytes)
            if not isinstance(result, Ok) and result.code == "internal":
                self.fail(f"{r.name} apply returned internal: {result.message}")
        h = state_hash(state)
        seen = self.hash_at.setdefault(r.applied, h)
        if seen != h:
            self.fail(f"{r.name} state hash {h} != {seen} at applied index {r.applied}")
        problems = state_violations(state) + self.ledger.observe(r.name, state)
        if problems:
            self.fail(f"{r.name}: {'; '.join(problems)}")

    def check_command(self, before: View, entry: bytes, result_bytes: bytes) -> None:
        """One command applied on c0, against the state just before it: every step invariant
        (coordinator/core/invariants.py: lifecycle edges, epochs, checkpoint fencing)."""
        _, cmd = decode_command(entry)
        state = self.replicas[0].machine.state
        problems = step_violations(before, state, cmd)
        if problems:
            self.fail("; ".join(problems))
        unwritten = sorted(
            ck.uri
            for p in state.partitions
            for ck in (p.checkpoint, *p.earlier)
            if ck is not None and ck.uri not in self.written
        )
        if unwritten:
            self.fail(f"{type(cmd).__name__} left references to unwritten objects {unwritten}")
        result = decode_result(result_bytes)
        if isinstance(cmd, RecordCheckpoints) and (cmd.worker_id, cmd.incarnation) in self.retired:
            accepted = isinstance(result, Ok) and any(
                v.status == "accepted"
                for v in result.value.results  # type: ignore[union-attr]
            )
            if accepted:
                self.fail(f"retired {cmd.worker_id} incarnation {cmd.incarnation} checkpointed")
            self.stats["retired_reports_fenced"] += 1
        if isinstance(cmd, RetireWorkers):
            gone = [(w, inc) for w, (_, inc) in before.workers.items() if w not in state.workers]
            self.retired.update(gone)
            self.stats["retired"] += len(gone)
        if not isinstance(result, Ok):
            return
        if isinstance(cmd, FallBack):
            self.stats["fallbacks"] += 1
            self.stats["chain_fallbacks"] += (cmd.partition, cmd.epoch) in self.broken_by_chain
        if isinstance(cmd, MarkStuck):
            self.check_stuck(state, cmd)
        if isinstance(cmd, FinishPipelineRescale):
            was = before.pipelines.get(cmd.name)
            if was is not None and was.rescale_phase is not RescalePhase.DONE:
                self.stats["pipeline_rescales_done"] += 1
        if isinstance(cmd, RecordCheckpoints):
            assert isinstance(result.value, CheckpointsResult)
            for res in result.value.results:
                self.stats["accepted" if res.status == "accepted" else "fenced"] += 1

    def check_load(self, uri: str) -> None:
        """A host loads the chain of `uri` only whole: every object there, none lost, in
        lineage, all written by one session (so never into another owner's objects)."""
        problems = self.chains.violations(uri)
        if problems:
            self.fail("; ".join(problems))

    def check_stuck(self, state: ClusterState, cmd: MarkStuck) -> None:
        """A partition is marked stuck only when its floor (what the fallback chain reached
        last: its checkpoint once `earlier` is spent) does not load; a stuck partition with a
        whole floor would wait for an operator for nothing."""
        self.stats["stuck"] += 1
        part = state.partitions.get(cmd.partition)
        refs = [] if part is None else [c for c in (part.checkpoint, *part.earlier) if c]
        excused = (cmd.partition, cmd.epoch) in self.store_refused
        if refs and not self.chains.broken(refs[-1].uri) and not excused:
            self.fail(f"p{cmd.partition} marked stuck with a whole floor {refs[-1].uri}")

    def check_gates(self) -> None:
        """No two live workers hold an open gate for one partition at one epoch."""
        problems = gate_violations(
            (w.wid, p, int(g["epoch"]))
            for w in self.workers
            if w.alive
            for p, g in w.gates.items()
            if g["open"]
        )
        if problems:
            self.fail("; ".join(problems))

    # -- workers -----------------------------------------------------------------------------

    def worker_step(self, w: SimWorker) -> None:
        now = self.now_ms
        if not w.alive or w.paused(now):
            return
        if w.alive:
            for p, g in w.gates.items():
                # A sealed partition processes up to its cut and no further.
                seal = self.seals.get((int(g.get("generation", 0)), p))
                if self.store_failing():
                    break  # its source reads fail: processing waits and retries
                if g["open"] and (seal is None or int(g["offset"]) < seal):
                    g["offset"] = int(g["offset"]) + 1
                    key = (int(g.get("generation", 0)), p)
                    self.read_to[key] = max(self.read_to.get(key, 0), int(g["offset"]))
        if now < w.next_heartbeat_ms:
            return
        w.next_heartbeat_ms = now + self.s.heartbeat_interval_ms
        dst = self.leader_name()
        if not w.registered:
            self.net.send(now, w.wid, dst, "register", {"worker": w.wid})
            return
        self.net.send(
            now,
            w.wid,
            dst,
            "heartbeat",
            {"worker": w.wid, "incarnation": w.incarnation, "mark": w.openings},
        )
        if self.faults_on and self.rng.random() < self.s.p_stale_report and w.gates:
            # A stale report: a random gate's epoch, possibly older than the current one.
            p = self.rng.choice(sorted(w.gates))
            g = w.gates[p]
            epoch = max(0, int(g["epoch"]) - self.rng.randint(0, 2))
            self.stats["stale_reports"] += 1
            uri = checkpoint_uri(w.wid, p, epoch, g["offset"])
            if not self.write_checkpoint(w, p, g, uri, int(g["offset"]), stale=True):
                return  # reported only once written
            self.net.send(
                now,
                w.wid,
                dst,
                "checkpoints",
                {
                    "worker": w.wid,
                    "incarnation": w.incarnation,
                    "entries": [[p, epoch, int(g["offset"]), uri]],
                },
            )

    def rates_of(self, wid: str) -> list[tuple[int, int, float, int | None]]:
        """What the worker's heartbeat says of each partition it holds: its rate, drifted;
        now and then at an epoch it no longer holds (the leader must drop that one)."""
        w = next(x for x in self.workers if x.wid == wid)
        out = []
        for p, g in sorted(w.gates.items()):
            if not g["open"]:
                continue
            drift = 1 + self.rng.uniform(-self.s.rate_drift, self.s.rate_drift)
            rate = self.rates[p % len(self.rates)] * drift
            epoch = int(g["epoch"])
            if self.faults_on and self.rng.random() < self.s.p_stale_report:
                epoch = max(0, epoch - 1)
                self.stats["stale_load_reports"] += 1
            out.append((p, epoch, rate, None))
        return out

    def worker_receive(self, w: SimWorker, kind: str, b: dict[str, Any]) -> None:
        now = self.now_ms
        if not w.alive or w.paused(now):
            return  # a paused process reads nothing; the message is lost with its socket buffer
        reply_to = self.leader_name()
        if kind == "registered":
            if b["incarnation"] > w.incarnation:
                w.incarnation = b["incarnation"]
                w.registered = True
                w.gates.clear()
            return
        if kind == "reregister":
            if b["incarnation"] == w.incarnation:
                w.registered = False
            return
        if b.get("incarnation") not in (None, w.incarnation):
            return  # the token would not verify: a call for another incarnation
        if kind == "assignment":
            assigned = b["assignment"]
            for p, g in w.gates.items():
                # As the real worker: what the reply does not list is closed, unless a host
                # call opened it after the heartbeat left (the reply may predate it).
                if g["open"] and p not in assigned and int(g.get("opened", 0)) <= b["mark"]:
                    g["open"] = False
            if b.get("checkpoint_due"):
                self.report_checkpoints(w, reply_to)
        elif kind == "host":
            host = HostRequest.from_json(b["partition"], b["request"])
            p, epoch = host.partition, host.epoch
            g = w.gates.get(p)
            if g is not None and epoch < int(g["epoch"]):
                return
            ck = host.checkpoint
            if ck is not None and self.store_failing():
                self.store_error(w, b)  # the load fails: the leader retries the host call
                self.store_refused.add((p, epoch))
                return
            if ck is not None and self.chains.broken(ck.uri):
                # The loader's ChainBroken: answered as a lost checkpoint.
                if ck.uri not in self.chains.lost:
                    self.stats["chain_breaks"] += 1
                    self.broken_by_chain.add((p, epoch))
                self.answer(
                    w, b, Outcome.REFUSED, ErrorReply(error="checkpoint_unavailable", message="sim")
                )
                return
            if g is None or epoch > int(g["epoch"]) or not g["open"]:
                if ck is not None:
                    self.check_load(ck.uri)
                # The checkpoint's offset names its routing generation.
                offset = 0 if ck is None else ck.offset
                generation = generation_of(offset)
                w.openings += 1
                w.gates[p] = {"epoch": epoch, "offset": offset, "open": True}
                w.gates[p]["opened"] = w.openings
                w.gates[p]["generation"] = generation
                key = (generation, p)
                self.read_to[key] = max(self.read_to.get(key, 0), offset)
            offset = int(w.gates[p]["offset"])
            self.answer(w, b, Outcome.OK, HostReply(partition=p, epoch=epoch, offset=offset))
        elif kind == "release":
            release = ReleaseRequest.from_json(b["partition"], b["request"])
            p = release.partition
            g = w.gates.get(p)
            if g is None or g["epoch"] != release.epoch:
                self.answer(w, b, Outcome.STALE, ErrorReply(error="stale_epoch", message="sim"))
            else:
                uri = checkpoint_uri(w.wid, p, g["epoch"], g["offset"])
                if not self.write_checkpoint(w, p, g, uri, int(g["offset"])):
                    # As pipeline/hosting.py: the final checkpoint first, the gate after, so
                    # a failed write leaves the gate open and the release retryable.
                    self.store_error(w, b)
                    return
                g["open"] = False
                final = ReleasedCheckpoint(offset=int(g["offset"]), uri=uri)
                reply = ReleaseReply(partition=p, epoch=release.epoch, checkpoint=final)
                self.answer(w, b, Outcome.OK, reply)
        elif kind == "warm":
            # A warm copy is read-only: it never touches a gate (check_gates holds it to that).
            warm = WarmRequest.from_json(b["partition"], b["request"])
            p, mid = warm.partition, warm.migration_id
            self.stats["warm_answers"] += 1
            if p in w.gates and w.gates[p]["open"]:
                self.answer(w, b, Outcome.STALE, ErrorReply(error="hosted", message="sim"))
            elif self.rng.random() < self.s.p_warm_refused:
                self.answer(w, b, Outcome.REFUSED, ErrorReply(error="warm_refused", message="sim"))
            elif mid in w.warm:
                lag = 0 if self.rng.random() < self.s.p_warm_caught_up else 1_000
                progress = WarmReply(partition=p, loaded=True, offset=1_000, head=1_000 + lag)
                self.answer(w, b, Outcome.OK, progress)
            else:
                w.warm.add(mid)
                self.stats["warm_starts"] += 1
                self.answer(
                    w, b, Outcome.OK, WarmReply(partition=p, loaded=False, offset=0, head=0)
                )
        elif kind == "unwarm":
            unwarm = UnwarmRequest.from_json(b["partition"], b["request"])
            dropped = unwarm.migration_id in w.warm
            w.warm.discard(unwarm.migration_id)
            self.stats["unwarms"] += 1
            reply_unwarm = UnwarmReply(partition=unwarm.partition, dropped=dropped)
            self.answer(w, b, Outcome.OK, reply_unwarm)
        elif kind in ("cut", "pcut"):
            # The seal is the source log's, shared by every worker: the first cut call of
            # (generation, p) seals it at the log's end, a later one finds it. The sim's log has
            # no end of its own, so its end is the furthest any gate of p ever read
            # (`read_to`): a real seal lies at or above every offset any worker processed.
            # A recorded pipeline's partition ("pcut") is cut alike (pipeline/cutting.py):
            # its number is its own, so (its generation, number) names its run's log.
            cut_call = CutRequest.from_json(b["partition"], b["request"])
            p, epoch = cut_call.partition, cut_call.epoch
            g = w.gates.get(p)
            if g is None or not g["open"] or g["epoch"] != epoch:
                self.answer(w, b, Outcome.STALE, ErrorReply(error="stale_epoch", message="sim"))
                return
            g["generation"] = cut_call.generation
            key = (cut_call.generation, p)
            cut = self.seals.setdefault(key, max(self.read_to.get(key, 0), int(g["offset"])))
            done = int(g["offset"]) >= cut
            uri = checkpoint_uri(w.wid, p, epoch, cut) if done else None
            if uri is not None and not self.write_checkpoint(w, p, g, uri, cut):
                self.store_error(w, b)  # the cut's checkpoint is not written: asked again
                return
            self.stats["cut_answers" if kind == "cut" else "pipeline_cut_answers"] += 1
            reply_cut = CutReply(partition=p, epoch=epoch, offset=cut, done=done, uri=uri)
            self.answer(w, b, Outcome.OK, reply_cut)
        elif kind == "build":
            build = BuildRequest.from_json(b["request"])
            gen = build.generation
            self.answer_build(w, b, gen, range(build.routing[-1]), f"g{gen}", "build_answers")
        elif kind == "pbuild":
            # A recorded pipeline's: its new generation's reserved numbers.
            pbuild = PipelineBuildRequest.from_json(b["request"])
            name, gen = pbuild.pipeline, pbuild.generation
            where = f"{name}/g{gen}"
            self.answer_build(w, b, gen, pbuild.numbers, where, "pipeline_build_answers")
        elif kind == "checkpoint":
            # 202 at once; the reports follow on their own request.
            self.answer(w, b, Outcome.OK, CheckpointReply())
            self.report_checkpoints(w, reply_to)

    def answer_build(
        self, w: SimWorker, call: dict[str, Any], gen: int, numbers: range, where: str, stat: str
    ) -> None:
        """Answer a build call of generation `gen`: "not yet" with p_build_pending, else one
        checkpoint per partition of `numbers` at the generation's first offset, named under
        `where`. Deterministic: the same inputs give the same names, whoever builds."""
        if self.store_failing():
            self.store_error(w, call)  # it reads the cuts and writes the builds
            return
        done = self.rescale_rng.random() >= self.s.p_build_pending
        built = tuple(
            BuiltCheckpoint(
                partition=q, offset=generation_base(gen), uri=f"mem://build/{where}/{q}"
            )
            for q in numbers
        )
        for c in built if done else ():
            self.written.add(c.uri)
            self.chains.write_base(c.uri, c.partition, c.offset, BUILD_SESSION)
        self.stats[stat] += 1
        reply = BuildReply(generation=gen, done=done, checkpoints=built if done else ())
        self.answer(w, call, Outcome.OK, reply)

    def answer(
        self, w: SimWorker, call: dict[str, Any], outcome: Outcome, reply: WorkerReply | ErrorReply
    ) -> None:
        """Answer the leader's call `call` with `reply`, the JSON a real worker sends."""
        body = {"worker": w.wid, "key": call["key"], "outcome": outcome, "body": reply.to_json()}
        self.net.send(self.now_ms, w.wid, self.leader_name(), "answer", body)

    def store_failing(self) -> bool:
        return self.now_ms < self.store_down_until_ms

    def store_write(self, uri: str) -> bool:
        """Write a checkpoint object; False when the store fails the call."""
        if self.store_failing():
            self.stats["store_failures"] += 1
            return False
        self.written.add(uri)
        return True

    def write_checkpoint(
        self,
        w: SimWorker,
        p: int,
        g: dict[str, int | bool],
        uri: str,
        offset: int,
        stale: bool = False,
    ) -> bool:
        """Write gate `g`'s checkpoint at `offset` as `uri`, a base or a delta of the chain
        its session extends (a stale report's is a base of its own); False when the store
        fails the call."""
        if not self.store_write(uri):
            return False
        if stale:
            self.chains.write_base(uri, p, offset, session_of(w, g))
        else:
            self.chains.write(uri, p, offset, session_of(w, g))
        return True

    def store_error(self, w: SimWorker, call: dict[str, Any]) -> None:
        """Answer a call whose store access failed as the worker does: checkpoint_unavailable
        for an error; nothing for a timeout (the leader's call times out first)."""
        self.stats["store_failures"] += 1
        if not self.store_times_out:
            reply = ErrorReply(error="checkpoint_unavailable", message="sim: store failed")
            self.answer(w, call, Outcome.REFUSED, reply)

    def report_checkpoints(self, w: SimWorker, reply_to: str) -> None:
        if self.store_failing():
            # The writes fail: nothing is reported; the next checkpoint request retries.
            self.stats["store_failures"] += 1
            return
        entries: list[list[int | str]] = []
        for p, g in sorted(w.gates.items()):
            if g["open"]:
                epoch, offset = int(g["epoch"]), int(g["offset"])
                uri = checkpoint_uri(w.wid, p, epoch, offset)
                self.written.add(uri)
                self.chains.write(uri, p, offset, session_of(w, g))
                entries.append([p, epoch, offset, uri])
        if entries:
            self.net.send(
                self.now_ms,
                w.wid,
                reply_to,
                "checkpoints",
                {"worker": w.wid, "incarnation": w.incarnation, "entries": entries},
            )

    def inject_cuts(self) -> None:
        """Partition one node from everyone for a while; heal expired partitions."""
        for node, until in list(self.cut_until.items()):
            if until <= self.now_ms:
                del self.cut_until[node]
                self.net.cut.discard(node)
        if self.rng.random() < self.s.p_cut:
            nodes = [f"c{i}" for i in range(len(self.replicas))] + [w.wid for w in self.workers]
            node = self.rng.choice([n for n in nodes if n not in self.net.cut] or nodes)
            self.net.cut.add(node)
            self.cut_until[node] = self.now_ms + self.rng.randint(200, self.s.cut_ms_max)
            self.stats["cuts"] += 1
        if self.leader_name() in self.net.cut and self.rng.random() < self.s.p_cut_leader_deposed:
            self.change_leader()

    def inject_churn(self) -> None:
        """One live worker departs for good and one under a fresh id joins."""
        if self.rng.random() >= self.s.p_worker_churn:
            return
        live = [w for w in self.workers if w.alive and not w.gone and not w.paused(self.now_ms)]
        if len(live) <= self.s.min_cluster_size:
            return
        w = self.rng.choice(live)
        w.gone = True
        self.stats["churned"] += 1
        if self.rng.random() < 0.5:
            w.alive = False
            w.gates.clear()
        else:
            # Back after its retirement, as the incarnation it was: everything it says is
            # fenced, and what it is told to do (register again) makes it a new incarnation.
            back = self.s.dead_after_ms + self.s.retire_after_ms
            w.paused_until_ms = self.now_ms + back + self.rng.randint(0, self.s.zombie_ms_max)
            self.stats["zombies"] += 1
        fresh = SimWorker(f"w{len(self.workers)}")
        self.workers.append(fresh)
        self.worker_by_id[fresh.wid] = fresh

    def inject_worker_faults(self) -> None:
        for w in self.workers:
            if w.gone:
                continue
            if not w.alive and w.back_at_ms is not None and w.back_at_ms <= self.now_ms:
                self.restart_worker(w)  # the same command started again
                continue
            r = self.rng.random()
            alive_count = sum(1 for x in self.workers if x.alive and not x.paused(self.now_ms))
            if (
                w.alive
                and w.registered
                and not w.paused(self.now_ms)
                and r < self.s.p_worker_graceful_restart
            ):
                self.stop_for_restart(w)
            elif w.alive and r < self.s.p_worker_crash and alive_count > self.s.min_cluster_size:
                w.alive = False
                w.gates.clear()
                self.stats["crashes"] += 1
            elif w.alive and r < self.s.p_worker_crash + self.s.p_worker_pause:
                # Pause past the dead-after timeout most of the time.
                w.paused_until_ms = self.now_ms + self.rng.randint(500, 2 * self.s.dead_after_ms)
                self.stats["pauses"] += 1
            elif not w.alive and r < self.s.p_worker_restart:
                self.restart_worker(w)

    def inject_store_outage(self) -> None:
        """The store fails every call for a while, by errors or by timeouts."""
        if self.store_failing() or self.fault_rng.random() >= self.s.p_store_outage:
            return
        self.store_down_until_ms = self.now_ms + self.fault_rng.randint(
            self.s.step_ms, self.s.store_outage_ms_max
        )
        self.store_times_out = self.fault_rng.random() < 0.5
        self.stats["store_outages"] += 1

    def inject_clock_step(self) -> None:
        """One replica's wall clock steps clock_step_ms forward or back (NTP, a VM resume)."""
        if self.fault_rng.random() >= self.s.p_clock_step:
            return
        r = self.fault_rng.choice(self.replicas)
        r.wall_offset_ms += self.fault_rng.choice((-1, 1)) * self.s.clock_step_ms
        self.stats["clock_steps"] += 1

    def inject_store_faults(self) -> None:
        """Lose one object of an accepted checkpoint's chain: a base or a delta, the
        referenced one or an ancestor of it."""
        if self.rng.random() >= self.s.p_lose_checkpoint:
            return
        state = self.replicas[self.leader].machine.state
        chains = self.chains
        # Not a rescale's build output: it is the floor of its partition's fallback chain
        # (coordinator/core/edits.py, accept_checkpoint), and a partition that lost it and every
        # later one is stuck for an operator (coordinator/core/fallback.py), which the
        # simulation has not.
        uris = sorted(
            {
                uri
                for p in state.partitions
                for ck in (p.checkpoint, *p.earlier)
                if ck
                for uri in chains.chain(ck.uri)
                if chains.objects[uri].session != BUILD_SESSION
            }
            - chains.lost
        )
        if uris:
            uri = self.rng.choice(uris)
            chains.lost.add(uri)
            self.stats["lost_checkpoints"] += 1
            self.stats["lost_deltas"] += chains.objects[uri].kind == DELTA

    def stop_for_restart(self, w: SimWorker) -> None:
        """SIGTERM's stop (pipeline/worker.py): report the last checkpoints, tell the leader
        it restarts, go down; the process starts again after a while."""
        reply_to = self.leader_name()
        self.report_checkpoints(w, reply_to)
        notice = {"worker": w.wid, "incarnation": w.incarnation}
        self.net.send(self.now_ms, w.wid, reply_to, "restarting", notice)
        w.alive = False
        w.gates.clear()
        w.back_at_ms = self.now_ms + self.rng.randint(200, self.s.restart_ms_max)
        self.stats["graceful_restarts"] += 1

    def restart_worker(self, w: SimWorker) -> None:
        w.alive = True
        w.registered = False
        w.gates.clear()
        w.warm.clear()
        w.paused_until_ms = -1
        w.back_at_ms = None
        self.stats["restarts"] += 1

    # -- the loop ----------------------------------------------------------------------------

    def deliver(self) -> None:
        for msg in self.net.due(self.now_ms):
            if msg.dst.startswith("c"):
                if msg.dst != self.leader_name():
                    continue  # to a deposed leader: it would answer 307/503; the sender retries
                rid = self.proposer.receive(self.now_ms, msg.kind, msg.body)
                if rid is not None:
                    # The reply carries the incarnation once the registration is applied on the
                    # leader (see ``answer_registrations``).
                    self.pending_registrations.append((self.term, msg.body["worker"], rid))
            else:
                self.worker_receive(self.worker_by_id[msg.dst], msg.kind, msg.body)

    def answer_registrations(self) -> None:
        lead = self.replicas[self.leader]
        keep = []
        for term, wid, rid in self.pending_registrations:
            if term != self.term:
                continue  # the leader changed: outcome unknown, the worker will retry
            res = lead.machine.state.requests.get(rid)
            if res is None:
                keep.append((term, wid, rid))
                continue
            if isinstance(res, Ok):
                self.net.send(
                    self.now_ms,
                    self.leader_name(),
                    wid,
                    "registered",
                    {"incarnation": res.value.incarnation},
                )
        self.pending_registrations = keep

    def step(self) -> None:
        self.step_no += 1
        self.now_ms += self.s.step_ms
        if self.faults_on:
            if self.rng.random() < self.s.p_leader_change:
                self.change_leader()
            self.inject_cuts()
            self.inject_worker_faults()
            self.inject_churn()
            self.inject_store_faults()
            self.restart_halted()
            self.inject_store_outage()
            self.inject_clock_step()
        for w in self.workers:
            self.worker_step(w)
        self.deliver()
        self.proposer.tick(self.now_ms)
        self.replicate()
        self.apply_committed()
        self.answer_registrations()
        self.check_gates()

    def profile_of(self, wid: str) -> tuple[tuple[Label, ...], int]:
        """A worker's labels and slots: fixed by its id, so every incarnation says the same."""
        # The zone by the sum of the id's bytes, so w0, w1, w2 ... alternate; the slots by
        # a hash of it.
        zone = ZONES[sum(wid.encode()) % 2]
        span = self.s.worker_slots_max - self.s.worker_slots_min + 1
        return (Label(key="zone", value=zone),), self.s.worker_slots_min + zlib.crc32(
            wid.encode()
        ) % span

    def settled(self) -> bool:
        lead = self.replicas[self.leader]
        state = lead.machine.state
        if state.total_partitions == 0 or state.in_flight_migrations():
            return False
        if rescale_in_flight(state):
            return False
        active = state.active_workers()
        if any(
            pipeline_rescale_in_flight(p) and not pools.unplaceable(state, p, active)
            for p in state.pipelines.values()
        ):
            return False  # a recorded pipeline's rescale ends DONE too, where it can
        if any(
            p.state in (PipelineState.CREATING, PipelineState.DROPPING)
            for p in state.pipelines.values()
        ):
            return False
        if any(
            not self.may_wait(state, p)
            for p in state.partitions
            if p.status is not PartitionStatus.ONLINE
        ):
            return False
        if any(r.applied != self.commit_index for r in self.replicas):
            return False
        hashes = {state_hash(r.machine.state) for r in self.replicas}
        return len(hashes) == 1

    @staticmethod
    def may_wait(state: ClusterState, p: Partition) -> bool:
        """True iff `p` may stay off line in a settled cluster: a partition of a recorded
        pipeline whose pool has no room among the ACTIVE workers (pools.unplaceable)."""
        if p.owner is not None:
            return False  # an owner is hosting it: it must come online
        rec = state.pipelines.get(p.pipeline)
        return rec is not None and bool(pools.unplaceable(state, rec, state.active_workers()))

    def run(self) -> dict[str, int]:
        for _ in range(self.s.fault_steps):
            self.step()
        # Heal: no more faults, every worker back, messages delivered at once.
        self.faults_on = False
        self.net.faulty = False
        self.net.cut.clear()
        self.cut_until.clear()
        self.restart_halted(heal=True)
        self.store_down_until_ms = -1
        for w in self.workers:
            if not w.alive and not w.gone:
                self.restart_worker(w)
            w.paused_until_ms = -1
        for _ in range(self.s.heal_steps_max):
            self.step()
            if self.settled():
                break
        else:
            lead = self.replicas[self.leader].machine.state
            stuck = [(m.migration_id, m.phase.value) for m in lead.in_flight_migrations()] + [
                (p.partition, p.status.value)
                for p in lead.partitions
                if p.status is not PartitionStatus.ONLINE
            ]
            stuck += [
                (p.name, p.rescale.phase.value)
                for p in lead.pipelines.values()
                if p.rescale is not None and pipeline_rescale_in_flight(p)
            ]
            self.fail(f"not settled {self.s.heal_steps_max} steps after heal: {stuck}")
        problems = settled_violations(self.replicas[self.leader].machine.state)
        if problems:
            self.fail("; ".join(problems))
        chains = self.chains
        self.stats |= {"bases": chains.bases, "deltas": chains.deltas}
        self.stats["compactions"] = chains.compactions
        lead = self.replicas[self.leader].machine.state
        self.stats["pipeline_partitions_online"] = sum(
            1
            for p in lead.partitions
            if p.pipeline != DEFAULT_PIPELINE and p.status is PartitionStatus.ONLINE
        )
        return {
            "steps": self.step_no,
            "messages": self.net.sent,
            "dropped": self.net.dropped,
            "duplicated": self.net.duplicated,
            "migrations": len(self.replicas[self.leader].machine.state.migrations),
            **self.stats,
        }


def run_seed(seed: int, settings: SimSettings | None = None) -> dict[str, int]:
    return Simulation(seed, settings).run()
