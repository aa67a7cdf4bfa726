"""The seeded simulation (tests/sim/simulation.py): fixed seeds by default, many with --soak.

A failure message names the seed; ``Simulation(seed).run()`` replays it exactly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from coordinator.core import state as core_state
from coordinator.core.commands import CheckpointsResult, CheckpointVerdict, Ok, RecordCheckpoints
from coordinator.core.liveness import Detector, Liveness
from coordinator.core.state import ClusterState
from tests.sim.simulation import SafetyViolation, SimSettings, Simulation, run_seed

DEFAULT_SEEDS = list(range(20))
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
                ck = core_state.Checkpoint(offset=e.offset, uri=e.uri, epoch=e.epoch, at_ms=0)
                state.put_partition(core_state.replace(part, checkpoint=ck))
            results.append(
                CheckpointVerdict(
                    partition=e.partition,
                    status="accepted" if ok else "fenced",
                    reason=None if ok else "not the owner",
                )
            )
        return Ok(value=CheckpointsResult(results=tuple(results))), False

    monkeypatch.setattr(core_state, "_record_checkpoints", unfenced)
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
