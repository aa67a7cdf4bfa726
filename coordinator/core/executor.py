"""The executor's rule for one planner batch, as a sans-IO stepper (etcd raft's Ready loop).

Owns the one rule every driver of the planner follows: commit the batch's commands in order,
each after the previous one's outcome is known; the first non-Ok outcome stops the batch and
the rest are reported SKIPPED; only then start its calls. `BatchRun` holds that rule and does
no I/O, so the leader's duty loop (`coordinator/service/duties.py`, which awaits each commit),
the simulation (which commits over many steps) and the scenario files all run this code::

    run = BatchRun(planner, batch)
    while (cmd := run.next_command()) is not None:
        run.outcome(cmd, commit(cmd), now_ms)   # however the driver commits
    for call in run.calls(): start it
    plan again by run.wake_at_ms(now_ms)

Invariant: the planner hears of every command of the batch exactly once (`Planner.committed`),
in order, and no call is handed out unless every command committed.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.core.commands import Command
from coordinator.core.effects import (
    Batch,
    CommitOutcome,
    WorkerCall,
)
from coordinator.core.planner import (
    Planner,
)

__all__ = ["BatchRun", "commit_batch"]


class BatchRun:
    """One batch being executed. Misuse (a second command asked for before the first one's
    outcome, an outcome for another command, calls before the commands are over) is a bug in
    the driver and raises RuntimeError."""

    __slots__ = ("_batch", "_next", "_planner", "_waiting", "failed", "skipped")

    def __init__(self, planner: Planner, batch: Batch) -> None:
        self._planner = planner
        self._batch = batch
        self._next = 0  # index of the next command to hand out
        self._waiting: Command | None = None
        # The command whose non-Ok outcome stopped the batch, and that outcome.
        self.failed: tuple[Command, CommitOutcome] | None = None
        # The commands after it, reported SKIPPED (never proposed).
        self.skipped: tuple[Command, ...] = ()

    @property
    def done(self) -> bool:
        """No command is left to commit or waits for its outcome."""
        if self._waiting is not None:
            return False
        return self.failed is not None or self._next >= len(self._batch.commands)

    def next_command(self) -> Command | None:
        """The next command to commit, or None when the batch's commands are over."""
        if self._waiting is not None:
            raise RuntimeError(f"{type(self._waiting).__name__} is still waiting for its outcome")
        if self.done:
            return None
        cmd = self._batch.commands[self._next]
        self._next += 1
        self._waiting = cmd
        return cmd

    def outcome(self, cmd: Command, outcome: CommitOutcome, now_ms: int) -> None:
        """The outcome of the command `next_command` handed out; a non-Ok one stops the
        batch and reports the rest SKIPPED."""
        if cmd is not self._waiting:
            raise RuntimeError(f"{type(cmd).__name__} is not the command waiting for an outcome")
        if outcome is CommitOutcome.SKIPPED:
            raise RuntimeError("only the batch skips: a proposed command has another outcome")
        self._waiting = None
        self._planner.committed(cmd, outcome, now_ms)
        if outcome is CommitOutcome.OK:
            return
        self.failed = (cmd, outcome)
        self.skipped = self._batch.commands[self._next :]
        self._next = len(self._batch.commands)
        for rest in self.skipped:
            self._planner.committed(rest, CommitOutcome.SKIPPED, now_ms)

    def calls(self) -> tuple[WorkerCall, ...]:
        """The calls to start once the commands are over: none after a failure."""
        if not self.done:
            raise RuntimeError("calls asked for before the batch's commands are over")
        return () if self.failed is not None else self._batch.calls

    def wake_at_ms(self, now_ms: int) -> int:
        """When to plan again: the batch's wake-up, or one tick from `now_ms` after a failure
        (the next plan may well repeat a rejected command: not at once)."""
        if self.failed is not None:
            return now_ms + self._planner.settings.tick_ms
        return self._batch.wake_at_ms


def commit_batch(
    planner: Planner,
    batch: Batch,
    commit: Callable[[Command], CommitOutcome],
    now_ms: int,
) -> BatchRun:
    """Run `batch` against a synchronous `commit` (a test's or a scenario's state); the
    returned run says what failed, what was skipped and which calls to start."""
    run = BatchRun(planner, batch)
    while (cmd := run.next_command()) is not None:
        run.outcome(cmd, commit(cmd), now_ms)
    return run
