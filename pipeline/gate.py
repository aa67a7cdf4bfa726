"""Per-partition gates: the local correctness backstop for who may process what
(docs/design.md §5).

Owns the gate's transition table, in the manner of `coordinator/core/lifecycle.py`: `TABLE`
maps (status, request, how the request's epoch e compares with the gate's g) to the status
the gate moves to (at e) or the refusal it answers. `Gate.host` and `Gate.close` consult it
and nothing else; a pair not in it is a ``Refused`` value, never an exception.
`docs/pipeline.md` carries the table as `render_markdown` writes it (a test keeps them equal).

Invariant: at most one epoch is open per partition and the gate's epoch never decreases, so
a stale host request (a lower epoch) can never reopen a partition, and an epoch once
released never reopens. ``Gates`` numbers every opening, so a heartbeat reply is applied
only to the gates opened before its request left (``mark``): a reply computed before a
failover assigned a partition here cannot close the gate that assignment's host call opened
meanwhile. Pure: no I/O, no clock; the worker combines ``admits`` with its lease before
processing or checkpointing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "TABLE",
    "Accepted",
    "Gate",
    "GateStatus",
    "Gates",
    "ReconcilePlan",
    "Refusal",
    "Refused",
    "Relation",
    "Request",
    "Transition",
    "render_markdown",
    "step",
]

STATUS_CONFLICT = 409


class GateStatus(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    RELEASED = "released"


class Request(enum.Enum):
    HOST = "host"
    CLOSE = "close"


class Relation(enum.Enum):
    """How a request's epoch e compares with the gate's epoch g (0 while CLOSED)."""

    NOT_POSITIVE = "e <= 0"  # checked first: assignment epochs start at 1
    OLDER = "e < g"
    SAME = "e = g"
    NEWER = "e > g"


class Refusal(enum.Enum):
    """Why a request is refused; the value is the reason's text (e, g and the status filled in)."""

    NOT_POSITIVE = "epoch must be positive, got {e}"
    STALE = "epoch {e} is older than the gate's {g}"
    RELEASED_BEFORE = "epoch {e} was already released here"
    # Every pair the table leaves out (a close anywhere but open or released at g, say).
    NOT_IN_TABLE = "{request} of epoch {e} but the gate is {status} at {g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One row's outcome: the status the gate moves to at e, or the refusal; and why."""

    to: GateStatus | Refusal
    why: str = ""


S, R, E = GateStatus, Request, Relation

# Everything that affects a gate's state lives here. A status reached at e keeps e: only the
# rows into OPEN from NEWER change the epoch, so the epoch never decreases.
TABLE: Mapping[tuple[GateStatus, Request, Relation], Rule] = {
    (S.CLOSED, R.HOST, E.NOT_POSITIVE): Rule(to=Refusal.NOT_POSITIVE),
    (S.CLOSED, R.HOST, E.NEWER): Rule(to=S.OPEN),
    (S.OPEN, R.HOST, E.NOT_POSITIVE): Rule(to=Refusal.NOT_POSITIVE),
    (S.OPEN, R.HOST, E.OLDER): Rule(to=Refusal.STALE),
    (S.OPEN, R.HOST, E.SAME): Rule(to=S.OPEN, why="idempotent"),
    (S.OPEN, R.HOST, E.NEWER): Rule(to=S.OPEN, why="a newer assignment supersedes"),
    (S.OPEN, R.CLOSE, E.SAME): Rule(to=S.RELEASED),
    (S.RELEASED, R.HOST, E.NOT_POSITIVE): Rule(to=Refusal.NOT_POSITIVE),
    (S.RELEASED, R.HOST, E.OLDER): Rule(to=Refusal.STALE),
    (S.RELEASED, R.HOST, E.SAME): Rule(
        to=Refusal.RELEASED_BEFORE, why="an epoch once released never reopens"
    ),
    (S.RELEASED, R.HOST, E.NEWER): Rule(to=S.OPEN),
    (S.RELEASED, R.CLOSE, E.SAME): Rule(to=S.RELEASED, why="idempotent"),
}

# The request's name in a refusal's reason (a close is the release of an epoch).
_VERB = {Request.HOST: "host", Request.CLOSE: "release"}


def relation(epoch: int, gate_epoch: int) -> Relation:
    if epoch <= 0:
        return Relation.NOT_POSITIVE
    if epoch < gate_epoch:
        return Relation.OLDER
    return Relation.SAME if epoch == gate_epoch else Relation.NEWER


def step(gate: Gate, request: Request, epoch: int) -> Transition:
    """What `request` at `epoch` does to `gate`, exactly as `TABLE` says."""
    rule = TABLE.get((gate.status, request, relation(epoch, gate.epoch)))
    to = Refusal.NOT_IN_TABLE if rule is None else rule.to
    if isinstance(to, Refusal):
        reason = to.value.format(
            e=epoch, g=gate.epoch, request=_VERB[request], status=gate.status.value
        )
        return Refused(reason=reason, gate=gate)
    after = Gate(status=to, epoch=epoch)
    if after == gate:
        return Accepted(gate=gate, changed=False)
    return Accepted(gate=after, changed=True)


# How docs/pipeline.md writes a status and a request's epoch (e) against the gate's (g).
_SHOWN_STATUS = {S.CLOSED: "closed (g = 0)", S.OPEN: "open at g", S.RELEASED: "released at g"}
_SHOWN_EPOCH = {
    E.NOT_POSITIVE: "(e), e ≤ 0",
    E.OLDER: "(e), e < g",
    E.SAME: "(g)",
    E.NEWER: "(e), e > g",
}


def render_markdown() -> str:
    """The table as docs/pipeline.md carries it (a test keeps them equal)."""
    lines = ["| Gate | Request | Result |", "|---|---|---|"]
    for (status, request, rel), rule in TABLE.items():
        if isinstance(rule.to, Refusal):
            text = rule.to.value.format(e="e", g="g", request="", status="")
            result = f"refused ({STATUS_CONFLICT}): {text}"
        else:
            result = f"{rule.to.value} at {'g' if rel is E.SAME else 'e'}"
        if rule.why:
            result += f" ({rule.why})"
        request_shown = request.value + _SHOWN_EPOCH[rel]
        lines.append(f"| {_SHOWN_STATUS[status]} | {request_shown} | {result} |")
    lines.append(f"| any other | host(e) or close(e) | refused ({STATUS_CONFLICT}) |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Gate:
    status: GateStatus = GateStatus.CLOSED
    # 0 while CLOSED: assignment epochs start at 1.
    epoch: int = 0

    def host(self, epoch: int) -> Transition:
        return step(self, Request.HOST, epoch)

    def close(self, epoch: int) -> Transition:
        return step(self, Request.CLOSE, epoch)

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
            # What a host call would do, read from the table: refused is a stale assignment.
            hosted = self.get(partition).host(epoch)
            if isinstance(hosted, Refused):
                plan.stale[partition] = epoch
            elif hosted.changed:
                plan.to_open[partition] = epoch
        for partition, epoch in self.open_partitions().items():
            # A newer epoch for an open partition reopens it directly (host supersedes), so
            # only partitions no longer assigned here need an explicit release.
            newer = opened_by is not None and self._opened.get(partition, 0) > opened_by
            if partition not in assignment and not newer:
                plan.to_close[partition] = epoch
        return plan
