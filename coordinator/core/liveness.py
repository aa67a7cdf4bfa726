"""Heartbeat failure detector: last-seen time and load per worker, on the leader only.

Owns the ALIVE -> SUSPECTED -> DEAD judgement from elapsed time since the last heartbeat,
and the holds of workers that said they are restarting: RESTARTING until the hold's end,
judged by their last heartbeat again after it. It is not replicated (heartbeats carry
compact, non-durable load: docs/design.md §3), so a new leader starts empty and must `seed`
every ACTIVE worker as seen "now".

Invariants: a worker's last-seen time never moves backwards, a worker this detector has
never heard of is never reported dead -- a failover must not mass-kill healthy workers --
and a held worker is never reported dead before its hold ends.
Workers are kept in last-seen order, so `evaluate` reads only the workers past the suspect
threshold (before any stall credit, below) and one more (the leader evaluates every duty
tick, and a scan of every worker would grow with all the workers ever registered).

The leader's own stall is not a worker's silence: a heartbeat counts when the leader's loop
reads it, so while that loop is stalled (a flood of requests, the process descheduled) every
worker looks silent. The service tells the detector the loop's total stall (`stalled`, a
monotonic total in ms); each last-seen time keeps the total as it was then, and silence is
judged as the time since the last heartbeat less the stall since it, the credit capped at
`STALL_CREDIT_MAX_SHARE` of `dead_after_ms` so that a leader stalled for good still declares
a silent worker dead (within `(1 + STALL_CREDIT_MAX_SHARE) * dead_after_ms`). The credit only
ever postpones a verdict, never brings one forward: a worker's lease, which runs out before
`dead_after_ms` of real silence, still runs out before it is declared dead.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

__all__ = ["STALL_CREDIT_MAX_SHARE", "Detector", "Liveness", "Verdict"]

# The most of the leader's loop stall credited to one worker's silence, as a share of
# `dead_after_ms`: a stall longer than that is judged as the worker's silence again.
STALL_CREDIT_MAX_SHARE = 1.0


class Liveness(Enum):
    ALIVE = "alive"
    SUSPECTED = "suspected"
    DEAD = "dead"
    # Said it is restarting and is held for its rejoin grace: neither judged nor given work.
    RESTARTING = "restarting"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """Workers past a threshold at one instant; `dead` and `suspected` are disjoint, and
    neither holds a worker held for its restart."""

    suspected: frozenset[str]
    dead: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Seen:
    last_seen_ms: int
    # None until the first real heartbeat: a seeded worker has reported no load yet.
    load: float | None
    # The leader's total loop stall (`Detector.stalled`) when last seen.
    stall_ms: int


class Detector:
    """Mutable but pure: time comes in as `now_ms`, nothing here reads a clock."""

    __slots__ = (
        "_holds",
        "_newest_ms",
        "_seen",
        "_stall_ms",
        "dead_after_ms",
        "stall_credit_max_ms",
        "suspect_after_ms",
    )

    def __init__(self, *, suspect_after_ms: int, dead_after_ms: int) -> None:
        if not 0 < suspect_after_ms < dead_after_ms:
            raise ValueError(
                "need 0 < suspect_after_ms < dead_after_ms, got "
                f"{suspect_after_ms} and {dead_after_ms}"
            )
        self.suspect_after_ms = suspect_after_ms
        self.dead_after_ms = dead_after_ms
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        # The latest last-seen time ever put (an upper bound of the newest in `_seen`).
        self._newest_ms = -(2**63)
        # Workers held for a restart -> when the hold ends (monotonic ms). At most one per
        # known worker: `forget` and `unhold` drop it, and an ended hold is dropped when read.
        self._holds: dict[str, int] = {}
        # The leader's loop stall in all, as last told (never decreases).
        self._stall_ms = 0
        self.stall_credit_max_ms = int(dead_after_ms * STALL_CREDIT_MAX_SHARE)

    def stalled(self, total_ms: int) -> None:
        """The leader's event loop has been stalled `total_ms` in all so far (the service's
        measure, on the monotonic clock); a smaller total than before changes nothing."""
        self._stall_ms = max(self._stall_ms, total_ms)

    def _put(self, worker_id: str, seen: _Seen) -> None:
        """Insert or update, keeping `_seen` ordered by last-seen time, oldest first."""
        self._seen[worker_id] = seen
        self._seen.move_to_end(worker_id)
        if seen.last_seen_ms >= self._newest_ms:
            # Not older than anything ever put: last is its place (the common case, one
            # comparison per heartbeat).
            self._newest_ms = seen.last_seen_ms
        elif len(self._seen) > 1:
            # The clock is monotonic, so the newest is almost always last; if a caller's
            # time went backwards, restore the order (rare, O(n log n)).
            it = reversed(self._seen.values())
            next(it)
            before = next(it)
            if before.last_seen_ms > seen.last_seen_ms:
                ordered = sorted(self._seen.items(), key=lambda kv: kv[1].last_seen_ms)
                self._seen = OrderedDict(ordered)

    def observe(self, worker_id: str, now_ms: int, load: float) -> None:
        """Record a heartbeat. A late-delivered, older heartbeat cannot rewind last-seen."""
        if not math.isfinite(load):
            raise ValueError(f"load must be finite, got {load!r}")
        prev = self._seen.get(worker_id)
        if prev is None or prev.last_seen_ms <= now_ms:
            self._put(worker_id, _Seen(last_seen_ms=now_ms, load=load, stall_ms=self._stall_ms))
        else:
            self._put(
                worker_id,
                _Seen(last_seen_ms=prev.last_seen_ms, load=load, stall_ms=prev.stall_ms),
            )

    def seed(self, worker_ids: Iterable[str], now_ms: int) -> None:
        """Count every given worker as seen at `now_ms` (called when becoming leader)."""
        for worker_id in worker_ids:
            prev = self._seen.get(worker_id)
            if prev is None:
                self._put(worker_id, _Seen(last_seen_ms=now_ms, load=None, stall_ms=self._stall_ms))
            elif prev.last_seen_ms < now_ms:
                self._put(
                    worker_id, _Seen(last_seen_ms=now_ms, load=prev.load, stall_ms=self._stall_ms)
                )

    def forget(self, worker_id: str) -> None:
        self._seen.pop(worker_id, None)
        self._holds.pop(worker_id, None)

    def hold(self, worker_id: str, until_ms: int) -> None:
        """Hold a known worker (it said it is restarting) until `until_ms`: RESTARTING, and
        never dead, until then. A worker never observed or seeded is not held."""
        if worker_id in self._seen:
            self._holds[worker_id] = until_ms

    def unhold(self, worker_id: str) -> None:
        """End a hold early (the worker registered again, or an operator drained it)."""
        self._holds.pop(worker_id, None)

    def held(self, worker_id: str, now_ms: int) -> bool:
        """Whether `worker_id` is held at `now_ms`; an ended hold is dropped here."""
        until = self._holds.get(worker_id)
        if until is None:
            return False
        if now_ms < until:
            return True
        del self._holds[worker_id]
        return False

    def holds(self, now_ms: int) -> frozenset[str]:
        """Every worker held at `now_ms`."""
        return frozenset(w for w in list(self._holds) if self.held(w, now_ms))

    def hold_ends_ms(self, worker_id: str) -> int | None:
        return self._holds.get(worker_id)

    def _judge(self, seen: _Seen, now_ms: int) -> Liveness:
        # Time is assumed monotonic; if it is not, a clock step must not kill anyone.
        credit_ms = min(self.stall_credit_max_ms, self._stall_ms - seen.stall_ms)
        elapsed_ms = max(0, now_ms - seen.last_seen_ms - credit_ms)
        # Strictly greater: exactly at the timeout is still in time.
        if elapsed_ms > self.dead_after_ms:
            return Liveness.DEAD
        if elapsed_ms > self.suspect_after_ms:
            return Liveness.SUSPECTED
        return Liveness.ALIVE

    def status(self, worker_id: str, now_ms: int) -> Liveness | None:
        """None for a worker never observed or seeded: unknown is neither alive nor dead."""
        seen = self._seen.get(worker_id)
        if seen is None:
            return None
        if self._holds and self.held(worker_id, now_ms):
            return Liveness.RESTARTING
        return self._judge(seen, now_ms)

    def evaluate(self, now_ms: int) -> Verdict:
        suspected: set[str] = set()
        dead: set[str] = set()
        for worker_id, seen in self._seen.items():  # oldest first
            if now_ms - seen.last_seen_ms <= self.suspect_after_ms:
                # Alive without any stall credit: everyone after it was seen later, alive
                # too. (Judged with the credit, the order of silences can differ from the
                # order of last-seen times by the stall told between two heartbeats.)
                break
            verdict = self._judge(seen, now_ms)
            if verdict is Liveness.ALIVE:
                continue
            if self._holds and self.held(worker_id, now_ms):
                continue
            (dead if verdict is Liveness.DEAD else suspected).add(worker_id)
        return Verdict(suspected=frozenset(suspected), dead=frozenset(dead))

    def dead(self, now_ms: int) -> frozenset[str]:
        """`evaluate(now_ms).dead` reading only the dead (held ones passed over) and one more:
        the planner asks every tick, and the suspected (who may be many) need no answer
        there."""
        dead: list[str] = []
        for worker_id, seen in self._seen.items():  # oldest first
            if now_ms - seen.last_seen_ms <= self.dead_after_ms:
                break  # not dead even without stall credit, nor anyone seen after it
            if self._judge(seen, now_ms) is not Liveness.DEAD:
                continue
            if self._holds and self.held(worker_id, now_ms):
                continue
            dead.append(worker_id)
        return frozenset(dead)

    def load(self, worker_id: str) -> float | None:
        seen = self._seen.get(worker_id)
        return None if seen is None else seen.load

    def last_seen_ms(self, worker_id: str) -> int | None:
        seen = self._seen.get(worker_id)
        return None if seen is None else seen.last_seen_ms

    def known(self) -> frozenset[str]:
        return frozenset(self._seen)
