"""The seeded simulation (tests/sim/simulation.py): fixed seeds by default, many with --soak.

A failure message names the seed; ``Simulation(seed).run()`` replays it exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from coordinator.core import fallback, move_plans, partition_commands, pools, retirement
from coordinator.core import stages as stages_module
from coordinator.core.commands import CheckpointsResult, CheckpointVerdict, Ok, RecordCheckpoints
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.load import LoadBook
from coordinator.core.model import Checkpoint, Partition
from coordinator.core.planner import Planner
from coordinator.core.state import ClusterState
from shared.messages.pipeline_rescale import PipelineBuildRequest
from tests.sim.chains import Chains
from tests.sim.simulation import (
    WALL_EPOCH_MS,
    SafetyViolation,
    SimSettings,
    Simulation,
    run_seed,
)

DEFAULT_SEEDS = list(range(20))
# Seeds the balance test may run to see a round by counts (about one seed in six has one).
BALANCE_SEEDS_MAX = 40
SOAK_SEEDS = range(10_000, 11_000)


@pytest.mark.parametrize("seed", DEFAULT_SEEDS)
def test_seed(seed: int) -> None:
    stats = run_seed(seed)
    # A run that exercised nothing proves nothing: demand some faults and some work.
    assert stats["entries"] > 50, f"seed={seed}: too little work {stats}"
    assert stats["leader_changes"] + stats["crashes"] + stats["pauses"] > 0, f"seed={seed}"
    assert stats["cuts"] > 0, f"seed={seed}: no network partition was injected {stats}"
    # Group commit: some entries carried several commands (and were checked as such).
    assert stats["batches"] > 0, f"seed={seed}: no batch entry {stats}"


def test_same_seed_same_run() -> None:
    a, b = Simulation(7), Simulation(7)
    assert a.run() == b.run()
    assert [r.log for r in a.replicas] == [r.log for r in b.replicas]


def test_checker_catches_an_unsafe_election() -> None:
    """A leader elected without every committed entry must be reported, with its seed."""
    settings = replace(SimSettings(), unsafe_election=True, p_leader_change=0.1)
    caught = []
    for seed in range(30):
        try:
            Simulation(seed, settings).run()
        except SafetyViolation as exc:
            caught.append(str(exc))
    assert caught, "30 seeds with an unsafe election and the checker saw nothing"
    assert all(msg.startswith("seed=") for msg in caught)


def test_checker_catches_a_stale_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state machine that forgets the epoch fence is caught by the checkpoint invariant."""

    def unfenced(state: ClusterState, cmd: RecordCheckpoints) -> Any:
        results = []
        for e in cmd.entries:
            part = state.partitions[e.partition]
            ok = part.owner == cmd.worker_id
            if ok:
                ck = Checkpoint(offset=e.offset, uri=e.uri, epoch=e.epoch, at_ms=0)
                state.put_partition(replace(part, checkpoint=ck))
            results.append(
                CheckpointVerdict(
                    partition=e.partition,
                    status="accepted" if ok else "fenced",
                    reason=None if ok else "not the owner",
                )
            )
        return Ok(value=CheckpointsResult(results=tuple(results))), False

    monkeypatch.setattr(partition_commands, "record_checkpoints", unfenced)
    with pytest.raises(SafetyViolation, match="stale epoch"):
        for seed in range(30):
            run_seed(seed)


def test_restarts_are_held_and_rejoin() -> None:
    """Workers stop as SIGTERM stops them and come back: the leader holds some (the notice
    got through) and some rejoin while held; the holds are checked on every proposal."""
    totals: Counter[str] = Counter()
    for seed in range(5):
        totals.update(run_seed(seed))
    assert totals["holds"] > 0 and totals["rejoined_in_grace"] > 0, dict(totals)


