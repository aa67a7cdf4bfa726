"""The leader's warm-ups in flight: which WARMING migrations' targets are warm, and when each
stops waiting and goes cold.

Owns the progress of warm hand-offs (docs/design.md §4) as the leader sees it, in memory and
never replicated: the phase WARMING is the commit point, so a new leader finds every warm-up
in the state, starts its deadline afresh from its takeover and asks the target again (the
warm call is idempotent). It decides two things for the planner: which PLANNED migrations may
start warming (at most `per_worker_max` per target and `in_flight_max` in the cluster) and
which WARMING ones may go on to release (the target is within `lag_records_max` of the source
log's end, refused, or its deadline passed). Invariant: no migration stays WARMING past
`timeout_ms` after this leader first saw it so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from coordinator.core.effects import WarmDone
from coordinator.core.model import Migration, MigrationId

__all__ = ["WarmOutcome", "WarmPolicy", "WarmUps"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmPolicy:
    # False: every move is cold (PLANNED goes straight to RELEASING).
    enabled: bool
    # How long the source keeps serving while its target warms up before the move goes cold.
    timeout_ms: int
    # Warm = the target's copy is at most this many records behind the source log's end.
    lag_records_max: int
    # Warm-ups in flight in the cluster, and per target worker.
    in_flight_max: int
    per_worker_max: int
    # How often the leader asks a warming target how far it is.
    poll_ms: int = 500


class WarmOutcome(Enum):
    WARM = "warm"  # the target caught up: the source releases, the target replays a tail
    REFUSED = "refused"  # the target could not warm up (busy, load failed): go cold now
    TIMED_OUT = "timed_out"  # the deadline passed: go cold


@dataclass(slots=True)
class _Progress:
    started_ms: int
    next_poll_ms: int
    outcome: WarmOutcome | None = None
    loaded: bool = False
    offset: int = 0
    head: int = 0


class WarmUps:
    """Mutable, pure: `now_ms` (monotonic) comes in, decisions go out."""

    def __init__(self, policy: WarmPolicy) -> None:
        self.policy = policy
        self._progress: dict[MigrationId, _Progress] = {}
        # How the warm-ups this leader ended ended (for /metrics).
        self.outcomes: Counter[WarmOutcome] = Counter()

    def starts(self, planned: Iterable[Migration], warming: Iterable[Migration]) -> list[Migration]:
        """The PLANNED migrations (in order) that may start warming within the bounds, given
        the migrations WARMING now."""
        per_target = Counter(x.target for x in warming)
        total = sum(per_target.values())
        out = []
        for x in planned:
            if total >= self.policy.in_flight_max:
                break
            if per_target[x.target] >= self.policy.per_worker_max:
                continue
            per_target[x.target] += 1
            total += 1
            out.append(x)
        return out

    def releasable(self, warming: Iterable[Migration], now_ms: int) -> list[MigrationId]:
        """The WARMING migrations whose warm-up is over (warm, refused or timed out); starts
        the clock of any this leader had not seen yet and forgets the ones that moved on."""
        live: set[MigrationId] = set()
        out = []
        for x in warming:
            live.add(x.migration_id)
            prog = self._track(x.migration_id, now_ms)
            if prog.outcome is None and now_ms >= prog.started_ms + self.policy.timeout_ms:
                self._end(prog, WarmOutcome.TIMED_OUT)
            if prog.outcome is not None:
                out.append(x.migration_id)
        for mid in [m for m in self._progress if m not in live]:
            del self._progress[mid]
        return out

    def poll_due(self, migration_id: MigrationId, now_ms: int) -> bool:
        """Whether to ask the target now: its warm-up is undecided and the last answer is
        `poll_ms` old."""
        prog = self._track(migration_id, now_ms)
        return prog.outcome is None and now_ms >= prog.next_poll_ms

    def observe(self, result: WarmDone, now_ms: int) -> None:
        """The target's answer: a refusal ends the warm-up cold; a loaded copy within the lag
        bound ends it warm; anything else is asked again after `poll_ms`."""
        prog = self._progress.get(result.call.migration_id)
        if prog is None or prog.outcome is not None:
            return  # the migration moved on, or a previous leadership's reply
        prog.next_poll_ms = now_ms + self.policy.poll_ms
        if not result.ok:
            # No answer at all is a target we cannot reach: its liveness decides, ask again.
            if result.code is not None:
                self._end(prog, WarmOutcome.REFUSED)
            return
        prog.loaded, prog.offset, prog.head = result.loaded, result.offset, result.head
        if result.loaded and result.head - result.offset <= self.policy.lag_records_max:
            self._end(prog, WarmOutcome.WARM)

    def lag(self, migration_id: MigrationId) -> int | None:
        """Records the target's warm copy is behind the source log's end, once loaded."""
        prog = self._progress.get(migration_id)
        if prog is None or not prog.loaded:
            return None
        return max(0, prog.head - prog.offset)

    def outcome(self, migration_id: MigrationId) -> WarmOutcome | None:
        prog = self._progress.get(migration_id)
        return None if prog is None else prog.outcome

    def _track(self, migration_id: MigrationId, now_ms: int) -> _Progress:
        prog = self._progress.get(migration_id)
        if prog is None:
            prog = self._progress[migration_id] = _Progress(started_ms=now_ms, next_poll_ms=now_ms)
        return prog

    def _end(self, prog: _Progress, outcome: WarmOutcome) -> None:
        prog.outcome = outcome
        self.outcomes[outcome] += 1
