"""The executor's rule (coordinator/core/executor.py): every driver of the planner runs it."""

from __future__ import annotations

import random

import pytest

from coordinator.core.commands import Command, StartRelease
from coordinator.core.effects import (
    Batch,
    CheckpointCall,
    CommitOutcome,
)
from coordinator.core.executor import BatchRun, commit_batch
from coordinator.core.model import MigrationId, WorkerId
from coordinator.core.planner import (
    Planner,
)
from coordinator.core.state import ClusterState
from tests.planner_base import quick_settings

SETTINGS = quick_settings(total_partitions=1, tick_ms=100)
A, B, C = (StartRelease(migration_id=MigrationId(f"m-{i}"), now_ms=0) for i in (1, 2, 3))
CALL = CheckpointCall(worker_id=WorkerId("w1"), address="http://w1", incarnation=1)


class Recorder(Planner):
    """The real planner, with every outcome it is told kept in order."""

    def __init__(self) -> None:
        super().__init__(SETTINGS, random.Random(0), ClusterState(), 0)
        self.told: list[tuple[Command, CommitOutcome, int]] = []

    def committed(self, cmd: Command, outcome: CommitOutcome, now_ms: int) -> None:
        self.told.append((cmd, outcome, now_ms))
        super().committed(cmd, outcome, now_ms)


def test_commands_in_order_then_the_calls() -> None:
    planner = Recorder()
    run = commit_batch(
        planner, Batch(commands=(A, B), calls=(CALL,), wake_at_ms=7), lambda _: CommitOutcome.OK, 5
    )
    assert planner.told == [(A, CommitOutcome.OK, 5), (B, CommitOutcome.OK, 5)]
    assert run.done and run.failed is None and run.skipped == ()
    assert run.calls() == (CALL,)
    assert run.wake_at_ms(5) == 7


@pytest.mark.parametrize("outcome", [CommitOutcome.REJECTED, CommitOutcome.UNKNOWN])
def test_the_first_failure_skips_the_rest_and_every_call(outcome: CommitOutcome) -> None:
    planner = Recorder()
    batch = Batch(commands=(A, B, C), calls=(CALL,), wake_at_ms=5)
    proposed: list[Command] = []

    def commit(cmd: Command) -> CommitOutcome:
        proposed.append(cmd)
        return outcome if cmd is B else CommitOutcome.OK

    run = commit_batch(planner, batch, commit, 9)
    assert proposed == [A, B]  # C never proposed
    assert planner.told == [
        (A, CommitOutcome.OK, 9),
        (B, outcome, 9),
        (C, CommitOutcome.SKIPPED, 9),
    ]
    assert run.failed == (B, outcome) and run.skipped == (C,)
    assert run.calls() == ()
    # Not at once: the next plan may well repeat the rejected command.
    assert run.wake_at_ms(9) == 9 + SETTINGS.tick_ms


def test_a_batch_without_commands_starts_its_calls_at_once() -> None:
    run = BatchRun(Recorder(), Batch(calls=(CALL,), wake_at_ms=3))
    assert run.done and run.next_command() is None
    assert run.calls() == (CALL,)


def test_the_stepper_waits_for_each_outcome() -> None:
    """The shape an asynchronous driver uses (the duty loop, the simulation): one command
    out, its outcome in, possibly much later; misuse is a driver bug and raises."""
    planner = Recorder()
    run = BatchRun(planner, Batch(commands=(A, B), calls=(CALL,)))
    assert run.next_command() is A
    assert not run.done
    with pytest.raises(RuntimeError, match="waiting"):
        run.next_command()
    with pytest.raises(RuntimeError, match="calls"):
        run.calls()
    with pytest.raises(RuntimeError, match="not the command"):
        run.outcome(B, CommitOutcome.OK, 1)
    with pytest.raises(RuntimeError, match="only the batch skips"):
        run.outcome(A, CommitOutcome.SKIPPED, 1)
    assert planner.told == []
    run.outcome(A, CommitOutcome.OK, 1)
    assert run.next_command() is B
    run.outcome(B, CommitOutcome.OK, 2)
    assert run.next_command() is None and run.done
    assert planner.told == [(A, CommitOutcome.OK, 1), (B, CommitOutcome.OK, 2)]
    assert run.calls() == (CALL,)
