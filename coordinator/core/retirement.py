"""Retirement of departed workers: which DEAD and LEFT workers leave the replicated state,
and when the leader proposes it.

Owns `RetireWorkers`' apply handler (`retire`, dispatched by `coordinator/core/state.py`)
and the leader's decision (`due`, run by the planner as its last stage). Without it every
worker id ever registered stays in the state, so where ids change on every rollout the
state, every snapshot and every catch-up grow without bound; with it they hold the live
workers plus those departed within the retention window.

Invariants kept:

- only a worker that is DEAD or LEFT, departed (its record last stamped) at or before the
  command's `departed_by_ms`, and named by no in-flight migration is retired; it owns no
  partition (DEAD and LEFT workers own none), so no epoch, owner or checkpoint changes;
- fencing does not weaken: the state's `incarnation_floor` is at least every retired
  worker's incarnation and never decreases, and an id the state does not know registers at
  `incarnation_floor + 1` (`first_incarnation`), so no (worker id, incarnation) pair is
  ever issued twice and no token or call token of a retired incarnation names a current one;
- apply reads only the command's timestamps, so every replica retires the same workers; the
  leader's wall clock decides only when to propose. Retiring early (a clock that jumped)
  loses a departed worker's record, not safety: it owns nothing, and if it comes back it
  registers as a new incarnation above the floor.
"""

from __future__ import annotations

from coordinator.core.cluster import ClusterState
from coordinator.core.commands import Ok, Result, RetireResult, RetireWorkers, rejected
from coordinator.core.model import BATCH_ITEMS_MAX, DEPARTED_WORKER_STATES, WorkerId
from coordinator.core.versions import INTRODUCED_IN

__all__ = ["RETIRE_BATCH_MAX", "due", "first_incarnation", "retire"]

# Workers one RetireWorkers names: one log entry stays small (about 30 bytes an id), and a
# churning cluster retires this many per leader tick at most.
RETIRE_BATCH_MAX = 1_000
# Departed workers the leader looks at past the first one not yet due, so that a few
# workers stamped out of order (a leader change, a clock step) do not hold back the rest.
RETIRE_LOOKAHEAD_MAX = 64


def first_incarnation(state: ClusterState) -> int:
    """The incarnation of a worker id the state does not hold: above every retired one."""
    return state.incarnation_floor + 1


def _named_in_flight(state: ClusterState) -> set[WorkerId]:
    """Workers an in-flight migration names (a dead source of a handed-off one, say): kept
    until it ends, so every migration in the state names workers the state holds."""
    named: set[WorkerId] = set()
    for m in state.in_flight_migrations():
        named.add(m.source)
        named.add(m.target)
    return named


def _retirable(
    state: ClusterState, wid: WorkerId, departed_by_ms: int, named: set[WorkerId]
) -> bool:
    w = state.workers.get(wid)
    return (
        w is not None
        and w.state in DEPARTED_WORKER_STATES
        and w.updated_at_ms <= departed_by_ms
        and wid not in named
        and not state.owned_set(wid)
    )


def retire(state: ClusterState, cmd: RetireWorkers) -> Result:
    """Apply RetireWorkers: retire each named worker that is retirable now, keep the rest
    (one that registered again since the leader looked, say) and count them."""
    if len(cmd.worker_ids) > BATCH_ITEMS_MAX:
        return rejected("invalid", f"at most {BATCH_ITEMS_MAX} workers", "worker_ids")
    if len(set(cmd.worker_ids)) != len(cmd.worker_ids):
        return rejected("invalid", "a worker is listed twice", "worker_ids")
    named = _named_in_flight(state)
    going = [w for w in cmd.worker_ids if _retirable(state, w, cmd.departed_by_ms, named)]
    for wid in going:
        state.remove_worker(wid)
    return Ok(
        value=RetireResult(
            retired=len(going),
            kept=len(cmd.worker_ids) - len(going),
            incarnation_floor=state.incarnation_floor,
        )
    )


def due(
    state: ClusterState, wall_ms: int, retire_after_ms: int, batch_max: int = RETIRE_BATCH_MAX
) -> RetireWorkers | None:
    """The RetireWorkers the leader should propose now, or None: the departed workers whose
    departure is at least `retire_after_ms` old by the leader's wall clock `wall_ms`, the
    earliest first, at most `batch_max`. 0 as `retire_after_ms` turns retirement off; so
    does a cluster not yet finalized at the command's version (apply would refuse it)."""
    if retire_after_ms <= 0 or state.finalized_version < INTRODUCED_IN[RetireWorkers.TAG]:
        return None
    departed_by_ms = wall_ms - retire_after_ms
    if departed_by_ms < 0:
        return None
    named: set[WorkerId] | None = None
    picked: list[WorkerId] = []
    lookahead = 0
    for wid in state.departed():
        w = state.workers[wid]
        if w.updated_at_ms > departed_by_ms:
            lookahead += 1
            if lookahead > RETIRE_LOOKAHEAD_MAX:
                break
            continue
        if named is None:
            named = _named_in_flight(state)
        if _retirable(state, wid, departed_by_ms, named):
            picked.append(wid)
            if len(picked) >= batch_max:
                break
    if not picked:
        return None
    return RetireWorkers(worker_ids=tuple(picked), departed_by_ms=departed_by_ms, now_ms=wall_ms)