def test_checker_catches_a_planner_that_ignores_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure detector that judges held workers like any other declares a restarting
    worker dead during its grace: the hold check reports it, with its seed."""

    def dead_regardless(self: Detector, now_ms: int) -> frozenset[str]:
        judged = {w: self._judge(self._seen[w], now_ms) for w in self.known()}
        return frozenset(w for w, verdict in judged.items() if verdict is Liveness.DEAD)

    monkeypatch.setattr(Detector, "dead", dead_regardless)
    with pytest.raises(SafetyViolation, match="touches held workers"):
        for seed in range(30):
            run_seed(seed)


def test_maintenance_pauses_balance_and_the_checker_sees_a_planner_that_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator turns maintenance mode on and off at random (some on for a time, which
    the leader ends); automatic balances happen while it is off. A planner that ignores the
    mode is reported, with its seed."""
    totals: Counter[str] = Counter()
    for seed in range(5):
        totals.update(run_seed(seed))
    assert totals["maintenance_on"] > 0 and totals["maintenance_expired"] > 0, dict(totals)
    assert totals["balance_plans"] > 0, dict(totals)
    monkeypatch.setattr(stages_module, "balance_paused", lambda _state: False)
    with pytest.raises(SafetyViolation, match="while maintenance mode is on"):
        for seed in range(30):
            run_seed(seed)


def test_rescales_finish_and_the_checker_sees_a_planner_that_balances_during_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator rescales to random counts: workers seal and answer cuts, one builds, the
    new partitions are hosted and every rescale ends DONE by the heal (a settled run needs
    it). A planner that balances while one is in flight is reported."""
    totals: Counter[str] = Counter()
    for seed in range(8):
        totals.update(run_seed(seed))
    assert totals["rescales"] > 0 and totals["cut_answers"] > 0, dict(totals)
    assert totals["build_answers"] > 0, dict(totals)
    monkeypatch.setattr(stages_module, "rescaling", lambda _state: False)
    with pytest.raises(SafetyViolation, match="while a rescale is in flight"):
        for seed in range(40):
            run_seed(seed)


def test_balance_rounds_by_load_and_by_counts() -> None:
    """The drifting rates make the leader rebalance by load while every rate is fresh and by
    counts while some is stale; both kinds of round are checked as they are planned."""
    totals: Counter[str] = Counter()
    # A round by counts comes in about one seed of six: the seeds run until both kinds are
    # seen, at most BALANCE_SEEDS_MAX of them. Without the sync, store and clock faults.
    calm = replace(SimSettings(), p_sync_halt=0.0, p_store_outage=0.0, p_clock_step=0.0)
    for seed in range(BALANCE_SEEDS_MAX):
        totals.update(run_seed(seed, calm))
        if seed >= 9 and totals["weighted_rounds"] and totals["count_rounds"]:
            break
    assert totals["weighted_rounds"] > 0 and totals["count_rounds"] > 0, dict(totals)
    assert totals["weighted_heartbeats"] > 0 and totals["stale_load_reports"] > 0, dict(totals)


def test_checker_catches_a_round_that_raises_the_busiest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A weighted placement that then hands the heaviest partition to the busiest worker
    makes it busier: the balance check reports it, with its seed."""
    real = move_plans.plan_weighted

    def piled(
        owners: Sequence[str | None], eligible: Sequence[str], weights: Sequence[float], **kw: Any
    ) -> list[str | None]:
        out = real(owners, eligible, weights, **kw)
        loads: Counter[str] = Counter()
        for p, owner in enumerate(owners):
            if owner is not None:
                loads[owner] += weights[p]
        busiest = max(sorted(loads), key=lambda w: loads[w], default=None)
        if busiest is not None and busiest in eligible:
            heaviest = max(range(len(weights)), key=lambda p: weights[p])
            out[heaviest] = busiest if owners[heaviest] != busiest else out[heaviest]
        return out

    monkeypatch.setattr(move_plans, "plan_weighted", piled)
    # Without rescales, which pause balance: the seeds that show the round are the same.
    no_rescales = replace(SimSettings(), p_rescale=0.0)
    with pytest.raises(SafetyViolation, match="raised the busiest"):
        for seed in range(30):
            run_seed(seed, no_rescales)


