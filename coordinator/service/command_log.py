"""What an operator sees of each command the leader's duties committed: a log line and a count.

Owns the per-command observability of the duty loop (`coordinator/service/duties.py`): who
was declared dead or retired, why a partition fell back, how a move's release began. It
decides nothing and is called only after a command committed, so a line here is a fact of
the replicated state. A line names at most DEAD_IDS_LOGGED_MAX workers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from coordinator.core.commands import (
    Command,
    DeclareDead,
    FallBack,
    MarkStuck,
    RetireWorkers,
    StartRelease,
    StartWarm,
)
from coordinator.core.fallback import target_of
from coordinator.core.planner import Planner
from coordinator.service.metrics import Metrics

__all__ = ["DEAD_IDS_LOGGED_MAX", "committed", "ids_text"]

log = logging.getLogger(__name__)

# One DeclareDead may name thousands of workers; the log line names this many and counts the rest.
DEAD_IDS_LOGGED_MAX = 20


def ids_text(ids: Sequence[str]) -> str:
    """At most DEAD_IDS_LOGGED_MAX ids, then how many more."""
    more = len(ids) - DEAD_IDS_LOGGED_MAX
    return ", ".join(ids[:DEAD_IDS_LOGGED_MAX]) + (f" and {more} more" if more > 0 else "")


def committed(cmd: Command, metrics: Metrics, planner: Planner | None) -> None:
    """Log and count one command the duties committed (`planner` tells how a warm-up ended)."""
    if isinstance(cmd, DeclareDead):
        log.warning("declared dead (%d): %s", len(cmd.worker_ids), ids_text(cmd.worker_ids))
        metrics.workers_declared_dead.inc(len(cmd.worker_ids))
    elif isinstance(cmd, RetireWorkers):
        log.info(
            "retired %d workers departed before %d: %s",
            len(cmd.worker_ids),
            cmd.departed_by_ms,
            ids_text(cmd.worker_ids),
        )
    elif isinstance(cmd, FallBack | MarkStuck):
        log.warning("partition %d: %s", cmd.partition, cmd.note)
        metrics.fallbacks.labels(to=target_of(cmd)).inc()
    elif isinstance(cmd, StartWarm):
        log.info("%s: the target warms up", cmd.migration_id)
    elif isinstance(cmd, StartRelease):
        ended = None if planner is None else planner.warmups.outcome(cmd.migration_id)
        how = "cold" if ended is None else ended.value
        log.info("%s: the source releases (%s)", cmd.migration_id, how)
        metrics.releases.labels(warm_up=how).inc()
