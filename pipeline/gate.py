"""Per-partition gates: the local correctness backstop for who may process what
(docs/design.md §5).

States and transitions (anything not in the table is a ``Refused`` value, never an exception)::

    CLOSED          --host(e)-->          OPEN(e)
    OPEN(g)         --host(e), e > g -->  OPEN(e)      (a newer assignment supersedes)
    OPEN(g)         --host(g)-->          OPEN(g)      (idempotent)
    OPEN(g)         --close(g)-->         RELEASED(g)
    RELEASED(g)     --close(g)-->         RELEASED(g)  (idempotent)
    RELEASED(g)     --host(e), e > g -->  OPEN(e)
    any             --host(e), e < g -->  Refused(409)
    RELEASED(g)     --host(g)-->          Refused(409) (an epoch once released never reopens)

Invariant: at most one epoch is open per partition and the gate's epoch never decreases, so
a stale host request (a lower epoch) can never reopen a partition. ``Gates`` numbers every
opening, so a heartbeat reply is applied only to the gates opened before its request left
(``mark``): a reply computed before a failover assigned a partition here cannot close the
gate that assignment's host call opened meanwhile. Pure: no I/O, no clock;
the worker combines ``admits`` with its lease before processing or checkpointing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Accepted",
    "Gate",
    "GateStatus",
    "Gates",
    "ReconcilePlan",
    "Refused",
    "Transition",
]

STATUS_CONFLICT = 409


class GateStatus(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    RELEASED = "released"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    status: GateStatus = GateStatus.CLOSED
    # 0 while CLOSED: assignment epochs start at 1.
    epoch: int = 0

    def host(self, epoch: int) -> Transition:
        if epoch <= 0:
            return Refused(reason=f"epoch must be positive, got {epoch}", gate=self)
        if epoch < self.epoch:
            return Refused(reason=f"epoch {epoch} is older than the gate's {self.epoch}", gate=self)
        if epoch == self.epoch and self.status is GateStatus.OPEN:
            return Accepted(gate=self, changed=False)
        if epoch == self.epoch and self.status is GateStatus.RELEASED:
            return Refused(reason=f"epoch {epoch} was already released here", gate=self)
        return Accepted(gate=Gate(status=GateStatus.OPEN, epoch=epoch), changed=True)

    def close(self, epoch: int) -> Transition:
        if epoch == self.epoch and self.status is GateStatus.OPEN:
            return Accepted(gate=Gate(status=GateStatus.RELEASED, epoch=epoch), changed=True)
        if epoch == self.epoch and self.status is GateStatus.RELEASED:
            return Accepted(gate=self, changed=False)
        return Refused(
            reason=f"release of epoch {epoch} but the gate is {self.status.value} at {self.epoch}",
            gate=self,
        )

    def admits(self, epoch: int) -> bool:
        return self.status is GateStatus.OPEN and epoch == self.epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    gate: Gate
    changed: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    reason: str
    gate: Gate
    status_hint: int = STATUS_CONFLICT


Transition = Accepted | Refused


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcilePlan:
    """What bringing the gates in line with an assignment takes (partition -> epoch)."""

    to_open: dict[int, int] = field(default_factory=dict)
    to_close: dict[int, int] = field(default_factory=dict)
    # Assigned epochs older than what the gate already saw: a stale assignment, ignored.
    stale: dict[int, int] = field(default_factory=dict)


class Gates:
    """The gates of one worker, keyed by partition."""

    def __init__(self, openings: int = 0) -> None:
        self._gates: dict[int, Gate] = {}
        # Partition -> the number of the opening that made its gate OPEN at its epoch.
        self._opened: dict[int, int] = {}
        self._openings = openings

    def get(self, partition: int) -> Gate:
        return self._gates.get(partition, Gate())

    def mark(self) -> int:
        """The number of the latest opening: what a heartbeat's reply may act on."""
        return self._openings

    def host(self, partition: int, epoch: int) -> Transition:
        result = self.get(partition).host(epoch)
        if isinstance(result, Accepted):
            self._gates[partition] = result.gate
            if result.changed:
                self._openings += 1
                self._opened[partition] = self._openings
        return result

    def close(self, partition: int, epoch: int) -> Transition:
        result = self.get(partition).close(epoch)
        if isinstance(result, Accepted):
            self._gates[partition] = result.gate
        return result

    def admits(self, partition: int, epoch: int) -> bool:
        return self.get(partition).admits(epoch)

    def open_partitions(self) -> dict[int, int]:
        return {p: g.epoch for p, g in sorted(self._gates.items()) if g.status is GateStatus.OPEN}

    def reconcile(
        self, assignment: Mapping[int, int], opened_by: int | None = None
    ) -> ReconcilePlan:
        """Which gates to open and close so exactly ``assignment`` is open. Changes nothing.
        With ``opened_by`` (a ``mark``), a gate opened after that mark is never closed: the
        assignment may predate the host call that opened it."""
        plan = ReconcilePlan()
        for partition, epoch in sorted(assignment.items()):
            gate = self.get(partition)
            if epoch < gate.epoch or (epoch == gate.epoch and gate.status is GateStatus.RELEASED):
                plan.stale[partition] = epoch
            elif not gate.admits(epoch):
                plan.to_open[partition] = epoch
        for partition, epoch in self.open_partitions().items():
            # A newer epoch for an open partition reopens it directly (host supersedes), so
            # only partitions no longer assigned here need an explicit release.
            newer = opened_by is not None and self._opened.get(partition, 0) > opened_by
            if partition not in assignment and not newer:
                plan.to_close[partition] = epoch
        return plan