def test_checker_catches_a_round_on_stale_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load book that answers with rates however old they are makes the planner balance
    load it no longer knows instead of counts: the balance check reports it."""

    def any_age(self: LoadBook, total_partitions: int, now_ms: int) -> list[float] | None:
        seen = [self.of(p) for p in range(total_partitions)]
        return None if any(s is None for s in seen) else [s.rate_per_s for s in seen if s]

    monkeypatch.setattr(LoadBook, "weights", any_age)
    with pytest.raises(SafetyViolation, match="stale load left counts unbalanced"):
        for seed in range(30):
            run_seed(seed)


def test_sync_halts_store_outages_and_clock_steps_are_injected() -> None:
    """The faults past a kill: replicas halt on a failed sync (a leader among them) and drop
    their unsynced tails at the restart, the store fails calls by errors and timeouts, and
    wall clocks step by an hour; every check above holds through them."""
    totals: Counter[str] = Counter()
    for seed in range(5):
        totals.update(run_seed(seed))
    assert totals["sync_halts"] > 0 and totals["halted_leaders"] > 0, dict(totals)
    assert totals["unsynced_dropped"] > 0, dict(totals)
    assert totals["store_outages"] > 0 and totals["store_failures"] > 0, dict(totals)
    assert totals["clock_steps"] > 0, dict(totals)


def test_checker_catches_an_ack_of_a_failed_sync() -> None:
    """A follower that acknowledges an append whose sync failed lets an entry commit that
    its restart drops: the durability check reports it, with its seed."""
    settings = replace(SimSettings(), unsafe_ack_unsynced=True, p_sync_halt=0.05)
    with pytest.raises(SafetyViolation, match=r"synced on|loses applied entry"):
        for seed in range(30):
            Simulation(seed, settings).run()


def test_checker_catches_liveness_on_the_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planner that judged liveness by the wall clock would declare workers dead when a
    leader's clock steps forward: the liveness check reports it, with its seed."""
    real = Planner.plan

    def on_wall(self: Planner, state: ClusterState, now_ms: int, wall_ms: int) -> Any:
        return real(self, state, wall_ms - WALL_EPOCH_MS, wall_ms)

    monkeypatch.setattr(Planner, "plan", on_wall)
    with pytest.raises(SafetyViolation, match="DeclareDead"):
        for seed in range(30):
            run_seed(seed)


def test_checker_catches_a_report_of_an_unwritten_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that reports a checkpoint whose write the store failed leaves the state
    naming an object that does not exist: the reference check reports it."""
    monkeypatch.setattr(Simulation, "store_failing", lambda _self: False)
    monkeypatch.setattr(Simulation, "store_write", lambda _self, _uri: True)
    with pytest.raises(SafetyViolation, match="unwritten objects"):
        run_seed(0)


@pytest.mark.soak
@pytest.mark.timeout(1800)  # 1,000 seeds: a few minutes, more on a loaded machine
def test_soak_many_seeds() -> None:
    failures = []
    totals: Counter[str] = Counter()
    for seed in SOAK_SEEDS:
        try:
            totals.update(run_seed(seed))
        except SafetyViolation as exc:
            failures.append(str(exc))
    print(f"\n[sim] {len(SOAK_SEEDS)} seeds, {len(failures)} violations: {dict(totals)}")
    assert not failures, "\n".join(failures[:10])


# Workers churn under fresh ids and the leader retires the departed 1.5 s after they left;
# half the departed come back as zombies (their old incarnation, gates and reports).
CHURN = replace(SimSettings(), p_worker_churn=0.03, retire_after_ms=1_500)


def test_churn_retires_the_departed_and_fences_the_retired() -> None:
    """Every RetireWorkers is checked (only DEAD or LEFT workers, under the floor), every
    registration is above the floor, no (worker, incarnation) comes back, and a retired
    incarnation's checkpoint report is never accepted."""
    totals: Counter[str] = Counter()
    for seed in range(5):
        totals.update(run_seed(seed, CHURN))
    assert totals["churned"] > 0 and totals["zombies"] > 0, dict(totals)
    assert totals["retired"] > 0, dict(totals)


