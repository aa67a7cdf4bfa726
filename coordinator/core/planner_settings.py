"""The planner's settings: what the pure planner (`coordinator/core/planner.py`) is told.

Every field the cluster config sets (`coordinator/config.py`, mapped by
`coordinator/planner_config.py`) has no default here: its default lives in the config only,
so the leader can never plan with a value no operator sees. Only the planner's own bounds,
which no config key names, carry a default in this module. Times are monotonic
milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.placement import PlacementStrategy
from coordinator.core.retirement import RETIRE_BATCH_MAX
from coordinator.core.warmups import WarmPolicy

__all__ = ["CALLS_IN_FLIGHT_MAX", "TICK_MS_DEFAULT", "PlannerSettings"]

TICK_MS_DEFAULT = 100
CALLS_IN_FLIGHT_MAX = 64  # concurrent calls from the leader to workers


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerSettings:
    total_partitions: int
    min_cluster_size: int
    rebalance_on_join: bool
    max_concurrent_migrations: int
    # Migrations releasing or handed off with one worker as source or target.
    max_migrations_per_worker: int
    strategy: PlacementStrategy
    virtual_nodes: int
    suspect_after_ms: int
    dead_after_ms: int
    # How long a worker that said it is restarting is held.
    rejoin_grace_ms: int
    host_retry_base_ms: int
    host_retry_cap_ms: int
    checkpoint_interval_ms: int
    # The fallback chain for checkpoints that cannot be loaded (coordinator/core/fallback.py).
    fallback_after_failures: int
    full_replay_fallback: bool
    # Warm hand-offs (coordinator/core/warmups.py).
    warm: WarmPolicy
    # Load-aware placement (coordinator/core/weighted.py): how far from the mean a worker's
    # load may be before partitions move, and how old a partition's reported load may be
    # before placement falls back to counts (coordinator/core/load.py).
    balance_tolerance: float
    load_stale_ms: int
    # DEAD and LEFT workers leave the state this long after they departed (0: never), at
    # most retire_batch_max per command.
    retire_after_ms: int
    # The planner's own bounds (no config key names them).
    tick_ms: int = TICK_MS_DEFAULT
    calls_max: int = CALLS_IN_FLIGHT_MAX
    retire_batch_max: int = RETIRE_BATCH_MAX
