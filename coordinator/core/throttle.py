"""Move throttles: which PLANNED migrations may start now.

Owns the caps on migrations in flight (past PLANNED and WARMING: RELEASING or HANDED_OFF;
a warm-up's source still serves, so it holds no slot): at most
`cluster_max` in the cluster (`max_concurrent_migrations`) and at most `per_worker_max` with
any one worker as their source or target (`max_migrations_per_worker`), so a drain, a new
worker's fill or a balance cannot have one worker checkpointing, loading and replaying more
partitions at once than it has room for. Failure recovery is not a migration (DeclareDead
reassigns a dead owner's partitions at once, or hands off to a planned move's target) and so
is never held back by these caps. Invariant: starting every migration `startable` returns
keeps both caps, given the in-flight ones already keep them; candidates are taken in
creation order, so the oldest planned move that fits goes first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from coordinator.core.model import Migration, MigrationId, MigrationPhase, WorkerId

__all__ = ["startable"]


_WAITING = (MigrationPhase.PLANNED, MigrationPhase.WARMING)


def startable(
    in_flight: Iterable[Migration],
    *,
    held: AbstractSet[str],
    cluster_max: int,
    per_worker_max: int,
    ready: AbstractSet[MigrationId] | None = None,
    excluded: AbstractSet[MigrationId] = frozenset(),
) -> list[MigrationId]:
    """The PLANNED or WARMING migrations of `in_flight` (creation order) whose release may
    start now: those in `ready` (None: every one; the warm-up policy names the warm ones),
    none `excluded` (being aborted) and none touching a `held` worker (one restarting: its
    source would close its gate for nobody)."""
    migrations = list(in_flight)
    busy: Counter[WorkerId] = Counter()
    active = 0
    for x in migrations:
        if x.phase not in _WAITING:
            active += 1
            busy[x.source] += 1
            busy[x.target] += 1
    out: list[MigrationId] = []
    for x in migrations:
        if active >= cluster_max:
            break
        if x.phase not in _WAITING or held & {x.source, x.target}:
            continue
        if x.migration_id in excluded or (ready is not None and x.migration_id not in ready):
            continue
        if busy[x.source] >= per_worker_max or busy[x.target] >= per_worker_max:
            continue
        out.append(x.migration_id)
        active += 1
        busy[x.source] += 1
        busy[x.target] += 1
    return out