def test_checker_catches_a_retired_id_registering_at_an_old_incarnation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the incarnation floor a retired id registers at 1 again, where its old tokens
    name it: the step and ledger checks report it, with the seed."""
    monkeypatch.setattr(retirement, "first_incarnation", lambda _state: 1)
    with pytest.raises(SafetyViolation, match=r"floor|old token could act again"):
        for seed in range(30):
            run_seed(seed, CHURN)


@pytest.mark.soak
@pytest.mark.timeout(7200)  # 1,000 churning seeds: about an hour on a loaded machine
def test_churn_soak_many_seeds() -> None:
    failures = []
    totals: Counter[str] = Counter()
    for seed in SOAK_SEEDS:
        try:
            totals.update(run_seed(seed, CHURN))
        except SafetyViolation as exc:
            failures.append(str(exc))
    print(f"\n[sim churn] {len(SOAK_SEEDS)} seeds, {len(failures)} violations: {dict(totals)}")
    assert not failures, "\n".join(failures[:10])


def test_pipelines_are_set_up_rescaled_placed_in_their_pools_and_torn_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator creates, pauses, resumes, rescales (or updates the spec of) and drops
    recorded pipelines; every worker declares a profile; their partitions come ONLINE in
    their pools, workers answer their cuts and builds, rescales end DONE and every drop
    ends. A placement that ignored pools is reported at the settle."""
    totals: Counter[str] = Counter()
    for seed in range(8):
        totals.update(run_seed(seed))
    assert totals["pipelines_created"] > 0 and totals["pipelines_dropped"] > 0, dict(totals)
    assert totals["pipeline_partitions_online"] > 0, dict(totals)
    assert totals["pipeline_rescales"] > 0 and totals["pipeline_spec_updates"] > 0, dict(totals)
    assert totals["pipeline_cut_answers"] > 0, dict(totals)
    assert totals["pipeline_build_answers"] > 0, dict(totals)
    assert totals["pipeline_rescales_done"] > 0, dict(totals)


def test_checker_sees_a_pipeline_rescale_that_never_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose pipeline builds leave out a reserved number is never answered done,
    so the rescale stays MOVING: the settle after the heal waits for it and reports it."""
    short = property(lambda c: range(c.first_slot, c.first_slot + c.partitions - 1))
    monkeypatch.setattr(PipelineBuildRequest, "numbers", short)
    with pytest.raises(SafetyViolation, match="not settled"):
        for seed in range(8):
            run_seed(seed)
    monkeypatch.setattr(pools, "members", lambda state, p, eligible: sorted(eligible))
    with pytest.raises(SafetyViolation, match=r"outside its pool|holds .* over"):
        for seed in range(40):
            run_seed(seed)


def test_chains_compact_and_a_lost_object_falls_back() -> None:
    """Checkpoints are bases and deltas: each session starts with a base, later ones compact
    into new bases; the store loses deltas as well as bases, a host from a chain that holds
    a lost ancestor answers checkpoint_unavailable and the leader falls back from it. Every
    load is walked and checked (whole, in lineage, one session)."""
    totals: Counter[str] = Counter()
    for seed in range(8):
        totals.update(run_seed(seed))
    assert totals["bases"] > 0 and totals["deltas"] > 0, dict(totals)
    assert totals["compactions"] > 0 and totals["lost_deltas"] > 0, dict(totals)
    assert totals["chain_breaks"] > 0 and totals["chain_fallbacks"] > 0, dict(totals)


def test_checker_catches_a_load_of_a_chain_with_a_lost_ancestor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loader that checks the newest object only (as before deltas) loads a chain whose
    earlier object is lost: the load check reports it, with its seed."""
    monkeypatch.setattr(Chains, "broken", lambda self, uri: uri in self.lost)
    with pytest.raises(SafetyViolation, match="whose chain holds the lost"):
        for seed in range(30):
            run_seed(seed)


def test_checker_catches_a_delta_onto_an_earlier_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that extends its last chain of a partition after loading it again (rather
    than writing a base first) writes deltas onto state it no longer holds: the load check
    reports the chain reaching into another session's objects."""
    monkeypatch.setattr(Chains, "tip_key", lambda _self, s, p: (s.split("#")[0], p))
    with pytest.raises(SafetyViolation, match="reaches into"):
        for seed in range(30):
            run_seed(seed)


def test_checker_catches_a_stuck_partition_with_a_whole_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fallback that skips the earlier checkpoints marks a rescaled partition stuck while
    its floor (the build) loads: the stuck check reports it, with its seed."""
    real = fallback.decide

    def skipping(part: Partition, *args: Any) -> Any:
        return real(replace(part, earlier=()), *args)

    monkeypatch.setattr(fallback, "decide", skipping)
    lossy = replace(SimSettings(), p_lose_checkpoint=0.05)
    with pytest.raises(SafetyViolation, match="stuck with a whole floor"):
        for seed in range(30):
            run_seed(seed, lossy)
